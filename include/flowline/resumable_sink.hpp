// flowline/resumable_sink.hpp — an executor that keeps what the flow hands it somewhere durable (a file, a
// table, an index) and continues there after a crash: `flowline run --resume` for sinks (issue 55 §1).
//
// Contract between `flowline run` (the run) and a resumable sink (an executor):
//  - The sink's spec declares resumable_sink_params() (resume, run_key, sync_every, sync_seconds); the run
//    recognises a sink by them (is_resumable_sink) and, for a run from a file or folder input, sets
//    run_key (a key of its input and flow) and, under --resume, resume: true. A flow run any other way (serve,
//    Python, standard input) leaves run_key empty: the sink keeps no progress and writes as a plain writer.
//  - The sink owns a SinkProgress, made in its constructor from its params. With resuming(), the constructor
//    finds what it holds durably (a file's PATH.resume.json and the file cut back to it, a table's progress
//    row, ...), refusing (throwing flowline::Error) what is not this run's, and calls held(point); a fresh
//    run calls held({}). held() publishes the point for the run (held_sink_points(run_key)).
//  - Once every sink replica published (held_sink_publications(), while Flow::start() goes on: the run
//    finds where its input starts beside the executors' start) or Flow::start() returned, the run reads
//    held_sink_points(), starts the input at the smallest point S (every sink holds the documents before S)
//    and posts with request parameter kResumeFromParam = S.
//  - Each handler call asks skip(docs, request) how many leading documents of the batch the sink holds
//    already; SinkProgress checks that the last one it held carries the held point's id (else throws
//    flowline::Error: the documents are not this run's, or not in input order). The sink writes the rest,
//    calls wrote(docs) and, when sync_due(), makes what it wrote durable and records point() (a file sink:
//    write_sink_manifest after fdatasync; a table: in the same transaction) and calls synced().
//  - Positions count input documents, so a sink must see its documents in input order (or, with several
//    replicas, keep the set of positions it wrote: position_of(); such a sink sets ExecutorSpec::replicated_sink,
//    publishes the same held() point from every replica, and the run then accepts replicas > 1 under --resume).
//    Replicas before it finish requests in any order: the sink first passes each batch through order(), which holds
//    documents back until those before them came and hands them out in input order (a file is then written in input
//    order whatever the replicas). order() learns a document's input position from its id: a run whose ids
//    are positional (kPositionalIdsParam: a lines, paragraphs or text input) names it in the id; a run whose
//    documents keep their own ids (kInputPositionsParam: a jsonl input) posts each document's position on
//    the position board (post_input_positions, as it reads the document) and retires it once the document's
//    response came back (retire_input_positions), so the sinks, which see it before that, look it up there.
//    The user's ids pass unchanged. Two documents in flight under one id have no position by id: order()
//    then gives up (below).
// One SinkProgress belongs to one executor replica and is used on its thread; held_sink_points() and
// publish are thread-safe.
#pragma once

#include "flowline/document.hpp"
#include "flowline/params.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

struct ExecutorSpec;
struct RequestInfo;

// The request parameter carrying the input position of a run's first posted document.
inline constexpr const char* kResumeFromParam = "flowline_resume_from";
// The request parameter naming the input hash when the run's document ids are positional
// (`<16 hex digits of the hash><16 hex digits of the position>`, flowline run for a lines, paragraphs or
// text input): a sink then puts documents back in input order (SinkProgress::order).
inline constexpr const char* kPositionalIdsParam = "flowline_positional_ids";

// A positional id: the input hash (16 hex digits, as RunIdentity's input_hash) then the document's input
// position as 16 hex digits. The one maker and the one reader of that format; any thread.
std::string positional_id(std::string_view input_hash, std::uint64_t position);
struct PositionalId {
  std::string_view input_hash;  // into the id read
  std::uint64_t position = 0;
};
// The parts of `id` when it has that format (32 hex digits), else nothing.
std::optional<PositionalId> read_positional_id(std::string_view id);
// The request parameter naming the run key when the run's documents keep their own ids and their input
// positions are on the position board (post_input_positions; flowline run for a jsonl input).
inline constexpr const char* kInputPositionsParam = "flowline_input_positions";

// How far a sink holds the run's input durably: the first `documents` input documents, the last of them
// `last_id`; `bytes`: a file sink's file length there (0 for others).
struct SinkPoint {
  std::uint64_t documents = 0;
  std::string last_id;
  std::uint64_t bytes = 0;
  bool operator==(const SinkPoint&) const = default;
};

// resume, run_key, sync_every, sync_seconds: appended to a resumable sink's spec params.
std::vector<ParamSpec> resumable_sink_params();
bool is_resumable_sink(const ExecutorSpec& spec);

// What the sinks of run `run_key` in this process hold, by executor name (the smallest over its replicas).
std::map<std::string, SinkPoint> held_sink_points(const std::string& run_key);
// How many replicas of each sink of run `run_key` published their held point so far: the run may read
// held_sink_points() before Flow::start() returns once every replica of every sink published.
std::map<std::string, std::size_t> held_sink_publications(const std::string& run_key);

