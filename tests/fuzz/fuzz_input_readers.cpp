// Fuzz target: the input readers of `flowline run` — lines, paragraphs, JSONL, whole text, images, and the
// npy and safetensors arrays — on any bytes (invalid UTF-8, CRLF, NUL, huge lines, headers that lie about
// their sizes). The first byte picks the format, the rest is the file.
// Properties: a bad input is an InputError naming the file and a line; every document read is valid
// UTF-8 with a uri; lines and paragraphs carry their 1-based "line" tag, increasing.
#include "flowline/error.hpp"
#include "flowline/io.hpp"

#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static flowline::fuzz::MemoryFile file;
  const auto& formats = flowline::input_formats();
  const flowline::InputFormat format = formats[data[0] % formats.size()].second;
  const std::string& path = file.hold(data + 1, size - 1);
  try {
    auto source = flowline::open_file_source(path, format);
    flowline::DocumentArray docs;
    const std::size_t step = 1 + data[0] / formats.size() % 7;  // vary the reads' batch size
    while (source->read(docs, step) > 0) {
    }
    double last_line = 0;
    for (const auto& doc : docs) {
      if (format != flowline::InputFormat::Jsonl) {
        if (flowline::find_invalid_utf8(doc.text) != std::string::npos) flowline::fuzz::broken("invalid UTF-8 read");
        if (doc.uri != path) flowline::fuzz::broken("a document without its file as uri");
      }
      if (format == flowline::InputFormat::Lines || format == flowline::InputFormat::Paragraphs) {
        const auto it = doc.tags.find("line");
        if (it == doc.tags.end() || !it->value().is_number()) flowline::fuzz::broken("no line tag");
        const double line = it->value().to_number<double>();
        if (line <= last_line) flowline::fuzz::broken("line tags not increasing");
        last_line = line;
      }
    }
  } catch (const flowline::InputError& e) {
    // A text format names the line; an image's or an array's refusal concerns the whole file (line 0).
    const bool whole_file = format == flowline::InputFormat::Images || format == flowline::InputFormat::Npy ||
                            format == flowline::InputFormat::Safetensors;
    if (e.where().file != path || (e.where().line < 1 && !whole_file)) flowline::fuzz::broken(e.what());
  }
  return 0;
}
