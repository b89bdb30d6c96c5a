// Fuzz target: a Document from JSON (a JSONL line, a gateway stream line). Properties: a bad document is a
// flowline::Error; a good one written back with to_json() reads back to the same JSON (ids, texts,
// tensors with their dtype and shape, floats bit for bit, tags, nested chunks and matches).
#include "flowline/error.hpp"
#include "flowline/io.hpp"

#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  flowline::Document doc;
  try {
    doc = flowline::document_from_json(text);
  } catch (const flowline::Error& e) {
    if (std::string_view(e.what()).empty()) flowline::fuzz::broken("an error without a message");
    return 0;
  }
  const std::string once = flowline::to_json(doc);
  std::string twice;
  try {
    twice = flowline::to_json(flowline::document_from_json(once));
  } catch (const flowline::Error& e) {
    flowline::fuzz::broken(fmt::format("to_json wrote what document_from_json refuses: {}\n{}", e.what(), once));
  }
  if (once != twice) flowline::fuzz::broken(fmt::format("round trip changed the document:\n{}\n{}", once, twice));
  return 0;
}
