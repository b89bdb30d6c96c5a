// Shared by the libFuzzer targets of tests/fuzz: an in-memory file for the parsers that read paths, and
// the one way a target reports a broken property. Each target is a program of its own (one fuzzer per
// process, one thread), so nothing here is thread-safe.
#pragma once

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace flowline::fuzz {

// A memfd that holds the current input, reachable by path (/proc/self/fd/N) for readers that open files
// themselves, including those that mmap them. Rewritten in place for every input: no file system traffic.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("flowline-fuzz", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = fmt::format("/proc/self/fd/{}", fd_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile() { ::close(fd_); }

  // Replaces the contents with `data`; returns the path to open.
  const std::string& hold(const std::uint8_t* data, std::size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// A property every input must keep did not hold: print what and abort, so libFuzzer keeps the input.
[[noreturn]] inline void broken(std::string_view what) {
  std::fprintf(stderr, "flowline fuzz: property broken: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace flowline::fuzz
