// A workspace's bytes (workspace_frames.hpp): frames and records encoded and decoded, plain files opened,
// written and synced, and the rule that tells a log's torn tail from a damaged record.
#include "workspace_frames.hpp"

#include <ATen/ATen.h>
#include <boost/crc.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowline::vector_index::frames {

namespace {

constexpr std::uint32_t kMagic = 0x49564c46;  // "FLVI"
constexpr std::size_t kFrameHeader = 12;
constexpr std::uint32_t kMaxFrame = 1u << 30;
constexpr std::uint32_t kMaxHeader = 64;  // a header record's body is 12 (format 1) or 28 bytes

std::uint32_t crc32(const void* data, std::size_t size) {
  boost::crc_32_type crc;
  crc.process_bytes(data, size);
  return crc.checksum();
}

void put_string(std::string& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out += s;
}

std::string what_is(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void not_regular(const fs::path& path, mode_t mode) {
  throw Error(
      fmt::format("{} is {}, not a regular file: a workspace holds regular files only (move it away, or use "
                  "another workspace)",
                  path.string(), what_is(mode)));
}

std::uint64_t size_of(int fd, const fs::path& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(system_error("cannot read", path));
  return static_cast<std::uint64_t>(st.st_size);
}

// A complete record that fails its checksum. The last one of a log gets the way out: it is not a write cut
// short (that ends the file inside its record), so it is refused like any other, and the error says how to
// drop it by hand.
// `header`: its 12-byte frame header is what fails.
[[noreturn]] void damaged(const fs::path& path, std::uint64_t offset, bool last, bool header = false) {
  const std::string what = fmt::format("{}: a record fails its checksum at byte {}{}", path.string(), offset,
                                       header ? " (its frame header)" : "");
  if (!last) throw CorruptWorkspace(what);
  throw CorruptWorkspace(fmt::format(
      "{}, the file's last record: it is whole (a write cut short by a crash ends the file inside its record "
      "instead), so it was written and answered, then damaged. The file is left as it is: restore it from a "
      "copy, or give up that record's change (and only it) with `truncate -s {} {}`",
      what, offset, path.string()));
}

// Zeros from `offset` to the end of a log, where a record should start.
[[noreturn]] void zeros(const fs::path& path, std::uint64_t offset, std::uint64_t size) {
  throw CorruptWorkspace(fmt::format(
      "{}: zeros from byte {} to the end of the file ({} bytes) where a record should be: what a file system "
      "that may write a file's size before its data (ext4 data=writeback) leaves of a write cut by power "
      "loss, or answered records damaged since. The file is left as it is: if the machine lost power while "
      "the index was writing, drop them with `truncate -s {} {}`; otherwise restore the file from a copy",
      path.string(), offset, size - offset, offset, path.string()));
}

bool zeros_to_end(std::FILE* file) {
  for (int c; (c = std::fgetc(file)) != EOF;) {
    if (c != 0) return false;
  }
  return true;
}

}  // namespace

std::uint64_t new_workspace_id() {
  std::random_device random;
  std::uint64_t id = 0;
  while (id == 0) id = (static_cast<std::uint64_t>(random()) << 32) ^ random();
  return id;
}

std::string system_error(std::string_view what, const fs::path& path) {
  return fmt::format("{} {}: {}", what, path.string(), std::strerror(errno));
}

// ---- encoding ----

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::string header_body(const Header& header) {
  std::string body(1, static_cast<char>(Kind::header));
  put_u32(body, kMagic);
  body += static_cast<char>(kFormat & 0xff);
  body += static_cast<char>(kFormat >> 8);
  put_u32(body, static_cast<std::uint32_t>(header.dim));
  body += static_cast<char>(header.metric);
  put_u64(body, header.generation);
  put_u64(body, header.workspace);
  put_u64(body, header.covered);
  return body;
}

std::string upsert_body(const std::vector<const Entry*>& entries, const at::Tensor& rows) {
  const at::Tensor r = rows.to(at::kCPU, at::kFloat).contiguous();
  std::string body(1, static_cast<char>(Kind::upsert));
  put_u32(body, static_cast<std::uint32_t>(entries.size()));
  put_u32(body, static_cast<std::uint32_t>(r.size(1)));
  for (const Entry* e : entries) {
    put_string(body, e->id);
    put_string(body, e->text);
    put_string(body, e->uri);
    put_string(body, e->tags.empty() ? std::string() : boost::json::serialize(e->tags));
  }
  body.append(reinterpret_cast<const char*>(r.data_ptr<float>()), static_cast<std::size_t>(r.numel()) * 4);
  return body;
}

std::string remove_body(const std::vector<std::string>& ids) {
  std::string body(1, static_cast<char>(Kind::remove));
  put_u32(body, static_cast<std::uint32_t>(ids.size()));
  for (const auto& id : ids) put_string(body, id);
  return body;
}

std::string end_body(std::uint64_t count) {
  std::string body(1, static_cast<char>(Kind::end));
  put_u64(body, count);
  return body;
}

std::string frame(const std::string& body) {
  std::string out;
  out.reserve(kFrameHeader + body.size());
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  put_u32(out, crc32(body.data(), body.size()));
  put_u32(out, crc32(out.data(), 8));
  out += body;  // into the reserved space: the body is copied once
  return out;
}

// ---- plain files ----

int open_regular(const fs::path& path, int flags, unsigned mode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) throw Error(system_error("cannot open", path));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced between the two looks
    ::close(fd);
    not_regular(path, st.st_mode);
  }
  return fd;
}

