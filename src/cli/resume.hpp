// resume.hpp — `flowline run --resume`: what identifies a run, the manifest beside its output, and the
// source that skips what an earlier run of the same input, flow and output wrote durably.
//
// A run with a file --output (and a file or folder input) keeps NAME.resume.json beside NAME: the run's
// identity (input path, size and hash; flow file and --set hash; endpoint and request size; output format)
// and its last sync point (documents, bytes of NAME.partial and of the sidecar's partial, the last
// document's id). The output is synced (DocumentWriter::sync(), fdatasync) every --sync-every documents or
// --sync-seconds seconds, and the manifest replaced atomically after each sync, so after a kill -9 or a
// power loss the manifest never promises more than the disk holds. A resumed run cuts NAME.partial back
// to the sync point (a torn last record goes), checks that the record there carries the id the manifest
// names, re-reads the input and skips as many documents, checking that the last one skipped has that id
// too, and appends. Outputs are written in input order, one document out per document in: a flow that
// drops or adds documents is refused when it is resumed (the ids no longer line up).
//
// Used by command_run on the main thread; ResumeLog::handed() and maybe_sync() from the response callback
// (the posting thread, which is the main thread).
#pragma once

#include "flowline/flow_config.hpp"
#include "flowline/io.hpp"
#include "flowline/writers.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace flowline::cli {

// What a run reads and runs: a resumed run must match the run that left the partial in every field.
struct RunIdentity {
  std::string input;         // as given
  std::string input_format;  // lines, paragraphs, jsonl, text
  std::uint64_t input_bytes = 0;
  std::string input_hash;     // FNV-1a 64 over the input's bytes (a folder: each file's name and bytes; images:
                              // the whole tree's, by path below the folder)
  std::string flow;           // the flow file as given
  std::string flow_hash;      // over the flow file's bytes, every --set, the endpoint and --request-size
  std::string output_format;  // jsonl, npy, safetensors
};

// Reads the input and the flow file to identify the run. Throws flowline::Error when one cannot be read.
// identify_input (any thread) fills the input's fields, reading it whole: once `*stop` is set it stops
// between blocks with an identity that must not be used; identify_flow fills the rest.
RunIdentity identify_input(const std::string& input, const std::string& input_format,
                           const std::atomic<bool>* stop = nullptr);
void identify_flow(RunIdentity& identity, const std::string& flow, const std::vector<std::string>& sets,
                   const std::string& endpoint, std::size_t request_size, const std::filesystem::path& output);
RunIdentity identify_run(const std::string& input, const std::string& input_format, const std::string& flow,
                         const std::vector<std::string>& sets, const std::string& endpoint, std::size_t request_size,
                         const std::filesystem::path& output);

// The key the run's resumable sinks (flowline/resumable_sink.hpp) keep with their progress: the identity
// without the output format (a sink's progress does not depend on --output).
std::string run_key_of(const RunIdentity& identity);

// NAME.resume.json for an output NAME.
std::filesystem::path manifest_path_for(const std::filesystem::path& output);

// Where a resumed run starts: the sync point to reopen the writer at and the id of its last document.
struct ResumePoint {
  SyncPoint at;
  std::string last_id;
};

// What --resume finds for `output`: std::nullopt when there is nothing to resume (no partial, or one
// that no document reached): the run starts from the first document. Throws flowline::Error, naming what
// differs, when the partial is not this run's (no manifest, another input, flow or format, fewer bytes
// than synced, a record whose id is not the manifest's).
std::optional<ResumePoint> find_resume_point(const std::filesystem::path& output, const RunIdentity& identity);

// --resume of complete outputs: each document of a positional input (lines, paragraphs, text: no ids of its own)
// is named by the input's hash and its position, so the last record of `output` (or of its sidecar) and of each
// JsonlWriter file of `config` says which input it was written from. A complete output of another input (one that
// grew, say) is not "nothing to resume": it would leave the new documents out in silence. Returns what differs
// (std::nullopt when nothing does, or the input carries ids of its own). Throws flowline::Error when the input
// or a record cannot be read.
std::optional<std::string> complete_of_another_input(const RunIdentity& identity, const std::string& input,
                                                     const std::string& input_format, const std::string& output,
                                                     const FlowConfig& config);

