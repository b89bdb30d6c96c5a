// TextStats: counts characters (code points), words and lines of each document's text into its tags
// "chars", "words" and "lines". A user-facing executor for quick looks at a corpus.
#include "../builtin.hpp"

#include "flowline/executor.hpp"

#include <cstdint>

namespace flowline::builtin {
namespace {

class TextStats : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{"TextStats", "Count characters (code points), words and lines of each text into tags", {}, {}};
  }
  explicit TextStats(const ExecutorContext& context) : Executor(context) { bind_default(&TextStats::count); }

 private:
  void count(DocumentArray& docs) {
    for (auto& doc : docs) {
      std::int64_t chars = 0, words = 0, lines = doc.text.empty() ? 0 : 1;
      bool in_word = false;
      for (char ch : doc.text) {
        const auto c = static_cast<unsigned char>(ch);
        chars += (c & 0xC0) != 0x80;
        lines += c == '\n';
        const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (!space && !in_word) ++words;
        in_word = !space;
      }
      doc.tags["chars"] = chars;
      doc.tags["words"] = words;
      doc.tags["lines"] = lines;
    }
  }
};

}  // namespace

void register_text_stats(Registry& registry) { registry.add<TextStats>("built-in"); }

}  // namespace flowline::builtin
