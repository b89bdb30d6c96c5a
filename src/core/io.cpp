// Documents from and to files: JSONL files, text files and folders as DocumentSources (io.hpp).
#include "flowline/io.hpp"
#include "flowline/error.hpp"
#include "flowline/text.hpp"
#include "flowline/writers.hpp"
#include "input_arrays.hpp"
#include "input_lines.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <utf8proc.h>

#include <cctype>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>

namespace flowline {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(SourceLocation{path.string()}, fmt::format("cannot open file: {}", std::strerror(errno)));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(SourceLocation{path.string()}, "is a folder, not a file");
  // In large reads into a string sized by the file, not a character at a time (a paragraphs input of 190 MB is
  // read whole); a pipe, whose size is not known, grows it as it comes.
  std::string text;
  const std::uintmax_t size = std::filesystem::is_regular_file(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  if (!ec) text.reserve(static_cast<std::size_t>(size));
  std::string chunk(1 << 20, '\0');
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0)
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  if (in.bad()) throw InputError(SourceLocation{path.string()}, fmt::format("read failed: {}", std::strerror(errno)));
  return text;
}

DocumentArray read_jsonl(const std::filesystem::path& path) {
  auto source = open_file_source(path, InputFormat::Jsonl);
  DocumentArray out;
  while (source->read(out, 4096) > 0) {
  }
  return out;
}

void write_jsonl(const std::filesystem::path& path, const DocumentArray& docs) {
  // The one JSONL writer (writers.hpp), on the calling thread alone.
  auto writer = open_jsonl_writer(path, WriterOptions{.threads = 1});
  writer->write(docs);
  writer->close();
}

std::size_t find_invalid_utf8(std::string_view text) noexcept {
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    // Eight ASCII bytes at a time: a JSONL line of numbers is all ASCII.
    std::uint64_t word = 0;
    while (i + 8 <= text.size() && (std::memcpy(&word, data + i, 8), (word & 0x8080808080808080ull) == 0)) i += 8;
    if (i == text.size()) break;
    if (data[i] < 0x80) {
      ++i;
      continue;
    }
    utf8proc_int32_t cp;
    const auto n = utf8proc_iterate(data + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) return i;
    i += static_cast<std::size_t>(n);
  }
  return std::string_view::npos;
}

std::size_t ArraySource::read(DocumentArray& out, std::size_t max) {
  std::size_t n = 0;
  while (n < max && next_ < docs_.size()) {
    out.push_back(std::move(docs_[next_++]));
    ++n;
  }
  return n;
}

Skipped DocumentSource::skip(std::uint64_t n) {
  Skipped skipped;
  DocumentArray batch;
  while (skipped.documents < n) {
    batch.clear();
    const std::size_t got = read(batch, static_cast<std::size_t>(std::min<std::uint64_t>(n - skipped.documents, 1024)));
    if (got == 0) break;
    skipped.documents += got;
    if (skipped.documents == n) skipped.last_id = batch[batch.size() - 1].id;
  }
  return skipped;
}

std::optional<std::uint64_t> DocumentSource::count_left() { return std::nullopt; }

Skipped ArraySource::skip(std::uint64_t n) {
  Skipped skipped;
  skipped.documents = std::min<std::uint64_t>(n, docs_.size() - next_);
  next_ += static_cast<std::size_t>(skipped.documents);
  if (skipped.documents == n && n > 0) skipped.last_id = docs_[next_ - 1].id;
  return skipped;
}

std::size_t StoppableSource::read(DocumentArray& out, std::size_t max) {
  if (stop_.load(std::memory_order_relaxed)) {
    stopped_ = true;
    return 0;
  }
  return inner_.read(out, max);
}

const std::vector<std::pair<std::string, InputFormat>>& input_formats() {
  static const std::vector<std::pair<std::string, InputFormat>> formats = {{"lines", InputFormat::Lines},
                                                                           {"paragraphs", InputFormat::Paragraphs},
                                                                           {"jsonl", InputFormat::Jsonl},
                                                                           {"text", InputFormat::Text},
                                                                           {"images", InputFormat::Images},
                                                                           {"npy", InputFormat::Npy},
                                                                           {"safetensors", InputFormat::Safetensors}};
  return formats;
}

std::string default_input_format(const std::filesystem::path& path) {
  const std::string extension = path.extension().string();
  if (extension == ".jsonl" || extension == ".ndjson") return "jsonl";
  if (extension == ".npy") return "npy";
  if (extension == ".safetensors") return "safetensors";
  return "lines";
}

InputFormat parse_input_format(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& [known, format] : input_formats()) {
    if (known == name) return format;
    names.push_back(known);
  }
  throw Error(fmt::format("unknown input format '{}'; expected one of {}", name, fmt::join(names, ", ")));
}

