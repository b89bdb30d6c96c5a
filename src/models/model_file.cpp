// Reading a model folder's files with a type and size check (model_file.hpp): regular files only, opened
// without blocking, each kind within its bound.
#include "model_file.hpp"

#include "flowline/error.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowline::models {

namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

const char* type_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// Closes the descriptor on every way out.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::uint64_t model_file_bound(ModelFile kind) {
  switch (kind) {
    case ModelFile::Json:
      return 16 * kMiB;
    case ModelFile::TokenizerJson:
      return 256 * kMiB;
    case ModelFile::Vocabulary:
      return 64 * kMiB;
  }
  return 16 * kMiB;
}

std::string_view model_file_kind(ModelFile kind) {
  switch (kind) {
    case ModelFile::Json:
      return "a JSON config";
    case ModelFile::TokenizerJson:
      return "a tokenizer.json";
    case ModelFile::Vocabulary:
      return "a vocab.txt";
  }
  return "a model file";
}

std::string read_model_file(const std::filesystem::path& path, ModelFile kind) {
  const std::uint64_t bound = model_file_bound(kind);
  auto too_large = [&](std::uint64_t bytes, const char* more) {
    return Error(fmt::format("'{}': {}{} bytes, over the {} MiB {} may hold", path.string(), more, bytes, bound / kMiB,
                             model_file_kind(kind)));
  };
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; the type is checked on the
  // descriptor (what is read), not on the name.
  const Descriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (file.fd < 0) throw Error(fmt::format("'{}': cannot be read: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0)
    throw Error(fmt::format("'{}': cannot be read: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    throw Error(fmt::format("'{}': not a regular file ({}); a model folder's files must be regular files",
                            path.string(), type_of(st.st_mode)));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > bound) throw too_large(size, "");
  // Read up to one byte past the bound: a file that grows while it is read is held to the bound too.
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t used = 0;
  for (;;) {
    if (used == text.size()) {
      if (text.size() > bound) throw too_large(text.size(), "at least ");
      text.resize(std::min<std::uint64_t>(bound + 1, std::max<std::uint64_t>(2 * text.size(), 4096)));
    }
    const ssize_t got = ::read(file.fd, text.data() + used, text.size() - used);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(fmt::format("'{}': cannot be read: {}", path.string(), std::strerror(errno)));
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  text.resize(used);
  return text;
}

bool stays_inside(const std::filesystem::path& relative) {
  if (relative.has_root_name() || relative.has_root_directory()) return false;
  for (const auto& part : relative) {
    if (part == "..") return false;
  }
  return true;
}

std::string json_excerpt(const boost::json::value& v) {
  std::string text = boost::json::serialize(v);
  if (text.size() > 40) {  // in place: GCC 12 warns (wrongly) of an overflow on substr(0, 37) + "..."
    text.resize(37);
    text += "...";
  }
  return text;
}

}  // namespace flowline::models
