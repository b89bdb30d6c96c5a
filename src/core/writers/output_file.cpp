// OutputFile (flowline/output_file.hpp): POSIX writes under PATH.partial, renamed to PATH on commit().
#include "flowline/output_file.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace flowline {

std::filesystem::path partial_path_for(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  p += ".partial";
  return p;
}

void check_output_bound(const std::filesystem::path& path, std::uint64_t held, std::uint64_t adding,
                        std::uint64_t limit) {
  if (limit == 0 || (held <= limit && adding <= limit - held)) return;
  throw Error(
      fmt::format("'{}' holds {} bytes; this request would pass the {} bytes a served flow's output may hold (flowline "
                  "serve --max-output-bytes): refused, and nothing of it written",
                  path.string(), held, limit));
}

OutputFile::OutputFile(std::filesystem::path path) : path_(std::move(path)) {
  const std::filesystem::path parent = path_.parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // Errors name the path the user gave: the temporary name is ours.
  if (std::filesystem::is_directory(path_, ec))
    throw Error(fmt::format("cannot write '{}': it is a folder", path_.string()));
  fd_ = ::open(partial_path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("cannot write '{}': {}", path_.string(), std::strerror(errno)));
}

OutputFile::OutputFile(std::filesystem::path path, Resume resume) : path_(std::move(path)) {
  const std::filesystem::path partial = partial_path();
  fd_ = ::open(partial.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(fmt::format("cannot resume '{}': {}", partial.string(), std::strerror(errno)));
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  if (size < 0 || static_cast<std::uint64_t>(size) < resume.keep_bytes) {
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("cannot resume '{}': it holds {} bytes, fewer than the {} its run synced", partial.string(),
                            size, resume.keep_bytes));
  }
  if (::ftruncate(fd_, static_cast<off_t>(resume.keep_bytes)) != 0 ||
      ::lseek(fd_, static_cast<off_t>(resume.keep_bytes), SEEK_SET) < 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw Error(fmt::format("cannot resume '{}': {}", partial.string(), std::strerror(error)));
  }
  bytes_.store(resume.keep_bytes);
}

OutputFile::OutputFile(StandardOutput) : path_("-"), fd_(STDOUT_FILENO), standard_output_(true) {}

OutputFile::~OutputFile() {
  if (!ended_) leave_partial(bytes() > 0);
}

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

std::string OutputFile::sync() {
  if (standard_output_ || fd_ < 0) return {};
  if (::fdatasync(fd_) != 0) return fmt::format("syncing '{}' failed: {}", path_.string(), std::strerror(errno));
  return {};
}

void OutputFile::close_fd() {
  const int fd = fd_;
  fd_ = -1;
  if (fd < 0 || standard_output_) return;
  if (::close(fd) != 0) throw Error(fmt::format("closing '{}' failed: {}", path_.string(), std::strerror(errno)));
}

void OutputFile::commit() {
  if (ended_) return;
  ended_ = true;
  close_fd();
  if (standard_output_) return;
  std::error_code ec;
  std::filesystem::rename(partial_path(), path_, ec);
  if (ec) {
    throw Error(fmt::format("cannot rename '{}' to '{}': {}", partial_path().string(), path_.string(), ec.message()));
  }
}

std::filesystem::path OutputFile::leave_partial(bool keep) noexcept {
  ended_ = true;
  try {
    close_fd();
  } catch (...) {
    // What reached the file stays there; a failing close() only says the last bytes may be missing.
  }
  if (standard_output_) return {};
  try {
    std::filesystem::path partial = partial_path();
    if (keep) return partial;
    std::error_code ec;
    std::filesystem::remove(partial, ec);
  } catch (...) {
  }
  return {};
}

}  // namespace flowline
