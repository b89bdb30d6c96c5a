// The lines and jsonl inputs (input_lines.hpp): a line reader shared by reading, skipping and counting, and the
// source built on it.
#include "input_lines.hpp"

#include "flowline/error.hpp"
#include "input_jsonl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace flowline::detail {

void check_utf8(const std::string& name, std::string_view text, std::size_t first_line) {
  const std::size_t bad = find_invalid_utf8(text);
  if (bad == std::string_view::npos) return;
  std::size_t line = first_line, line_start = 0;
  for (std::size_t i = 0; i < bad; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  throw InputError(SourceLocation{name, static_cast<int>(line), static_cast<int>(bad - line_start + 1)},
                   fmt::format("invalid UTF-8 (byte 0x{:02x})", static_cast<unsigned char>(text[bad])));
}

namespace {

// A lines or jsonl input one line at a time, read in large chunks: the one definition of a line that read(),
// skip() and count_left() share. A line ends at "\n" (a "\r" before it is dropped; a last line without "\n"
// counts); the first line of the file loses a UTF-8 BOM. Reads with ::read, which returns what a pipe holds,
// so a line from a slow producer is handed out as soon as it is complete.
class LineCursor {
 public:
  // Opens `path` at byte `offset`, `lines_before` lines into it; `name`: what errors call it; `size_at_open`:
  // the regular file's size when the input was first opened (0: a stream), to tell a truncated file.
  LineCursor(const std::filesystem::path& path, std::string name, std::uintmax_t size_at_open,
             std::uintmax_t offset = 0, std::size_t lines_before = 0)
      : name_(std::move(name)),
        fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)),
        size_at_open_(size_at_open),
        consumed_(offset),
        line_number_(lines_before) {
    if (fd_ >= 0 && offset > 0 && ::lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
      const int error = errno;
      ::close(fd_);
      fd_ = -1;
      errno = error;
    }
  }
  LineCursor(const LineCursor&) = delete;
  LineCursor& operator=(const LineCursor&) = delete;
  ~LineCursor() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool is_open() const noexcept { return fd_ >= 0; }

  // The next line into `line` (valid until the next call); false at the end of the input. Throws InputError
  // for a read that failed and for a file that ends before the size it had when opened.
  bool next(std::string_view& line) {
    while (true) {
      const char* begin = buffer_.data() + begin_;
      const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - begin_));
      if (newline != nullptr) {
        line = std::string_view(begin, static_cast<std::size_t>(newline - begin));
        begin_ += line.size() + 1;
        consumed_ += line.size() + 1;
        break;
      }
      if (at_end_) {
        // The end of a regular file before the size it had when opened: it was truncated under the reader,
        // and the last line may be cut anywhere. Said, rather than that fragment passed on as a document.
        if (consumed_ + (end_ - begin_) < size_at_open_) throw truncated(consumed_ + (end_ - begin_));
        if (begin_ == end_) return false;
        line = std::string_view(begin, end_ - begin_);
        consumed_ += line.size();
        begin_ = end_;
        break;
      }
      fill();
    }
    ++line_number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number_ == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);
    return true;
  }

  std::size_t line_number() const noexcept { return line_number_; }  // of the line next() gave last
  std::uintmax_t consumed() const noexcept { return consumed_; }     // bytes up to the end of that line

 private:
  // Large enough that a syscall's cost vanishes, small enough that a file truncated while it is read is seen
  // as such (what was read before the cut is handed out, then the error) rather than read whole at the start.
  static constexpr std::size_t kChunk = 64 << 10;

  // Reads more of the input behind what is left of the buffer (grown for a line longer than it).
  void fill() {
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buffer_.size() - end_ < kChunk / 2) buffer_.resize(std::max(kChunk, buffer_.size() * 2));
    ssize_t got;
    do {
      got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    } while (got < 0 && errno == EINTR);
    if (got < 0)
      throw InputError(SourceLocation{name_, static_cast<int>(line_number_)},
                       fmt::format("read failed: {}", std::strerror(errno)));
    end_ += static_cast<std::size_t>(got);
    at_end_ = got == 0;
  }

  InputError truncated(std::uintmax_t bytes) const {
    return InputError(SourceLocation{name_, static_cast<int>(line_number_ + 1)},
                      fmt::format("the file ended after {} of the {} bytes it had when it was opened: it was "
                                  "truncated while being read",
                                  bytes, size_at_open_));
  }

  std::string name_;
  int fd_;
  std::uintmax_t size_at_open_;
  std::uintmax_t consumed_;
  std::size_t line_number_;
  std::string buffer_;
  std::size_t begin_ = 0, end_ = 0;  // the part of buffer_ not handed out yet
  bool at_end_ = false;
};

// A line of a lines or jsonl input that holds a document: one with more than spaces and tabs.
bool holds_document(std::string_view line) { return line.find_first_not_of(" \t") != std::string_view::npos; }