void write_all(int fd, const std::string& bytes, const fs::path& path) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(system_error("cannot write", path));
    done += static_cast<std::size_t>(n);
  }
}

void sync(int fd, const fs::path& path) {
  if (::fdatasync(fd) != 0) throw Error(system_error("cannot sync", path));
}

bool sync_folder(const fs::path& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

int create_log(const fs::path& path, const Header& header, std::uint64_t& bytes) {
  const int fd = open_regular(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND);
  try {
    const std::string first = frame(header_body(header));
    bytes = first.size();
    write_all(fd, first, path);
    sync(fd, path);
  } catch (...) {
    ::close(fd);
    ::unlink(path.c_str());
    throw;
  }
  return fd;
}

// ---- decoding ----

void Cursor::fail(std::string_view what) const {
  throw CorruptWorkspace(fmt::format("{}: {} at byte {}", file_.string(), what, base_ + pos_));
}

const char* Cursor::take(std::size_t n, std::string_view what) {
  if (n > body_.size() - pos_) fail(fmt::format("{} runs past the end of its record", what));
  const char* p = body_.data() + pos_;
  pos_ += n;
  return p;
}

std::uint32_t Cursor::u32(std::string_view what) {
  const auto* p = reinterpret_cast<const unsigned char*>(take(4, what));
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

std::uint64_t Cursor::u64(std::string_view what) {
  const std::uint64_t low = u32(what);
  return low | (static_cast<std::uint64_t>(u32(what)) << 32);
}

std::string Cursor::str(std::string_view what) {
  const std::uint32_t n = u32(what);
  return std::string(take(n, what), n);
}

void Cursor::done() const {
  if (pos_ != body_.size()) fail("unexpected bytes after the end of a record");
}

FileEnd read_frames(const fs::path& path, bool log, std::uint64_t from,
                    const std::function<void(Kind, Cursor&)>& visit) {
  const int fd = open_regular(path, O_RDONLY);
  std::FILE* file = ::fdopen(fd, "rb");
  if (!file) {
    ::close(fd);
    throw Error(system_error("cannot read", path));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(file, &std::fclose);
  const std::uint64_t size = size_of(fd, path);
  if (from > size) {
    throw CorruptWorkspace(fmt::format("{}: the file holds {} bytes, fewer than the {} index.snapshot holds of it",
                                       path.string(), size, from));
  }
  std::uint64_t offset = 0;
  std::string body;
  const auto torn = [&]() -> FileEnd {
    if (!log) throw CorruptWorkspace(fmt::format("{}: a record cut short at byte {}", path.string(), offset));
    if (offset < from) {
      throw CorruptWorkspace(
          fmt::format("{}: a record cut short at byte {}, in the part index.snapshot holds", path.string(), offset));
    }
    spdlog::warn(
        "{}: a record cut short at byte {} (the file ends {} bytes into it): a write cut short by a crash, "
        "whose request was not answered (or a file truncated since); the log is cut there",
        path.string(), offset, size - offset);
    return {offset, size};
  };
  while (offset < size) {
    unsigned char head[kFrameHeader];
    if (size - offset < kFrameHeader) return torn();
    if (std::fread(head, 1, kFrameHeader, file) != kFrameHeader) throw Error(system_error("cannot read", path));
    Cursor h(std::string_view(reinterpret_cast<const char*>(head), kFrameHeader), path, offset);
    const std::uint32_t length = h.u32("length"), body_crc = h.u32("checksum"), head_crc = h.u32("checksum");
    if (crc32(head, 8) != head_crc) {
      const bool all_zero = std::all_of(head, head + kFrameHeader, [](unsigned char b) { return b == 0; });
      if (log && all_zero && zeros_to_end(file)) zeros(path, offset, size);
      damaged(path, offset, false, true);
    }
    if (length == 0 || length > kMaxFrame) {
      throw CorruptWorkspace(fmt::format("{}: a record of {} bytes at byte {}", path.string(), length, offset));
    }
    if (length > size - offset - kFrameHeader) return torn();
    body.resize(length);
    if (std::fread(body.data(), 1, length, file) != length) throw Error(system_error("cannot read", path));
    if (crc32(body.data(), length) != body_crc) {
      damaged(path, offset, log && offset + kFrameHeader + length == size);
    }
    if (offset < from && offset + kFrameHeader + length > from) {
      throw CorruptWorkspace(fmt::format("{}: byte {}, where index.snapshot's part of the log ends, is inside a record",
                                         path.string(), from));
    }
    if (offset >= from) {  // before: a part index.snapshot holds, checked but not replayed
      Cursor c(body, path, offset + kFrameHeader);
      const auto kind = static_cast<Kind>(c.u8("record kind"));
      visit(kind, c);
    }
    offset += kFrameHeader + length;
  }
  return {offset, size};
}

std::optional<Header> first_header(const fs::path& path) {
  const int fd = open_regular(path, O_RDONLY);
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  const std::uint64_t size = size_of(fd, path);
  unsigned char head[kFrameHeader];
  if (size < kFrameHeader) return std::nullopt;
  if (::pread(fd, head, kFrameHeader, 0) != static_cast<ssize_t>(kFrameHeader)) {
    throw Error(system_error("cannot read", path));
  }
  Cursor h(std::string_view(reinterpret_cast<const char*>(head), kFrameHeader), path, 0);
  const std::uint32_t length = h.u32("length"), body_crc = h.u32("checksum"), head_crc = h.u32("checksum");
  if (crc32(head, 8) != head_crc) damaged(path, 0, false, true);
  if (length == 0 || length > kMaxHeader) h.fail("a file that does not start with its header");
  if (length > size - kFrameHeader) return std::nullopt;
  std::string body(length, '\0');
  if (::pread(fd, body.data(), length, kFrameHeader) != static_cast<ssize_t>(length)) {
    throw Error(system_error("cannot read", path));
  }
  if (crc32(body.data(), length) != body_crc) damaged(path, 0, false);
  Cursor c(body, path, kFrameHeader);
  if (static_cast<Kind>(c.u8("record kind")) != Kind::header) c.fail("a file that does not start with its header");
  return read_header(c);
}

Header read_header(Cursor& c) {
  if (c.u32("magic") != kMagic) c.fail("not a flowline index file (bad magic)");
  Header header;
  const std::uint32_t low = c.u8("format"), high = c.u8("format");
  header.format = static_cast<std::uint16_t>(low | (high << 8));
  if (header.format != kFormat && header.format != kLegacyFormat) {
    c.fail(fmt::format("format {} (this flowline reads {} and {})", header.format, kLegacyFormat, kFormat));
  }
  header.dim = c.u32("dimension");
  const std::uint8_t m = c.u8("metric");
  if (m > static_cast<std::uint8_t>(Metric::l2)) c.fail(fmt::format("unknown metric {}", m));
  header.metric = static_cast<Metric>(m);
  if (header.format == kFormat) {
    header.generation = c.u64("generation");
    header.workspace = c.u64("workspace id");
    header.covered = c.u64("covered bytes");
    if (header.generation == 0) c.fail("generation 0");
  }
  c.done();
  return header;
}

namespace {

void read_upsert(Cursor& c, Replay& replay, std::size_t dim) {
  const std::uint32_t n = c.u32("count"), d = c.u32("dimension");
  if (n > c.left() / 16) c.fail(fmt::format("{} documents in a record of {} bytes", n, c.left()));
  if (d != dim) c.fail(fmt::format("rows of {} dimensions in an index of {}", d, dim));
  std::vector<Entry> entries(n);
  for (Entry& e : entries) {
    e.id = c.str("id");
    e.text = c.str("text");
    e.uri = c.str("uri");
    const std::string tags = c.str("tags");
    if (!tags.empty()) {
      boost::system::error_code ec;
      const boost::json::value v = boost::json::parse(tags, ec);
      if (ec || !v.is_object()) c.fail("tags that are not a JSON object");
      e.tags = v.get_object();
    }
  }
  const std::size_t bytes = static_cast<std::size_t>(n) * d * 4;
  const char* data = c.take(bytes, "rows");  // checked before anything that size is allocated
  at::Tensor rows = at::empty({n, d}, at::kFloat);
  std::memcpy(rows.data_ptr<float>(), data, bytes);
  c.done();
  replay.upsert(std::move(entries), rows);
}

void read_remove(Cursor& c, Replay& replay) {
  const std::uint32_t n = c.u32("count");
  if (n > c.left() / 4) c.fail(fmt::format("{} ids in a record of {} bytes", n, c.left()));
  std::vector<std::string> ids(n);
  for (auto& id : ids) id = c.str("id");
  c.done();
  replay.remove(ids);
}

}  // namespace

FileEnd Replayer::file(const fs::path& path, bool log, std::uint64_t from, const Header& first,
                       std::uint64_t* changes) {
  bool seen_header = from > 0, ended = false;
  FileEnd end = read_frames(path, log, from, [&](Kind kind, Cursor& c) {
    if (ended) c.fail("records after the end mark");
    if (!seen_header && kind != Kind::header) c.fail("a file that does not start with its header");
    switch (kind) {
      case Kind::header:  // the first, and another when the first rows settle the dimension
        seen_header = true;
        header(c, path, first);
        return;
      case Kind::upsert:
        if (!dim_) c.fail("rows before the index's dimension is known");
        read_upsert(c, replay_, dim_);
        break;
      case Kind::remove:
        read_remove(c, replay_);
        break;
      case Kind::clear:
        c.done();
        replay_.clear();
        break;
      case Kind::end:
        if (log) c.fail("an end mark in the log");
        c.u64("count");
        c.done();
        ended = true;
        return;
      default:
        c.fail(fmt::format("unknown record kind {}", static_cast<int>(kind)));
    }
    if (changes) ++*changes;
  });
  end.ended = ended;
  return end;
}

void Replayer::header(Cursor& c, const fs::path& path, const Header& first) {
  const Header h = read_header(c);
  if (h.format != first.format || h.generation != first.generation || h.workspace != first.workspace) {
    c.fail("a header that does not match the file's first");
  }
  const std::string folder = path.parent_path().string();
  if (h.metric != metric_) {
    throw Error(
        fmt::format("workspace {} holds an index with metric {}; the flow asks for {} (use that metric or another "
                    "workspace)",
                    folder, metric_name(h.metric), metric_name(metric_)));
  }
  if (h.dim && dim_ && h.dim != dim_) c.fail(fmt::format("dimension {} after {}", h.dim, dim_));
  if (h.dim && requested_dim_ && h.dim != requested_dim_) {
    throw Error(fmt::format("workspace {} holds vectors of {} dimensions; the flow's 'dim' is {}", folder, h.dim,
                            requested_dim_));
  }
  if (h.dim && !dim_) {
    dim_ = h.dim;
    replay_.header(dim_, metric_);
  }
}

}  // namespace flowline::vector_index::frames
