// JsonlWriter: appends every document it sees to one JSONL file, which it alone owns (one replica), as
// the scenarios advise for output files. Documents pass on unchanged. Formatting runs on a pool of threads
// (the library's JSONL DocumentWriter, writers.hpp), so the file keeps up with a GPU encoder. The file is
// written as PATH.partial and renamed to PATH when the run ends well; after a run cut short it stays
// PATH.partial (a warning says so), or is removed when no document reached it.
//
// A resumable sink (flowline/resumable_sink.hpp): under `flowline run` it keeps PATH.resume.json, replaced
// after each sync (every sync_every documents / sync_seconds: the file fdatasynced first), so `flowline run
// --resume` cuts PATH.partial back to the last sync point, checks the record there, and appends from there.
//
//   with:
//     path: out.jsonl
//     fields: [id, text, tags, embedding]   # optional: write only these fields
//     threads: 0                            # formatting threads; 0: one per hardware thread (at most 8)
#include "../builtin.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/output_file.hpp"
#include "flowline/resumable_sink.hpp"
#include "flowline/writers.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace flowline::builtin {
namespace {

class JsonlWriter : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec s{
        "JsonlWriter",
        "Write every document to one JSONL file (the single owner of that file); documents pass on unchanged",
        {ParamSpec::required_param("path", ParamType::Path,
                                   "output file, written as PATH.partial and renamed when the run completes")
             .output_file(),
         ParamSpec::choice_list("fields", {kDocumentFieldNames.begin(), kDocumentFieldNames.end()}, {},
                                "fields to write (empty: all); id is always written"),
         ParamSpec::optional("threads", ParamType::Int, 0, "formatting threads; 0: one per hardware thread (at most 8)")
             .min(0)
             .max(256)},
        {},
    };
    for (auto& p : resumable_sink_params()) s.params.push_back(std::move(p));
    s.max_replicas = 1;
    return s;
  }

  explicit JsonlWriter(const ExecutorContext& context) : Executor(context), progress_(params(), runtime().name) {
    WriterOptions options;
    try {
      options.fields = FieldSet::parse(params().get<std::vector<std::string>>("fields"));
    } catch (const Error& e) {
      throw Error(fmt::format("parameter 'fields': {}", e.what()));
    }
    options.threads = static_cast<std::size_t>(params().get<std::int64_t>("threads"));
    const std::string path = params().get<std::string>("path");
    SinkPoint held;
    if (progress_.resuming()) {
      if (auto point = read_sink_manifest(path, progress_.run_key()); point && point->documents > 0) {
        const std::string id = jsonl_id_ending_at(partial_path_for(path), point->bytes);
        if (id != point->last_id) {
          throw Error(
              fmt::format("'{}': the record at the sync point is '{}', its manifest says '{}': not this "
                          "run's partial (refused, nothing appended)",
                          partial_path_for(path).string(), id, point->last_id));
        }
        options.resume_from = SyncPoint{point->documents, point->bytes, 0};
        held = *point;
      }
    }
    writer_ = open_jsonl_writer(path, options);
    progress_.held(held);
    if (progress_.enabled()) write_sink_manifest(path, progress_.run_key(), held);
    bind_default(&JsonlWriter::write);
  }

  void close() override {
    if (run_outcome() == RunOutcome::Complete) {
      if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) write_in_order(rest);
      writer_->close();
      if (progress_.enabled()) remove_sink_manifest(writer_->path());
    } else {
      // What was handed over is made durable, so a --resume continues exactly here.
      if (progress_.enabled()) sync();
      // Documents held back for order behind a failed request's gap go in after that sync point, so the
      // partial keeps every document that was handed over; a --resume cuts the file back to the sync point.
      if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) writer_->write(rest);
      if (const auto left = writer_->close_partial(); !left.empty()) {
        spdlog::warn("executor '{}': the run did not complete; what was written is in '{}'", runtime().name,
                     left.string());
      } else if (progress_.enabled()) {
        remove_sink_manifest(writer_->path());
      }
    }
    report();
  }

 private:
  // In a served flow, a request is refused once the file holds max_output_bytes (what its formatting threads
  // have formatted by then: the file may pass the bound by the requests they are still formatting).
  // Under a resumed run, the leading documents the file holds already are not written again.
  // Batches go through order() first when the run's ids are positional (resumable_sink.hpp).
  void write(DocumentArray& docs, const RequestInfo& request) {
    if (progress_.orders(request)) return write_in_order(progress_.order(docs));
    write_in_order(docs);
  }

  void write_in_order(const DocumentArray& docs) {
    const WriterStats now = writer_->stats();
    check_output_bound(writer_->path(), std::max(now.bytes, now.formatted_bytes), 1, runtime().max_output_bytes);
    const std::size_t held = progress_.skip(docs);
    if (held == 0) {
      writer_->write(docs);
    } else if (held < docs.size()) {
      writer_->write(DocumentArray(
          std::vector<Document>(docs.docs().begin() + static_cast<std::ptrdiff_t>(held), docs.docs().end())));
    }
    progress_.wrote(docs);
    if (progress_.sync_due()) sync();
    report();
  }

  // Syncs the file and records the point in PATH.resume.json (after the data: it never names more).
  void sync() {
    if (!progress_.unsynced()) return;
    const SyncPoint at = writer_->sync();
    SinkPoint point = progress_.point();
    if (at.documents != point.documents) {
      throw Error(fmt::format("'{}': synced {} documents, {} were handed over",
                              partial_path_for(writer_->path()).string(), at.documents, point.documents));
    }
    point.bytes = at.bytes;
    write_sink_manifest(writer_->path(), progress_.run_key(), point);
    progress_.synced();
  }

  // Adds what the writer did since the last report to this replica's metrics.
  void report() {
    const WriterStats now = writer_->stats();
    metrics().add("format_seconds", now.format_seconds - reported_.format_seconds);
    metrics().add("write_seconds", now.write_seconds - reported_.write_seconds);
    metrics().add("bytes", static_cast<double>(now.bytes - reported_.bytes));
    reported_ = now;
  }

  SinkProgress progress_;
  std::unique_ptr<DocumentWriter> writer_;
  WriterStats reported_;
};

}  // namespace

void register_jsonl_writer(Registry& registry) { registry.add<JsonlWriter>("built-in"); }

}  // namespace flowline::builtin
