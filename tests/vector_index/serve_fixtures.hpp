// Shared by the tests that run `flowline serve` on an index workspace as a real process: documents whose
// vectors a restarted index can be checked against, a server started (or failing to start) on a flow, a
// small tmpfs of its own (a full disk), a folder made read-only, and the frames of a workspace file.
#pragma once

#include "../gateway/gateway_fixtures.hpp"
#include "child_process.hpp"
#include "index_fixtures.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <unistd.h>

namespace serve_test {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;
using flowline::testing::ChildProcess;

constexpr int kDim = 16;
constexpr int kBatch = 500;

// Document i of batch b: its vector is a function of (b, i), so a restarted index can be checked against it.
inline float component(int b, int i, int d) {
  return static_cast<float>(std::sin(1.3 * b + 0.7 * i * (d + 1) + 0.11 * d * d));
}

// An /index body of `count` documents "b{b}-{i}" tagged {batch: b, i: i}.
inline std::string index_body(int b, int count = kBatch) {
  json::array data;
  for (int i = 0; i < count; ++i) {
    json::array embedding;
    for (int d = 0; d < kDim; ++d) embedding.emplace_back(component(b, i, d));
    data.push_back(json::object{{"id", fmt::format("b{}-{}", b, i)},
                                {"text", fmt::format("document {} of batch {}", i, b)},
                                {"tags", json::object{{"batch", b}, {"i", i}}},
                                {"embedding", std::move(embedding)}});
  }
  return json::serialize(json::object{{"data", std::move(data)}});
}

// A flow of one VectorIndex on `workspace`, written to `flow`.
inline void write_index_flow(const fs::path& flow, const fs::path& workspace, int snapshot_mb) {
  flowline::testing::write_text(flow, fmt::format("executors:\n"
                                                  "  - name: index\n"
                                                  "    uses: VectorIndex\n"
                                                  "    with: {{workspace: '{}', dim: {}, snapshot_mb: {}}}\n",
                                                  workspace.string(), kDim, snapshot_mb));
}

inline std::vector<std::string> serve_args(const fs::path& flow, const fs::path& dir, const std::string& name) {
  fs::remove(dir / (name + ".port"));
  return {FLOWLINE_LAUNCHER, "serve", flow.string(), "--port", "0", "--ready-file", (dir / (name + ".port")).string()};
}

// `flowline serve FLOW` on a port of its own, its output in DIR/NAME.log; stopped when destroyed.
class IndexServer {
 public:
  IndexServer(const fs::path& flow, const fs::path& dir, const std::string& name)
      : process_(serve_args(flow, dir, name), dir / (name + ".log")) {
    port_ = static_cast<std::uint16_t>(flowline::testing::wait_for_port(process_, dir / (name + ".port"), 60s));
    INFO(process_.log());
    REQUIRE(port_ != 0);
  }
  std::uint16_t port() const { return port_; }
  ChildProcess& process() { return process_; }

