// flowline/output_file.hpp — an output file that appears under its name only when the run that writes it
// ends well. Every writer of flowline uses it (the JSONL, .npy and .safetensors DocumentWriters, JsonlWriter,
// TsvWriter, `flowline run --output`), and an executor of your own that writes a file can too.
//
// The file is written as PATH.partial. commit() closes it and renames it to PATH (replacing a PATH from an
// earlier run only then). leave_partial() closes it and leaves it as PATH.partial, the name saying that
// the run stopped midway, or removes it when nothing worth keeping reached it: a run that fails before its
// first document leaves nothing behind. A process killed outright (SIGKILL, a crash) leaves PATH.partial
// too. Standard output (standard_output()) is written in place and never renamed.
//
// One owner calls write(), commit() and leave_partial(), from one thread at a time; bytes() may be read
// from any thread. Errors from write() are returned as messages naming PATH and how much was written, so a
// writer thread can hand them to its owner; commit() throws flowline::Error.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace flowline {

// Where an output is written until it is complete: PATH.partial.
std::filesystem::path partial_path_for(const std::filesystem::path& path);

// The bound of a served flow's output (RuntimeInfo::max_output_bytes; 0: none): throws flowline::Error
// naming `path` and the bound when a file holding `held` bytes would pass `limit` by taking `adding` more.
// A writer calls it before writing a request, so a refused request writes nothing.
void check_output_bound(const std::filesystem::path& path, std::uint64_t held, std::uint64_t adding,
                        std::uint64_t limit);

class OutputFile {
 public:
  // Creates the parent folders and opens PATH.partial for writing (truncated). Throws flowline::Error
  // naming PATH ("cannot write 'out/x.jsonl': Permission denied", "... it is a folder").
  explicit OutputFile(std::filesystem::path path);
  // Resumes PATH.partial left by an earlier run (`flowline run --resume`): opens it without truncating,
  // cuts it back to `keep_bytes` (what was durably written; a torn tail goes) and appends from there.
  // Throws flowline::Error when PATH.partial is missing or shorter than `keep_bytes`.
  struct Resume {
    std::uint64_t keep_bytes = 0;
  };
  OutputFile(std::filesystem::path path, Resume resume);
  // Standard output: written in place, not closed, never renamed; path() is "-".
  struct StandardOutput {};
  explicit OutputFile(StandardOutput);
  // Leaves the file as leave_partial(bytes() > 0) does unless commit() or leave_partial() ran.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends all of `data` (retrying short writes); returns an error message, empty on success.
  std::string write(std::string_view data);
  // Writes `data` at `offset` without moving the append position (a header patched at the end).
  std::string write_at(std::uint64_t offset, std::string_view data);
  // Makes everything written so far durable (fdatasync); returns an error message, empty on success.
  std::string sync();
  // Closes the file and renames it to PATH. Throws flowline::Error when closing or renaming fails (the
  // file is then left as PATH.partial).
  void commit();
  // Closes the file and leaves it as PATH.partial when `keep`, else removes it. Returns the path left
  // behind, empty when none (standard output: always empty). Never throws.
  std::filesystem::path leave_partial(bool keep) noexcept;

  std::uint64_t bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }
  // The final path ("-" for standard output) and where it is written until then.
  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path partial_path() const { return partial_path_for(path_); }
  bool is_standard_output() const noexcept { return standard_output_; }

 private:
  void close_fd();

  std::filesystem::path path_;
  int fd_ = -1;
  bool standard_output_ = false;
  bool ended_ = false;  // commit() or leave_partial() ran
  std::atomic<std::uint64_t> bytes_{0};
};

}  // namespace flowline