// How often the output is made durable: every `documents` documents or `seconds` seconds, whichever
// comes first (0: not by that measure; both 0: only when the run stops on a signal).
struct SyncPolicy {
  std::uint64_t documents = 0;
  double seconds = 10;
};

// Keeps NAME.resume.json up to date while a run writes NAME.partial.
class ResumeLog {
 public:
  // `sync` makes the output durable and returns the point reached. Writes the manifest at `start` (a fresh
  // run: no documents) at once. Throws flowline::Error when the manifest cannot be written.
  ResumeLog(std::filesystem::path output, RunIdentity identity, SyncPolicy policy, ResumePoint start,
            std::function<SyncPoint()> sync);
  // After the documents of a response were handed to the writer.
  void handed(const DocumentArray& docs);
  // A request failed: its documents are missing from the output, so no later point is a resume point.
  void failed() noexcept { failed_ = true; }
  // Syncs when the policy says so.
  void maybe_sync();
  // Syncs now (a run stopped on a signal) unless a request failed.
  void sync_now();
  // The output is complete under its name: the manifest goes.
  void completed() noexcept;
  std::uint64_t syncs() const noexcept { return syncs_; }
  double sync_seconds() const noexcept { return sync_seconds_; }

 private:
  void write_manifest(const ResumePoint& point) const;

  std::filesystem::path output_;
  RunIdentity identity_;
  SyncPolicy policy_;
  std::function<SyncPoint()> sync_;
  std::string last_id_;
  std::uint64_t handed_ = 0, synced_ = 0, syncs_ = 0;
  double sync_seconds_ = 0;
  std::chrono::steady_clock::time_point last_sync_;
  bool failed_ = false;
};

// Where a resumed run starts its input: the smallest point held by --output (`output`, when it has one)
// and by the flow's resumable sinks (`sinks`, by executor name, as they published it at start; one that
// published nothing holds nothing), the id of the document before it, and what each holds.
struct RunStart {
  std::uint64_t documents = 0;
  std::string last_id;
  std::map<std::string, std::uint64_t> held;  // executor name (and "--output") -> documents held
};
// Throws flowline::Error when two outputs that hold the same number of documents disagree on the last id.
RunStart choose_run_start(const std::optional<ResumePoint>& output, const std::vector<std::string>& sinks,
                          const std::string& run_key);

// The responses of a resumed run that starts before --output's sync point: drops the leading documents the
// output holds already, checking that the last one dropped has its last id (else flowline::Error).
class HeldDocuments {
 public:
  HeldDocuments(std::uint64_t count, std::string last_id) : left_(count), last_id_(std::move(last_id)) {}
  void drop(DocumentArray& docs);

 private:
  std::uint64_t left_;
  std::string last_id_;
};

// The input of a resumed run: gives every document of a lines, paragraphs or text input an id from the
// input's hash and its position (so a rerun names them as the first run did), and skips the first
// `skip` documents, checking that the last one skipped has `last_id` (else InputError: the output's
// documents are not this input's, in this order). With a `positions_key` (a jsonl input, whose documents
// keep their ids, under a flow with resumable sinks), each document read after the skipped ones is posted
// on that run's position board (post_input_positions); the run retires it when its response comes back.
class ResumeSource : public DocumentSource {
 public:
  ResumeSource(DocumentSource& inner, bool positional_ids, std::string input_hash, std::uint64_t skip,
               std::string last_id, std::string positions_key = {});
  const std::string& positions_key() const noexcept { return positions_key_; }
  // Skips the documents the output holds (read() does it first when not done yet) through the inner source's
  // skip(), which finds their boundaries without building them, and checks the last one's id. Throws
  // InputError.
  void skip();
  std::size_t read(DocumentArray& out, std::size_t max) override;
  // Passes over `n` more documents after those (the inner source's skip(); a positional id as read() would
  // give it).
  Skipped skip(std::uint64_t n) override;
  // What the inner source has left after the skipped documents (skips them first when not done yet).
  std::optional<std::uint64_t> count_left() override;
  std::uint64_t skipped() const noexcept { return skipped_; }

 private:
  DocumentSource& inner_;
  bool positional_ids_;
  std::string input_hash_;
  std::uint64_t skip_, skipped_ = 0, position_ = 0;
  std::string last_id_;
  std::string positions_key_;
};

}  // namespace flowline::cli