 private:
  ChildProcess process_;
  std::uint16_t port_ = 0;
};

// `flowline serve FLOW` expected to stop at start: its output, once it has ended (within 60 s; a server
// that started, or one still starting then, fails the test).
inline std::string failed_start(const fs::path& flow, const fs::path& dir, const std::string& name) {
  ChildProcess process(serve_args(flow, dir, name), dir / (name + ".log"));
  const int port = flowline::testing::wait_for_port(process, dir / (name + ".port"), 60s);
  const std::optional<int> status = process.wait(5s);
  INFO(process.log());
  REQUIRE(port == 0);
  REQUIRE(status.has_value());
  CHECK(*status != 0);
  return process.log();
}

inline std::uint64_t count_of(std::uint16_t port) {
  gateway_test::Client client(port);
  const auto reply = client.post("/status", R"({"data": []})");
  REQUIRE(reply.status == 200);
  return reply.json().at("data").at(0).at("tags").at("count").to_number<std::uint64_t>();
}

// Whether every document of batch `b` is in the index, whole: found by its tag, its own vector its best match.
inline bool batch_is_whole(gateway_test::Client& client, int b) {
  const int i = (b * 37) % kBatch;
  json::array embedding;
  for (int d = 0; d < kDim; ++d) embedding.emplace_back(component(b, i, d));
  const std::string body = json::serialize(
      json::object{{"data", json::array{json::object{{"embedding", embedding}}}},
                   {"parameters", json::object{{"limit", kBatch + 1}, {"filter", json::object{{"batch", b}}}}}});
  const auto reply = client.post("/search", body);
  if (reply.status != 200) return false;
  const json::value answer = reply.json();
  const json::array& matches = answer.at("data").at(0).at("matches").as_array();
  return matches.size() == static_cast<std::size_t>(kBatch) &&
         matches[0].at("id").as_string() == fmt::format("b{}-{}", b, i) &&
         matches[0].at("text").as_string() == fmt::format("document {} of batch {}", i, b);
}

// A tmpfs of `size` mounted at `folder` for one test (we may be root here), unmounted when destroyed;
// `why_not` says why there is none (not root, or mount refused): the test says so and skips.
class Tmpfs {
 public:
  Tmpfs(const fs::path& folder, const std::string& size) : folder_(folder) {
    fs::create_directories(folder_);
    if (::geteuid() != 0) {
      why_not_ = "not root: a test tmpfs cannot be mounted";
      return;
    }
    const std::string options = "size=" + size;
    if (::mount("tmpfs", folder_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
      why_not_ = fmt::format("mount -t tmpfs -o {} {} failed: {}", options, folder_.string(), std::strerror(errno));
      return;
    }
    mounted_ = true;
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  ~Tmpfs() {
    if (mounted_) ::umount2(folder_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }

 private:
  fs::path folder_;
  bool mounted_ = false;
  std::string why_not_;
};

// A folder in which no file can be created, renamed or removed while this lives (the immutable flag as
// root, who ignores permissions; mode 0555 otherwise), and which files already open can still be written.
class ReadOnlyFolder {
 public:
  explicit ReadOnlyFolder(const fs::path& folder) : folder_(folder) {
    if (::geteuid() != 0) {
      fs::permissions(folder_, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                      fs::perm_options::remove);
      done_ = true;
      return;
    }
    done_ = set_immutable(true);
    if (!done_) why_not_ = fmt::format("the immutable flag cannot be set on {}: {}", folder_.string(), error_);
  }
  ReadOnlyFolder(const ReadOnlyFolder&) = delete;
  ReadOnlyFolder& operator=(const ReadOnlyFolder&) = delete;
  ~ReadOnlyFolder() { writable(); }
  // Makes the folder writable again.
  void writable() {
    if (!done_) return;
    done_ = false;
    if (::geteuid() != 0) {
      fs::permissions(folder_, fs::perms::owner_write, fs::perm_options::add);
    } else {
      set_immutable(false);
    }
  }
  bool done() const { return done_; }
  const std::string& why_not() const { return why_not_; }

 private:
  bool set_immutable(bool on) {
    const int fd = ::open(folder_.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return false;
    int flags = 0;
    bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    if (ok) {
      flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
      ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    if (!ok) error_ = std::strerror(errno);
    ::close(fd);
    return ok;
  }

  fs::path folder_;
  bool done_ = false;
  std::string why_not_, error_;
};

// Where each record of a workspace file starts (and the file's length last), from the frames' lengths.
inline std::vector<std::uint64_t> record_offsets(const fs::path& file) {
  const std::string bytes = flowline::testing::read_text(file);
  std::vector<std::uint64_t> offsets;
  std::uint64_t at = 0;
  while (at + 12 <= bytes.size()) {
    offsets.push_back(at);
    std::uint32_t length = 0;
    std::memcpy(&length, bytes.data() + at, 4);  // little-endian, as this machine
    at += 12 + length;
  }
  offsets.push_back(bytes.size());
  return offsets;
}

// Writes `bytes` over a file's bytes from `offset`, keeping its length.
inline void overwrite(const fs::path& file, std::uint64_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace serve_test
