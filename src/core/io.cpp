// Documents from and to files: JSONL files, text files and folders as DocumentSources (io.hpp).
#include "flowline/io.hpp"
#include "flowline/error.hpp"
#include "flowline/text.hpp"
#include "flowline/writers.hpp"
#include "input_jsonl.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <utf8proc.h>

#include <cctype>
#include <cstdint>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <exception>
#include <fstream>
#include <thread>

namespace flowline {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(SourceLocation{path.string()}, fmt::format("cannot open file: {}", std::strerror(errno)));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw InputError(SourceLocation{path.string()}, "is a folder, not a file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
                                                                           {"images", InputFormat::Images}};
  return formats;
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

void check_utf8(const std::string& path, std::string_view text, std::size_t first_line) {
  const std::size_t bad = find_invalid_utf8(text);
  if (bad == std::string_view::npos) return;
  std::size_t line = first_line, line_start = 0;
  for (std::size_t i = 0; i < bad; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  throw InputError(SourceLocation{path, static_cast<int>(line), static_cast<int>(bad - line_start + 1)},
                   fmt::format("invalid UTF-8 (byte 0x{:02x})", static_cast<unsigned char>(text[bad])));
}

// lines and jsonl: streamed one line at a time (a jsonl read of many lines is parsed on two threads).
class LineSource : public DocumentSource {
 public:
  // `name`: what errors and documents' uri call it (the path, or "<stdin>").
  LineSource(const std::filesystem::path& path, bool jsonl, std::string name = {})
      : path_(name.empty() ? path.string() : std::move(name)), jsonl_(jsonl), in_(path, std::ios::binary) {
    std::error_code ec;
    if (!in_ || std::filesystem::is_directory(path, ec)) {
      throw InputError(SourceLocation{path_}, std::filesystem::is_directory(path, ec)
                                                  ? std::string("is a folder, not a file")
                                                  : fmt::format("cannot open file: {}", std::strerror(errno)));
    }
    if (std::filesystem::is_regular_file(path, ec)) size_at_open_ = std::filesystem::file_size(path, ec);
    if (ec) size_at_open_ = 0;
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    if (jsonl_) return read_jsonl(out, max);
    std::size_t n = 0;
    while (n < max && next_line()) {
      if (blank(line_)) continue;
      check_utf8(path_, line_, line_number_);
      Document doc(line_);
      doc.uri = path_;
      doc.tags["line"] = static_cast<std::int64_t>(line_number_);
      out.push_back(std::move(doc));
      ++n;
    }
    return n;
  }

 private:
  // A read of at least this many lines is parsed on two threads: this one and a helper started for it
  // (starting a thread costs tens of microseconds, a line of 384 numbers about 17).
  static constexpr std::size_t kTwoThreadLines = 256;

  static bool blank(const std::string& line) { return line.find_first_not_of(" \t") == std::string::npos; }

  // The next line into line_ (line ending and a leading BOM removed); false at the end of the input. Throws
  // InputError for a read that failed and for a file that ends before the size it had when opened.
  bool next_line() {
    if (!std::getline(in_, line_)) {
      if (in_.bad()) throw InputError(SourceLocation{path_, static_cast<int>(line_number_)}, "read failed");
      if (in_.eof()) check_not_truncated();
      return false;
    }
    consumed_ += line_.size() + (in_.eof() ? 0 : 1);
    // The end of a regular file before the size it had when opened: it was truncated under the reader, and
    // the last line may be cut anywhere. Said, rather than that fragment passed on as a document.
    if (in_.eof()) check_not_truncated();
    ++line_number_;
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_number_ == 1 && line_.compare(0, 3, "\xEF\xBB\xBF") == 0) line_.erase(0, 3);
    return true;
  }

  // jsonl: the lines of the read are taken from the file first, then parsed (on two threads for a large
  // read), then handed out in order. An error is thrown where the sequential reader would have thrown it:
  // the documents before the first bad line are handed out, then its error (file:line) goes up; the file's
  // own errors (truncated, unreadable) come after every line read before them.
  std::size_t read_jsonl(DocumentArray& out, std::size_t max) {
    pending_.clear();
    std::exception_ptr file_error;
    try {
      while (pending_.size() < max && next_line()) {
        if (!blank(line_)) pending_.emplace_back(line_number_, std::move(line_));
      }
    } catch (const Error&) {
      file_error = std::current_exception();
    }
    const std::size_t count = pending_.size();
    std::vector<Document> docs;
    docs.reserve(count);
    for (std::size_t i = 0; i < count; ++i) docs.emplace_back(Document::WithId{});
    // Parses lines [begin, end) into docs; returns the index of the first bad one (end: none) and its error.
    const auto parse = [&](std::size_t begin, std::size_t end, std::exception_ptr& error) {
      for (std::size_t i = begin; i < end; ++i) {
        const auto& [line_number, text] = pending_[i];
        try {
          check_utf8(path_, text, line_number);
          try {
            // The fast path reads the usual lines; whatever it leaves, the general parser reads or refuses.
            if (!detail::read_document_fast(text, docs[i])) docs[i] = document_from_json(std::string_view(text));
          } catch (const InputError&) {
            throw;
          } catch (const Error& e) {
            throw InputError(SourceLocation{path_, static_cast<int>(line_number)}, e.what());
          }
          if (docs[i].uri.empty()) docs[i].uri = path_;
        } catch (...) {
          error = std::current_exception();
          return i;
        }
      }
      return end;
    };
    std::exception_ptr first_error, second_error;
    std::size_t mid = count, first_bad = count, second_bad = count;
    if (count >= kTwoThreadLines) {
      mid = count / 2;
      std::thread helper([&] { second_bad = parse(mid, count, second_error); });
      first_bad = parse(0, mid, first_error);
      helper.join();
    } else {
      first_bad = parse(0, count, first_error);
    }
    const std::size_t good = first_error ? first_bad : second_bad;
    for (std::size_t i = 0; i < good; ++i) out.push_back(std::move(docs[i]));
    if (first_error) std::rethrow_exception(first_error);
    if (second_error) std::rethrow_exception(second_error);
    if (file_error) std::rethrow_exception(file_error);
    return count;
  }

  void check_not_truncated() const {
    if (consumed_ >= size_at_open_) return;
    throw InputError(SourceLocation{path_, static_cast<int>(line_number_ + 1)},
                     fmt::format("the file ended after {} of the {} bytes it had when it was opened: it was truncated "
                                 "while being read",
                                 consumed_, size_at_open_));
  }

  std::string path_;
  bool jsonl_;
  std::ifstream in_;
  std::string line_;
  std::size_t line_number_ = 0;
  std::uintmax_t size_at_open_ = 0;  // a regular file's size when opened (0: a pipe, a FIFO, a device)
  std::uintmax_t consumed_ = 0;      // bytes read so far, newlines included
  std::vector<std::pair<std::size_t, std::string>> pending_;  // jsonl: a read's lines and their numbers
};

// paragraphs and text: the file is read whole (a paragraph needs the lines around it).
class WholeFileSource : public DocumentSource {
 public:
  WholeFileSource(const std::filesystem::path& path, bool paragraphs, std::string name = {})
      : path_(name.empty() ? path.string() : std::move(name)) {
    text_ = read_file(path);
    check_utf8(path_, text_, 1);
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
  if (std::filesystem::is_directory(path, ec)) return std::make_unique<FolderSource>(path, format);
  switch (format) {
    case InputFormat::Lines:
      return std::make_unique<LineSource>(path, false);
    case InputFormat::Jsonl:
      return std::make_unique<LineSource>(path, true);
    case InputFormat::Paragraphs:
      return std::make_unique<WholeFileSource>(path, true);
    case InputFormat::Text:
      return std::make_unique<WholeFileSource>(path, false);
    case InputFormat::Images:
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
      return std::make_unique<LineSource>(stdin_path, false, name);
    case InputFormat::Jsonl:
      return std::make_unique<LineSource>(stdin_path, true, name);
    case InputFormat::Paragraphs:
      return std::make_unique<WholeFileSource>(stdin_path, true, name);
    case InputFormat::Text:
      return std::make_unique<WholeFileSource>(stdin_path, false, name);
    case InputFormat::Images:
      throw InputError(SourceLocation{name},
                       "--input-format images reads a folder or a file, not standard input "
                       "(for image bytes on standard input, use jsonl with base64 blobs)");
  }
  throw Error("unknown input format");
}

}  // namespace flowline
