// TextSplitter: splits each document's text into paragraphs or sentences, keeping character offsets
// into the source text (tags start/end, in code points) so results can be traced back.
//
//   with:
//     unit: paragraph | sentence
//     output: documents | chunks   # replace the batch with the pieces, or attach them as chunks
#include "../builtin.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/text.hpp"

#include <fmt/format.h>

namespace flowline::builtin {
namespace {

class TextSplitter : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{
        "TextSplitter",
        "Split text into paragraphs or sentences, with character offsets (tags start, end) into the source",
        {ParamSpec::choice("unit", {"paragraph", "sentence"}, "paragraph", "what one piece is"),
         ParamSpec::choice("output", {"documents", "chunks"}, "documents",
                           "documents: the pieces replace their source in the batch (parent_id links them); "
                           "chunks: the pieces become the source's chunks"),
         ParamSpec::optional("min_chars", ParamType::Int, 1, "drop pieces shorter than this many characters").min(0)},
        {},
    };
  }

  explicit TextSplitter(const ExecutorContext& context) : Executor(context) {
    // unit, output and min_chars were checked against their declared choices and bounds by validation.
    sentences_ = params().get<std::string>("unit") == "sentence";
    as_chunks_ = params().get<std::string>("output") == "chunks";
    min_chars_ = params().get<std::size_t>("min_chars");
    bind_default(&TextSplitter::split);
  }

 private:
  void split(DocumentArray& docs) {
    DocumentArray pieces_out;
    for (auto& doc : docs) {
      const auto spans = sentences_ ? split_sentences(doc.text) : split_paragraphs(doc.text);
      DocumentArray pieces;
      pieces.reserve(spans.size());
      std::int64_t index = 0;
      for (const auto& span : spans) {
        if (span.char_end - span.char_begin < min_chars_) continue;
        Document piece(doc.text.substr(span.byte_begin, span.byte_end - span.byte_begin));
        piece.parent_id = doc.id;
        piece.uri = doc.uri;
        piece.mime_type = "text/plain";
        piece.tags["index"] = index++;
        piece.tags["start"] = static_cast<std::int64_t>(span.char_begin);
        piece.tags["end"] = static_cast<std::int64_t>(span.char_end);
        piece.tags["line"] = static_cast<std::int64_t>(span.line);
        pieces.push_back(std::move(piece));
      }
      if (as_chunks_) {
        doc.chunks = std::move(pieces);
      } else {
        pieces_out.append(std::move(pieces));
      }
    }
    if (!as_chunks_) docs = std::move(pieces_out);
  }

  bool sentences_ = false;
  bool as_chunks_ = false;
  std::size_t min_chars_ = 1;
};

}  // namespace

void register_text_splitter(Registry& registry) { registry.add<TextSplitter>("built-in"); }

}  // namespace flowline::builtin
