// TsvWriter: writes chosen fields of documents (or of their chunks) as rows of one TSV file, which it
// alone owns (one replica). Documents pass on unchanged. Tabs and newlines inside values are escaped as
// \t and \n so every row stays one line. The file is an OutputFile (flowline/output_file.hpp): written as
// PATH.partial, renamed when the run ends well, left PATH.partial after a run cut short (removed when no
// row reached it).
//
// A resumable sink (flowline/resumable_sink.hpp): under `flowline run` it keeps PATH.resume.json (documents,
// bytes, last document id), replaced after each fdatasync (every sync_every documents / sync_seconds), so
// `flowline run --resume` cuts PATH.partial back to the last sync point and appends the rows of the
// documents after it. TSV rows carry no document id: the sync point is checked by the file's length and
// the id of the input document there.
//
//   with:
//     path: entities.tsv
//     rows: chunks                          # documents (default) or chunks
//     columns: [parent.tags.paragraph, text, tags.label, tags.start, tags.end]
#include "../builtin.hpp"

#include "flowline/document_fields.hpp"
#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/output_file.hpp"
#include "flowline/resumable_sink.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

namespace flowline::builtin {
namespace {

class TsvWriter : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec s{
        "TsvWriter",
        "Write chosen fields of documents or their chunks as TSV rows (single owner of the file)",
        {ParamSpec::required_param("path", ParamType::Path,
                                   "output file, written as PATH.partial and renamed when the run completes")
             .output_file(),
         ParamSpec::required_param("columns", ParamType::StringList,
                                   "fields: id, text, uri, mime_type, parent_id, tags.KEY, scores.NAME; with "
                                   "rows: chunks also parent.FIELD"),
         ParamSpec::choice("rows", {"documents", "chunks"}, "documents", "one row per document or per chunk"),
         ParamSpec::optional("header", ParamType::Bool, true, "write the column names as the first row")},
        {},
    };
    for (auto& p : resumable_sink_params()) s.params.push_back(std::move(p));
    s.max_replicas = 1;
    return s;
  }

  explicit TsvWriter(const ExecutorContext& context) : Executor(context), progress_(params(), runtime().name) {
    path_ = params().get<std::string>("path");
    columns_ = params().get<std::vector<std::string>>("columns");
    if (columns_.empty()) throw Error("parameter 'columns': name at least one column");
    chunks_ = params().get<std::string>("rows") == "chunks";  // a declared choice, checked by validation
    for (const auto& c : columns_) check_column(c);
    SinkPoint held;
    if (progress_.resuming()) {
      if (auto point = read_sink_manifest(path_, progress_.run_key()); point && point->documents > 0) held = *point;
    }
    if (held.documents > 0) {
      out_ = std::make_unique<OutputFile>(path_, OutputFile::Resume{held.bytes});
    } else {
      out_ = std::make_unique<OutputFile>(path_);
      if (params().get<bool>("header")) fail_on(out_->write(fmt::format("{}\n", fmt::join(columns_, "\t"))));
    }
    progress_.held(held);
    if (progress_.enabled()) write_sink_manifest(path_, progress_.run_key(), held);
    bind_default(&TsvWriter::write);
  }

