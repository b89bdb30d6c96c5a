// JsonlWriter: appends every document it sees to one JSONL file, which it alone owns (one replica), as
// the scenarios advise for output files. Documents pass on unchanged. Formatting runs on a pool of threads
// (the library's JSONL DocumentWriter, writers.hpp), so the file keeps up with a GPU encoder. The file is
// written as PATH.partial and renamed to PATH when the run ends well; after a run cut short it stays
// PATH.partial (a warning says so), or is removed when no document reached it.
//
//   with:
//     path: out.jsonl
//     fields: [id, text, tags, embedding]   # optional: write only these fields
//     threads: 0                            # formatting threads; 0: one per hardware thread (at most 8)
#include "../builtin.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/output_file.hpp"
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
    s.max_replicas = 1;
    return s;
  }

  explicit JsonlWriter(const ExecutorContext& context) : Executor(context) {
    WriterOptions options;
    try {
      options.fields = FieldSet::parse(params().get<std::vector<std::string>>("fields"));
    } catch (const Error& e) {
      throw Error(fmt::format("parameter 'fields': {}", e.what()));
    }
    options.threads = static_cast<std::size_t>(params().get<std::int64_t>("threads"));
    writer_ = open_jsonl_writer(params().get<std::string>("path"), options);
    bind_default(&JsonlWriter::write);
  }

  void close() override {
    if (run_outcome() == RunOutcome::Complete) {
      writer_->close();
    } else if (const auto left = writer_->close_partial(); !left.empty()) {
      spdlog::warn("executor '{}': the run did not complete; what was written is in '{}'", runtime().name,
                   left.string());
    }
    report();
  }

 private:
  // In a served flow, a request is refused once the file holds max_output_bytes (what its formatting threads
  // have formatted by then: the file may pass the bound by the requests they are still formatting).
  void write(DocumentArray& docs) {
    const WriterStats now = writer_->stats();
    check_output_bound(writer_->path(), std::max(now.bytes, now.formatted_bytes), 1, runtime().max_output_bytes);
    writer_->write(static_cast<const DocumentArray&>(docs));
    report();
  }

  // Adds what the writer did since the last report to this replica's metrics.
  void report() {
    const WriterStats now = writer_->stats();
    metrics().add("format_seconds", now.format_seconds - reported_.format_seconds);
    metrics().add("write_seconds", now.write_seconds - reported_.write_seconds);
    metrics().add("bytes", static_cast<double>(now.bytes - reported_.bytes));
    reported_ = now;
  }

  std::unique_ptr<DocumentWriter> writer_;
  WriterStats reported_;
};

}  // namespace

void register_jsonl_writer(Registry& registry) { registry.add<JsonlWriter>("built-in"); }

}  // namespace flowline::builtin