// One jsonl line into `doc` (made with Document::WithId{}), as read() hands it out; throws InputError
// (file:line) for a bad line.
void parse_jsonl_line(const std::string& name, std::string_view text, std::size_t line_number, Document& doc) {
  check_utf8(name, text, line_number);
  try {
    // The fast path reads the usual lines; whatever it leaves, the general parser reads or refuses.
    if (!detail::read_document_fast(text, doc)) doc = document_from_json(text);
  } catch (const InputError&) {
    throw;
  } catch (const Error& e) {
    throw InputError(SourceLocation{name, static_cast<int>(line_number)}, e.what());
  }
  if (doc.uri.empty()) doc.uri = name;
}

// lines and jsonl: streamed one line at a time (a jsonl read of many lines is parsed on two threads).
class LineSource : public DocumentSource {
 public:
  // `name`: what errors and documents' uri call it (the path, or "<stdin>").
  LineSource(const std::filesystem::path& path, bool jsonl, std::string name = {})
      : path_(path),
        name_(name.empty() ? path.string() : std::move(name)),
        jsonl_(jsonl),
        regular_(is_regular_file(path)),
        size_at_open_(regular_file_size(path)),
        cursor_(path, name_, size_at_open_) {
    std::error_code ec;
    if (!cursor_.is_open() || std::filesystem::is_directory(path, ec)) {
      throw InputError(SourceLocation{name_}, std::filesystem::is_directory(path, ec)
                                                  ? std::string("is a folder, not a file")
                                                  : fmt::format("cannot open file: {}", std::strerror(errno)));
    }
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    if (jsonl_) return read_jsonl(out, max);
    std::size_t n = 0;
    std::string_view line;
    while (n < max && cursor_.next(line)) {
      if (!holds_document(line)) continue;
      check_utf8(name_, line, cursor_.line_number());
      Document doc{std::string(line)};
      doc.uri = name_;
      doc.tags["line"] = static_cast<std::int64_t>(cursor_.line_number());
      out.push_back(std::move(doc));
      ++n;
    }
    return n;
  }

  // Counts the lines that hold a document; a jsonl input parses the n-th alone, for its id.
  Skipped skip(std::uint64_t n) override {
    Skipped skipped;
    std::string_view line;
    while (skipped.documents < n && cursor_.next(line)) {
      if (!holds_document(line)) continue;
      if (++skipped.documents == n && jsonl_) {
        Document doc(Document::WithId{});
        parse_jsonl_line(name_, line, cursor_.line_number(), doc);
        skipped.last_id = std::move(doc.id);
      }
    }
    return skipped;
  }

  // The rest of the file, scanned again from the end of the last line handed out (a stream cannot be).
  std::optional<std::uint64_t> count_left() override {
    if (!regular_) return std::nullopt;
    LineCursor rest(path_, name_, size_at_open_, cursor_.consumed(), cursor_.line_number());
    if (!rest.is_open())
      throw InputError(SourceLocation{name_}, fmt::format("cannot open file again: {}", std::strerror(errno)));
    std::uint64_t count = 0;
    std::string_view line;
    while (rest.next(line)) count += holds_document(line) ? 1 : 0;
    return count;
  }

  bool carries_ids() const override { return jsonl_; }

 private:
  // A read of at least this many lines is parsed on two threads: this one and a helper started for it
  // (starting a thread costs tens of microseconds, a line of 384 numbers about 17).
  static constexpr std::size_t kTwoThreadLines = 256;

  static bool is_regular_file(const std::filesystem::path& path) {
    std::error_code ec;
    return std::filesystem::is_regular_file(path, ec);
  }
  static std::uintmax_t regular_file_size(const std::filesystem::path& path) {
    std::error_code ec;
    if (!is_regular_file(path)) return 0;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    return ec ? 0 : size;
  }

  // jsonl: the lines of the read are taken from the file first, then parsed (on two threads for a large
  // read), then handed out in order. An error is thrown where the sequential reader would have thrown it:
  // the documents before the first bad line are handed out, then its error (file:line) goes up; the file's
  // own errors (truncated, unreadable) come after every line read before them.
  std::size_t read_jsonl(DocumentArray& out, std::size_t max) {
    pending_.clear();
    std::exception_ptr file_error;
    try {
      std::string_view line;
      while (pending_.size() < max && cursor_.next(line)) {
        if (holds_document(line)) pending_.emplace_back(cursor_.line_number(), std::string(line));
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
        try {
          parse_jsonl_line(name_, pending_[i].second, pending_[i].first, docs[i]);
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

  std::filesystem::path path_;
  std::string name_;
  bool jsonl_;
  bool regular_;                 // a regular file (else a pipe, a FIFO, a device: it cannot be counted)
  std::uintmax_t size_at_open_;  // a regular file's size when opened (0: a pipe, a FIFO, a device)
  LineCursor cursor_;
  std::vector<std::pair<std::size_t, std::string>> pending_;  // jsonl: a read's lines and their numbers
};

}  // namespace

std::unique_ptr<DocumentSource> open_line_source(const std::filesystem::path& path, bool jsonl, std::string name) {
  return std::make_unique<LineSource>(path, jsonl, std::move(name));
}

}  // namespace flowline::detail