  void close() override {
    if (run_outcome() == RunOutcome::Complete) {
      if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) write_in_order(rest);
      out_->commit();
      if (progress_.enabled()) remove_sink_manifest(path_);
      return;
    }
    if (progress_.enabled()) sync();  // a --resume continues exactly where this run stopped
    // Documents held back for order behind a failed request's gap go in after that sync point, so the partial
    // keeps every document that was handed over; a --resume cuts the file back to the sync point first.
    if (const DocumentArray rest = progress_.release_held_back(); !rest.empty()) write_rows(rest, 0);
    const bool keep = rows_ > 0 || progress_.point().documents > 0;
    if (const auto left = out_->leave_partial(keep); !left.empty()) {
      spdlog::warn("executor '{}': the run did not complete; what was written is in '{}'", runtime().name,
                   left.string());
    } else if (progress_.enabled()) {
      remove_sink_manifest(path_);
    }
  }

 private:
  // The text fields a column may name, from the table of Document fields: id, text, mime_type, uri, parent_id.
  static std::vector<std::string_view> text_fields() {
    std::vector<std::string_view> names;
    for_each_document_field([&](DocumentField, std::string_view name, auto member) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(std::declval<const Document&>().*member)>, std::string>)
        names.push_back(name);
    });
    return names;
  }

  // The value of text field `name` of `doc`, or nullptr when `name` is no text field.
  static const std::string* text_field(const Document& doc, std::string_view name) {
    const std::string* value = nullptr;
    for_each_document_field([&](DocumentField, std::string_view field, auto member) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(doc.*member)>, std::string>) {
        if (field == name) value = &(doc.*member);
      }
    });
    return value;
  }

  void check_column(const std::string& column) const {
    std::string_view c = column;
    if (c.rfind("parent.", 0) == 0) {
      if (!chunks_) throw Error(fmt::format("column '{}': parent.* columns need rows: chunks", column));
      c.remove_prefix(7);
    }
    const auto names = text_fields();
    if (std::find(names.begin(), names.end(), c) != names.end()) return;
    if ((c.rfind("tags.", 0) == 0 && c.size() > 5) || (c.rfind("scores.", 0) == 0 && c.size() > 7)) return;
    throw Error(fmt::format("column '{}': expected {}, tags.KEY or scores.NAME", column, fmt::join(names, ", ")));
  }

  // Tab, newline, carriage return and backslash as \t, \n, \r and \\: one row per line, one cell per tab.
  static void append_escaped(std::string& out, std::string_view value) {
    for (char ch : value) {
      const char* escaped = ch == '\t'   ? "\\t"
                            : ch == '\n' ? "\\n"
                            : ch == '\r' ? "\\r"
                            : ch == '\\' ? "\\\\"
                                         : nullptr;
      if (escaped) {
        out += escaped;
      } else {
        out += ch;
      }
    }
  }

  static void append_field(std::string& out, const Document& doc, std::string_view c) {
    if (const std::string* value = text_field(doc, c)) return append_escaped(out, *value);
    if (c.rfind("tags.", 0) == 0) {
      const auto* v = doc.tags.if_contains(c.substr(5));
      if (!v || v->is_null()) return;
      if (v->is_string()) return append_escaped(out, v->get_string());
      return append_escaped(out, boost::json::serialize(*v));
    }
    auto it = doc.scores.find(c.substr(7));
    if (it != doc.scores.end()) fmt::format_to(std::back_inserter(out), "{}", it->second);
  }

  static void fail_on(const std::string& error) {
    if (!error.empty()) throw Error(error);
  }

  void append_row(const Document& row, const Document* parent) {
    ++rows_;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      if (i) buffer_ += '\t';
      std::string_view c = columns_[i];
      if (c.rfind("parent.", 0) == 0) {
        append_field(buffer_, *parent, c.substr(7));
      } else {
        append_field(buffer_, row, c);
      }
    }
    buffer_ += '\n';
  }

  // Under a resumed run, the rows of the leading documents the file holds already are not written again.
  // Batches go through order() first when the run's ids are positional (resumable_sink.hpp).
  void write(DocumentArray& docs, const RequestInfo& request) {
    if (progress_.orders(request)) return write_in_order(progress_.order(docs));
    write_in_order(docs);
  }

  void write_in_order(const DocumentArray& docs) {
    write_rows(docs, progress_.skip(docs));
    progress_.wrote(docs);
    if (progress_.sync_due()) sync();
  }

  // The rows of docs[from...] (their chunks' rows with `chunks`), appended to the file.
  void write_rows(const DocumentArray& docs, std::size_t from) {
    buffer_.clear();
    for (std::size_t i = from; i < docs.size(); ++i) {
      const Document& doc = docs[i];
      if (chunks_) {
        for (const auto& chunk : doc.chunks) append_row(chunk, &doc);
      } else {
        append_row(doc, nullptr);
      }
    }
    check_output_bound(path_, out_->bytes(), buffer_.size(), runtime().max_output_bytes);
    fail_on(out_->write(buffer_));
  }

  // Syncs the file and records the point in PATH.resume.json (after the data: it never names more).
  void sync() {
    if (!progress_.unsynced()) return;
    SinkPoint point = progress_.point();
    fail_on(out_->sync());
    point.bytes = out_->bytes();
    write_sink_manifest(path_, progress_.run_key(), point);
    progress_.synced();
  }

  std::string path_;
  std::vector<std::string> columns_;
  bool chunks_ = false;
  SinkProgress progress_;
  std::unique_ptr<OutputFile> out_;
  std::string buffer_;
  std::uint64_t rows_ = 0;  // rows handed to the file (the header not counted)
};

}  // namespace

void register_tsv_writer(Registry& registry) { registry.add<TsvWriter>("built-in"); }

}  // namespace flowline::builtin