namespace {

// paragraphs and text: the file is read whole (a paragraph needs the lines around it).
class WholeFileSource : public DocumentSource {
 public:
  WholeFileSource(const std::filesystem::path& path, bool paragraphs, std::string name = {})
      : path_(name.empty() ? path.string() : std::move(name)) {
    text_ = read_file(path);
    detail::check_utf8(path_, text_, 1);
    if (paragraphs) {
      spans_ = split_paragraphs(text_);
    } else {
      const std::size_t bom = text_.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
      spans_.push_back(TextSpan{bom, text_.size(), 0, 0, 1});
    }
    paragraphs_ = paragraphs;
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t n = 0;
    for (; n < max && next_ < spans_.size(); ++n, ++next_) {
      const TextSpan& span = spans_[next_];
      Document doc(text_.substr(span.byte_begin, span.byte_end - span.byte_begin));
      doc.uri = path_;
      if (paragraphs_) {
        doc.tags["paragraph"] = static_cast<std::int64_t>(next_);
        doc.tags["line"] = static_cast<std::int64_t>(span.line);
        doc.tags["start"] = static_cast<std::int64_t>(span.char_begin);
        doc.tags["end"] = static_cast<std::int64_t>(span.char_end);
      }
      out.push_back(std::move(doc));
    }
    return n;
  }

  // The spans are the documents' boundaries (found, and the file's UTF-8 checked, when it was opened).
  Skipped skip(std::uint64_t n) override {
    const std::uint64_t passed = std::min<std::uint64_t>(n, spans_.size() - next_);
    next_ += static_cast<std::size_t>(passed);
    return Skipped{passed, {}};
  }
  std::optional<std::uint64_t> count_left() override { return spans_.size() - next_; }

 private:
  std::string path_;
  std::string text_;
  std::vector<TextSpan> spans_;
  std::size_t next_ = 0;
  bool paragraphs_ = false;
};

// A folder: its regular files in name order, each read with the same format. Documents of the text formats
// (lines, paragraphs, text) get the tag `file`: the file's name without folder and extension.
class FolderSource : public DocumentSource {
 public:
  FolderSource(const std::filesystem::path& folder, InputFormat format) : format_(format) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
      if (entry.is_regular_file() && entry.path().filename().string().front() != '.') files_.push_back(entry.path());
    }
    if (ec) throw InputError(SourceLocation{folder.string()}, fmt::format("cannot list folder: {}", ec.message()));
    if (files_.empty()) throw InputError(SourceLocation{folder.string()}, "the folder holds no files");
    std::sort(files_.begin(), files_.end());
  }
  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t n = 0;
    while (n < max) {
      if (!current_) {
        if (next_ == files_.size()) break;
        current_ = open_file_source(files_[next_++], format_);
      }
      const std::size_t got = current_->read(out, max - n);
      if (got == 0) current_.reset();
      // Text read from a file says which one (a JSONL document's tags are its own): filter by book.
      if (format_ != InputFormat::Jsonl) {
        const std::string file = files_[next_ - 1].stem().string();
        for (std::size_t i = out.size() - got; i < out.size(); ++i) out[i].tags["file"] = file;
      }
      n += got;
    }
    return n;
  }

  // Each file skipped by its own source; a text file is one document, passed over unopened.
  Skipped skip(std::uint64_t n) override {
    Skipped skipped;
    while (skipped.documents < n) {
      if (!current_) {
        if (next_ == files_.size()) break;
        if (format_ == InputFormat::Text) {
          ++next_;
          ++skipped.documents;
          continue;
        }
        current_ = open_file_source(files_[next_++], format_);
      }
      const std::uint64_t wanted = n - skipped.documents;
      Skipped got = current_->skip(wanted);
      skipped.documents += got.documents;
      if (got.documents < wanted) current_.reset();  // that file ended
      if (skipped.documents == n) skipped.last_id = std::move(got.last_id);
    }
    return skipped;
  }

  bool carries_ids() const override { return format_ == InputFormat::Jsonl; }

  std::optional<std::uint64_t> count_left() override {
    std::uint64_t count = 0;
    if (current_) {
      const auto left = current_->count_left();
      if (!left) return std::nullopt;
      count += *left;
    }
    for (std::size_t i = next_; i < files_.size(); ++i) {
      if (format_ == InputFormat::Text) {
        ++count;
        continue;
      }
      const auto in_file = open_file_source(files_[i], format_)->count_left();
      if (!in_file) return std::nullopt;
      count += *in_file;
    }
    return count;
  }

 private:
  InputFormat format_;
  std::vector<std::filesystem::path> files_;
  std::size_t next_ = 0;
  std::unique_ptr<DocumentSource> current_;
};

