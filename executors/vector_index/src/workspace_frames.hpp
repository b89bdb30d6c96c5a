// The bytes of a workspace's files (workspace.hpp): frames with checksums, the records they carry, and the
// plain-file reads and writes behind them. Private to the VectorIndex's workspace.
//
// A frame is [u32 length][u32 CRC-32 of the body][u32 CRC-32 of those 8 bytes][body], little-endian; a body
// starts with its kind. Every file starts with a header record: magic, format, dimension, metric and (from
// format 2) the file's generation, the workspace's id and, for a snapshot, how much of its generation's log
// it holds: what chains a snapshot and its logs.
#pragma once

#include "backend.hpp"
#include "workspace.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::vector_index::frames {

namespace fs = std::filesystem;

constexpr std::uint16_t kFormat = 2;        // what this flowline writes
constexpr std::uint16_t kLegacyFormat = 1;  // read, then upgraded (no generations, no id)

enum class Kind : std::uint8_t { header = 1, upsert = 2, remove = 3, clear = 4, end = 5 };

struct Header {
  std::uint16_t format = kFormat;
  std::size_t dim = 0;
  Metric metric = Metric::cosine;
  std::uint64_t generation = 0;  // a log: its number; a snapshot: the first log it does not hold
  std::uint64_t workspace = 0;   // the workspace's id, the same in all its files
  std::uint64_t covered = 0;     // a snapshot: the bytes of log `generation` it holds (0: none)
};

// A random id for a new workspace (never 0).
std::uint64_t new_workspace_id();

// "cannot write W/index.wal: No space left on device" (errno's text).
std::string system_error(std::string_view what, const fs::path& path);

// ---- encoding ----
void put_u32(std::string& out, std::uint32_t v);
void put_u64(std::string& out, std::uint64_t v);
std::string header_body(const Header& header);
std::string upsert_body(const std::vector<const Entry*>& entries, const at::Tensor& rows);
std::string remove_body(const std::vector<std::string>& ids);
std::string end_body(std::uint64_t count);
std::string frame(const std::string& body);

// ---- plain files ----
// Opens `path` only when it is a regular file (a symbolic link to one included): a FIFO, a device, a socket
// or a folder in its place is refused with an Error naming it, and never waited on (O_NONBLOCK).
int open_regular(const fs::path& path, int flags, unsigned mode = 0644);
void write_all(int fd, const std::string& bytes, const fs::path& path);
void sync(int fd, const fs::path& path);
// fsync of a folder (what makes a rename or an unlink durable); false when it failed.
bool sync_folder(const fs::path& folder);
// A new log at `path`: created (replacing one there), its header written and synced. Returns its descriptor
// (its length in `bytes`); on failure removes what it created and throws.
int create_log(const fs::path& path, const Header& header, std::uint64_t& bytes);

// ---- decoding ----

// A frame's body being read; errors name the file and the byte offset.
class Cursor {
 public:
  Cursor(std::string_view body, const fs::path& file, std::uint64_t offset) : body_(body), file_(file), base_(offset) {}

  [[noreturn]] void fail(std::string_view what) const;
  const char* take(std::size_t n, std::string_view what);
  std::uint8_t u8(std::string_view what) { return static_cast<std::uint8_t>(*take(1, what)); }
  std::uint32_t u32(std::string_view what);
  std::uint64_t u64(std::string_view what);
  std::string str(std::string_view what);
  void done() const;
  std::size_t left() const noexcept { return body_.size() - pos_; }

 private:
  std::string_view body_;
  const fs::path& file_;
  std::uint64_t base_;
  std::size_t pos_ = 0;
};

struct FileEnd {
  std::uint64_t good = 0;  // the end of the last whole record
  std::uint64_t size = 0;  // the file's size (more: a torn tail, for a log)
  bool ended = false;      // a snapshot's end mark was read
};

// Reads one file's frames and hands each body from byte `from` on (a record's start) to `visit` (its kind and
// a cursor after the kind byte); the records before are checked (checksums), not visited.
// `log`: a torn tail — the file ends inside its last record (a header cut short, or a length that runs past
// the end) — is a write that never finished: reported with a warning and left out (FileEnd::good). Any
// complete record that fails its checksum, last or not, throws CorruptWorkspace (workspace.hpp says why).
FileEnd read_frames(const fs::path& path, bool log, std::uint64_t from,
                    const std::function<void(Kind, Cursor&)>& visit);

// The header record a file starts with; nothing when the file ends inside it (a log whose creation was cut
// short). Throws CorruptWorkspace when it is damaged or is not a header.
std::optional<Header> first_header(const fs::path& path);

Header read_header(Cursor& c);

// Replays files into a Replay, checking every header record against the file's first (format, generation,
// workspace id) and the index's metric and dimension.
class Replayer {
 public:
  Replayer(Replay& replay, std::size_t dim, Metric metric) : replay_(replay), requested_dim_(dim), metric_(metric) {}
  // `from`: the first byte to replay (0: the whole file; more: a log's part a snapshot holds is skipped).
  // `changes`, when given, counts the change records replayed.
  FileEnd file(const fs::path& path, bool log, std::uint64_t from, const Header& first,
               std::uint64_t* changes = nullptr);
  std::size_t dim() const noexcept { return dim_; }

 private:
  void header(Cursor& c, const fs::path& path, const Header& first);

  Replay& replay_;
  std::size_t requested_dim_;
  Metric metric_;
  std::size_t dim_ = 0;
};

}  // namespace flowline::vector_index::frames
