// Choosing a DocumentWriter by the output file's extension (writers.hpp).
#include "flowline/error.hpp"
#include "flowline/writers.hpp"

#include <fmt/format.h>

namespace flowline {

namespace {
struct FormatExtension {
  const char* extension;
  OutputFormat format;
};
constexpr FormatExtension kExtensions[] = {
    {".jsonl", OutputFormat::Jsonl}, {".npy", OutputFormat::Npy}, {".safetensors", OutputFormat::Safetensors}};
}  // namespace

std::string known_output_extensions() {
  std::string out;
  for (const auto& e : kExtensions) out += fmt::format("{}{}", out.empty() ? "" : ", ", e.extension);
  return out;
}

OutputFormat output_format_for(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  for (const auto& e : kExtensions) {
    if (extension == e.extension) return e.format;
  }
  throw Error(fmt::format("output '{}': unknown extension '{}'; known: {}", path.string(), extension,
                          known_output_extensions()));
}

std::filesystem::path sidecar_path_for(const std::filesystem::path& path) {
  std::filesystem::path sidecar = path;
  sidecar.replace_extension(".docs.jsonl");
  return sidecar;
}

std::unique_ptr<DocumentWriter> open_writer(const std::filesystem::path& path, const WriterOptions& options) {
  switch (output_format_for(path)) {
    case OutputFormat::Jsonl:
      return open_jsonl_writer(path, options);
    case OutputFormat::Npy:
      return open_npy_writer(path, options);
    case OutputFormat::Safetensors:
      return open_safetensors_writer(path, options);
  }
  throw Error("unknown output format");
}

}  // namespace flowline