// --input-format images: the image files of a folder tree (or one file), listed up front and sorted by path;
// each file is read when its document is handed out, so memory holds only what the flow has in flight.
class ImageFilesSource : public DocumentSource {
 public:
  explicit ImageFilesSource(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      if (mime_type_of(path).empty())
        throw InputError(SourceLocation{path.string()},
                         "not a JPEG, PNG or WebP file (by its extension: .jpg, "
                         ".jpeg, .png or .webp) for --input-format images");
      files_.push_back(path);
      return;
    }
    auto it = std::filesystem::recursive_directory_iterator(path, ec);
    for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      const auto name = it->path().filename().string();
      std::error_code status_ec;  // an entry that vanished or cannot be read is skipped, not fatal
      if (!name.empty() && name.front() == '.') {
        if (it->is_directory(status_ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(status_ec) && !mime_type_of(it->path()).empty()) files_.push_back(it->path());
    }
    if (ec) throw InputError(SourceLocation{path.string()}, fmt::format("cannot list folder: {}", ec.message()));
    if (files_.empty())
      throw InputError(SourceLocation{path.string()}, "the folder holds no .jpg, .jpeg, .png or .webp files");
    std::sort(files_.begin(), files_.end());
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t n = 0;
    for (; n < max && next_ < files_.size(); ++n, ++next_) {
      const auto& file = files_[next_];
      Document doc;
      doc.uri = file.string();
      doc.mime_type = mime_type_of(file);
      doc.blob = read_bytes(file);
      out.push_back(std::move(doc));
    }
    return n;
  }

  // The listed files are the documents: none is read to be skipped or counted.
  Skipped skip(std::uint64_t n) override {
    const std::uint64_t passed = std::min<std::uint64_t>(n, files_.size() - next_);
    next_ += static_cast<std::size_t>(passed);
    return Skipped{passed, {}};
  }
  std::optional<std::uint64_t> count_left() override { return files_.size() - next_; }

 private:
  static Bytes read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw InputError(SourceLocation{path.string()}, fmt::format("cannot open file: {}", std::strerror(errno)));
    Bytes bytes(static_cast<std::size_t>(in.tellg()));
    in.seekg(0);
    if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
      throw InputError(SourceLocation{path.string()}, "read failed (the file shrank while being read?)");
    return bytes;
  }

  static std::string mime_type_of(const std::filesystem::path& path) {
    std::string ext = path.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    if (ext == ".jpg" || ext == ".jpeg") return "image/jpeg";
    if (ext == ".png") return "image/png";
    if (ext == ".webp") return "image/webp";
    return "";
  }

  std::vector<std::filesystem::path> files_;
  std::size_t next_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> open_file_source(const std::filesystem::path& path, InputFormat format) {
  std::error_code ec;
  if (format == InputFormat::Images) return std::make_unique<ImageFilesSource>(path);
  if (format == InputFormat::Npy || format == InputFormat::Safetensors)
    return detail::open_array_source(path, format == InputFormat::Npy);
  if (std::filesystem::is_directory(path, ec)) return std::make_unique<FolderSource>(path, format);
  switch (format) {
    case InputFormat::Lines:
      return detail::open_line_source(path, false);
    case InputFormat::Jsonl:
      return detail::open_line_source(path, true);
    case InputFormat::Paragraphs:
      return std::make_unique<WholeFileSource>(path, true);
    case InputFormat::Text:
      return std::make_unique<WholeFileSource>(path, false);
    case InputFormat::Images:
    case InputFormat::Npy:
    case InputFormat::Safetensors:
      break;  // handled above
  }
  throw Error("unknown input format");
}

std::unique_ptr<DocumentSource> open_stdin_source(InputFormat format) {
  // /dev/stdin reopens descriptor 0 whatever it is (a pipe, a terminal, a redirected file).
  const std::filesystem::path stdin_path = "/dev/stdin";
  const std::string name = "<stdin>";
  switch (format) {
    case InputFormat::Lines:
      return detail::open_line_source(stdin_path, false, name);
    case InputFormat::Jsonl:
      return detail::open_line_source(stdin_path, true, name);
    case InputFormat::Paragraphs:
      return std::make_unique<WholeFileSource>(stdin_path, true, name);
    case InputFormat::Text:
      return std::make_unique<WholeFileSource>(stdin_path, false, name);
    case InputFormat::Images:
      throw InputError(SourceLocation{name},
                       "--input-format images reads a folder or a file, not standard input "
                       "(for image bytes on standard input, use jsonl with base64 blobs)");
    case InputFormat::Npy:
    case InputFormat::Safetensors:
      throw InputError(SourceLocation{name},
                       "--input-format npy and safetensors read a file, not standard input (its rows are found by "
                       "the header's shape, and its sidecar beside it)");
  }
  throw Error("unknown input format");
}

}  // namespace flowline
