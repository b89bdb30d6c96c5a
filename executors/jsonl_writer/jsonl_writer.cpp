// JsonlWriter: appends every document it sees to one JSONL file, which it alone owns (one replica), as
// the scenarios advise for output files. Documents pass on unchanged.
//
//   with:
//     path: out.jsonl
//     fields: [id, text, tags, embedding]   # optional: write only these fields
#include "../builtin.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/io.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

namespace flowline::builtin {
namespace {

class JsonlWriter : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec s{
        "JsonlWriter",
        "Write every document to one JSONL file (the single owner of that file); documents pass on unchanged",
        {ParamSpec::required_param("path", ParamType::String, "output file, truncated at start"),
         ParamSpec::optional("fields", ParamType::StringList, boost::json::array{},
                             "fields to write (empty: all); id is always written")},
        {},
    };
    s.max_replicas = 1;
    return s;
  }

  explicit JsonlWriter(const ExecutorContext& context) : Executor(context) {
    path_ = params().get<std::string>("path");
    for (const auto& f : params().get<std::vector<std::string>>("fields")) fields_.insert(f);
    static const std::set<std::string> known = {"text", "blob", "tensor", "embedding", "tags", "mime_type",
                                                "uri", "scores", "chunks", "matches", "parent_id", "id"};
    for (const auto& f : fields_) {
      if (!known.count(f)) throw Error(fmt::format("parameter 'fields': unknown document field '{}'", f));
    }
    const std::filesystem::path parent = std::filesystem::path(path_).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    out_.open(path_, std::ios::binary | std::ios::trunc);
    if (!out_) throw Error(fmt::format("cannot write '{}': {}", path_, std::strerror(errno)));
    bind_default(&JsonlWriter::write);
  }

  void close() override {
    out_.flush();
    if (!out_) throw Error(fmt::format("writing '{}' failed", path_));
    out_.close();
  }

 private:
  void write(DocumentArray& docs) {
    buffer_.clear();
    for (const auto& doc : docs) {
      if (fields_.empty()) {
        append_json(buffer_, doc);
      } else {
        append_json(buffer_, selected(doc));
      }
      buffer_ += '\n';
    }
    out_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    if (!out_) throw Error(fmt::format("writing '{}' failed: {}", path_, std::strerror(errno)));
  }

  Document selected(const Document& doc) const {
    Document out;
    out.id = doc.id;
    auto want = [&](const char* f) { return fields_.count(f) > 0; };
    if (want("text")) out.text = doc.text;
    if (want("blob")) out.blob = doc.blob;
    if (want("tensor")) out.tensor = doc.tensor;
    if (want("embedding")) out.embedding = doc.embedding;
    if (want("tags")) out.tags = doc.tags;
    if (want("mime_type")) out.mime_type = doc.mime_type;
    if (want("uri")) out.uri = doc.uri;
    if (want("scores")) out.scores = doc.scores;
    if (want("chunks")) out.chunks = doc.chunks;
    if (want("matches")) out.matches = doc.matches;
    if (want("parent_id")) out.parent_id = doc.parent_id;
    return out;
  }

  std::string path_;
  std::set<std::string> fields_;
  std::ofstream out_;
  std::string buffer_;
};

}  // namespace

void register_jsonl_writer(Registry& registry) { registry.add<JsonlWriter>("built-in"); }

}  // namespace flowline::builtin
