// An output file for the writers (private to the library): a file descriptor written in whole blocks, with
// the number of bytes written so far and errors returned as messages naming the file.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace flowline::detail {

class OutputFile {
 public:
  // Creates the parent folders and opens `path` for writing (truncated). Throws flowline::Error
  // ("cannot write 'out/x.npy': Permission denied").
  explicit OutputFile(const std::filesystem::path& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends all of `data` (retrying short writes); returns an error message, empty on success.
  std::string write(std::string_view data);
  // Writes `data` at `offset` without moving the append position (a header patched at the end).
  std::string write_at(std::uint64_t offset, std::string_view data);
  // Closes the file; throws flowline::Error when closing reports a failure.
  void close();
  void close_quietly() noexcept;
  std::uint64_t bytes() const noexcept { return bytes_.load(std::memory_order_relaxed); }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::atomic<std::uint64_t> bytes_{0};
};

}  // namespace flowline::detail