// The position board of run `run_key` (thread-safe): post_input_positions records that docs[i] is input
// document first + i (the run, on its reading thread, before the documents are posted); an id posted
// again while the first is still in flight has no position until both are retired. retire_input_positions
// forgets the documents of a response (the run, on its posting thread, once no executor holds them).
void post_input_positions(const std::string& run_key, std::span<const Document> docs, std::uint64_t first);
void retire_input_positions(const std::string& run_key, const DocumentArray& docs);
// The input position of the document in flight with this id, or nothing (none, or two with this id).
std::optional<std::uint64_t> input_position(const std::string& run_key, const std::string& id);

class SinkProgress {
 public:
  // Reads resume, run_key, sync_every and sync_seconds from the executor's params.
  SinkProgress(const Params& params, std::string executor);
  bool enabled() const noexcept { return !run_key_.empty(); }
  bool resuming() const noexcept { return resume_ && enabled(); }
  const std::string& run_key() const noexcept { return run_key_; }
  // Keeps no progress after all (a sink that cannot count input positions, e.g. one of several replicas).
  void disable() noexcept {
    run_key_.clear();
    resume_ = false;
  }
  // What the sink holds at start; published for the run when enabled().
  void held(SinkPoint point);
  // Whether the sink can learn its documents' input positions (positional ids, or the position board), so
  // that batches go through order() first.
  bool orders(const RequestInfo& request);
  // The documents, of this batch and of earlier ones held back, that come next in input order (by their
  // positional ids, or by the position board). Keeps copies of the documents it holds back (at most kMaxHeldBack: past
  // that, or for a document whose id is no input position, it gives up ordering, hands out everything it has and keeps
  // no more progress, so a --resume goes back to the last point recorded before).
  DocumentArray order(const DocumentArray& docs);
  // A document's input position, by its positional id or the position board (after orders() said true); none
  // for a document that has none. For a sink that tracks positions itself instead of calling order() (several
  // replicas of one writer, each seeing only its share: the PgVectorWriter).
  std::optional<std::uint64_t> position_of(const Document& doc) const;
  // Documents still held back (a run that lost a request: they come after its gap), in position order.
  DocumentArray release_held_back();
  static constexpr std::size_t kMaxHeldBack = 65536;
  // How many leading documents of `docs` the sink holds already. Throws flowline::Error when the last held
  // document has another id than held() said, or when the run starts past what this sink holds.
  // (orders() ran first for the request: it reads where the run starts.)
  std::size_t skip(const DocumentArray& docs);
  // `docs` (the whole batch skip() saw) went to the sink.
  void wrote(const DocumentArray& docs);
  // Whether sync_every documents or sync_seconds passed since the last sync (enabled() only).
  bool sync_due() const;
  // Whether the sink was handed documents past what it held and what it last synced (a sync would move on).
  bool unsynced() const noexcept { return !gave_up_ && position_ > held_.documents && position_ > synced_position_; }
  // What the sink has been handed so far (bytes: 0, the caller fills in its own); before its first batch, what
  // it held at start (a resumed run that posts nothing leaves the sink where it was, not at 0).
  SinkPoint point() const {
    return started_ ? SinkPoint{position_, last_id_, 0} : SinkPoint{held_.documents, held_.last_id, 0};
  }
  void synced();

 private:
  std::string executor_, run_key_;
  bool resume_ = false;
  std::uint64_t sync_every_ = 0;
  double sync_seconds_ = 10;
  SinkPoint held_;
  bool started_ = false;
  bool gave_up_ = false;  // order() met what it cannot order: no more progress is recorded
  void start(const RequestInfo& request);
  std::string positional_;                       // the input hash of positional ids; empty: not by ids
  bool by_board_ = false;                        // positions from the position board (a jsonl input)
  std::map<std::uint64_t, Document> held_back_;  // position -> document, waiting for those before it
  std::uint64_t next_ = 0;                       // the next position order() hands out
  std::uint64_t position_ = 0, synced_position_ = 0;
  std::string last_id_;
  std::chrono::steady_clock::time_point last_sync_ = std::chrono::steady_clock::now();
};

// A file sink's progress: PATH.resume.json beside PATH.partial.
std::filesystem::path sink_manifest_path(const std::filesystem::path& path);
// Replaces the manifest atomically (written aside, fsynced, renamed). Throws flowline::Error.
void write_sink_manifest(const std::filesystem::path& path, const std::string& run_key, const SinkPoint& point);
// What PATH.partial holds for run `run_key`: std::nullopt when neither partial nor manifest exists. Throws
// flowline::Error, naming what differs, for a partial without a manifest, a manifest of another run, or a
// partial shorter than its sync point.
std::optional<SinkPoint> read_sink_manifest(const std::filesystem::path& path, const std::string& run_key);
// The same for a sink without a PATH.partial (a table, an index's workspace): only the manifest is read;
// std::nullopt when there is none. Throws flowline::Error for a manifest of another run or one unreadable.
std::optional<SinkPoint> read_sink_progress(const std::filesystem::path& path, const std::string& run_key);
void remove_sink_manifest(const std::filesystem::path& path) noexcept;
// The id of the JSONL record that ends at byte `end` of `file` (checked against a manifest's last id).
// Throws flowline::Error when no whole record with an id ends there.
std::string jsonl_id_ending_at(const std::filesystem::path& file, std::uint64_t end);

}  // namespace flowline
