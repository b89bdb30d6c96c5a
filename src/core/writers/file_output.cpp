// OutputFile (file_output.hpp): POSIX writes for the document writers.
#include "file_output.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace flowline::detail {

OutputFile::OutputFile(const std::filesystem::path& path) : path_(path) {
  const std::filesystem::path parent = path.parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("cannot write '{}': it is a folder", path.string()));
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("cannot write '{}': {}", path.string(), std::strerror(errno)));
}

OutputFile::~OutputFile() { close_quietly(); }

std::string OutputFile::write(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd_, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      // How much is there tells the user what survived (a full disk, a file size limit).
      return fmt::format("writing '{}' failed after {} bytes had been written: {}", path_.string(), bytes(),
                         std::strerror(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
    bytes_.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
  }
  return {};
}

std::string OutputFile::write_at(std::uint64_t offset, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return fmt::format("writing '{}' failed: {}", path_.string(), std::strerror(errno));
    }
    data.remove_prefix(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(fmt::format("closing '{}' failed: {}", path_.string(), std::strerror(errno)));
}

void OutputFile::close_quietly() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace flowline::detail
