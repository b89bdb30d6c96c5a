// The index's workspace under faults (issue 50 §1), with `flowline serve` as a real process where the fault
// is the process's: a full disk (a tmpfs of the test's own), a damaged last record, missing files, a folder
// in which no snapshot can start, a FIFO or a device in a file's place. Every answered change must be
// readable at the next start, and a workspace that cannot give them all back must not start.
#include "serve_fixtures.hpp"

#include <boost/crc.hpp>
#include <fmt/format.h>

#include <csignal>
#include <sys/stat.h>

using namespace flowline;
using namespace serve_test;
using gateway_test::Client;
using testing::contains;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

// Copies a workspace (its LOCK too: a lock is held by a process, not a file) to `to`.
fs::path copy_workspace(const fs::path& from, const fs::path& to) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

// Indexes `batches` batches through a server on `flow`, then kills it (SIGKILL: no snapshot at close).
void index_and_kill(const fs::path& flow, const fs::path& dir, int batches) {
  IndexServer server(flow, dir, "indexing");
  Client client(server.port());
  for (int b = 0; b < batches; ++b) REQUIRE(client.post("/index", index_body(b)).status == 200);
  server.process().signal(SIGKILL);
  REQUIRE(server.process().wait(10s).has_value());
}

}  // namespace

TEST_CASE("a full disk fails only the writes it stops: the log is cut back, and every answered write survives",
          "[index][durability]") {
  const fs::path dir = testing::scratch_dir("index full disk");
  Tmpfs disk(dir / "disk", "8m");
  if (!disk.mounted()) {
    WARN("skipped (no tmpfs for a full disk): " << disk.why_not());
    return;
  }
  const fs::path workspace = dir / "disk" / "workspace", flow = dir / "index.yml";
  testing::write_text(dir / "disk" / "ballast", std::string(1 << 20, 'x'));  // freed later, as an operator would
  write_index_flow(flow, workspace, 1);  // snapshots (of several MiB) are written as the disk fills
  std::vector<int> answered, small;      // batches answered 200: of 500 documents, of 20
  int refused = 0;
  {
    IndexServer server(flow, dir, "first");
    Client client(server.port());
    std::string refusal;
    for (int b = 0; b < 400 && refused < 20; ++b) {
      const auto reply = client.post("/index", index_body(b));
      if (reply.status == 200) {
        answered.push_back(b);
      } else if (++refused == 1) {
        refusal = reply.body;
      }
    }
    INFO(server.process().log());
    REQUIRE(refused > 0);  // the disk did fill
    CHECK_THAT(refusal, contains("No space left on device"));
    CHECK_THAT(refusal, contains("this change was not made"));
    // A snapshot that failed for want of space does not keep its .tmp (nothing else frees the space).
    CHECK(testing::eventually(30s, [&] { return !fs::exists(workspace / "index.snapshot.tmp"); }));
    // Space comes back: the next changes are answered, and follow the last answered one in the log.
    fs::remove(dir / "disk" / "ballast");
    for (int b = 1000; b < 1003; ++b) {
      if (client.post("/index", index_body(b, 20)).status == 200) small.push_back(b);
    }
    CHECK_FALSE(small.empty());
    server.process().stop(30s);  // a clean stop: its snapshot may fail too, and loses nothing
  }
  CHECK_FALSE(fs::exists(workspace / "index.snapshot.tmp"));
  IndexServer restarted(flow, dir, "second");
  INFO(answered.size() << " batches of " << kBatch << " and " << small.size() << " of 20 answered, " << refused
                       << " refused");
  CHECK(count_of(restarted.port()) == answered.size() * kBatch + small.size() * 20);
  Client client(restarted.port());
  for (std::size_t k = 0; k < answered.size(); k += 5) CHECK(batch_is_whole(client, answered[k]));
  if (!answered.empty()) CHECK(batch_is_whole(client, answered.back()));
}

TEST_CASE("a damaged last record of an answered request stops the start, naming file and offset, file kept",
          "[index][durability]") {
  const fs::path dir = testing::scratch_dir("index damaged last record");
  const fs::path workspace = dir / "workspace";
  write_index_flow(dir / "index.yml", workspace, 64);  // no snapshot: the three requests stay in the log
  index_and_kill(dir / "index.yml", dir, 3);
  const std::vector<std::uint64_t> offsets = record_offsets(workspace / "index.wal");
  REQUIRE(offsets.size() >= 5);  // a header (two with the dimension's), three changes, the end
  const std::uint64_t last = offsets[offsets.size() - 2], end = offsets.back();
  REQUIRE(end - last > 4096);
  const auto damaged = [&](const std::string& name, std::uint64_t at, const std::string& bytes) {
    const fs::path copy = copy_workspace(workspace, dir / name);
    overwrite(copy / "index.wal", at, bytes);
    write_index_flow(dir / (name + ".yml"), copy, 64);
    const std::string before = testing::read_text(copy / "index.wal");
    const std::string log = failed_start(dir / (name + ".yml"), dir, name);
    CHECK(testing::read_text(copy / "index.wal") == before);  // kept as it is: not cut
    return std::make_pair(log, (copy / "index.wal").string());
  };
  SECTION("one flipped byte in its body") {
    const std::string byte(1, static_cast<char>(~testing::read_text(workspace / "index.wal")[last + 100]));
    const auto [log, file] = damaged("flipped", last + 100, byte);
    CHECK_THAT(log,
               contains(fmt::format("{}: a record fails its checksum at byte {}, the file's last record", file, last)));
    CHECK_THAT(log, contains(fmt::format("truncate -s {} {}", last, file)));
  }
  SECTION("zeros over part of its body") {
    const auto [log, file] = damaged("zeroed body", last + 1000, std::string(2048, '\0'));
    CHECK_THAT(log, contains(fmt::format("{}: a record fails its checksum at byte {}", file, last)));
  }
  SECTION("zeros over the whole record") {
    const auto [log, file] = damaged("zeroed record", last, std::string(end - last, '\0'));
    CHECK_THAT(log, contains(fmt::format("{}: zeros from byte {} to the end of the file", file, last)));
  }
  SECTION("a log that ends inside its last record is a torn write: that record alone is cut") {
    const fs::path copy = copy_workspace(workspace, dir / "torn");
    fs::resize_file(copy / "index.wal", last + 12 + 1000);
    write_index_flow(dir / "torn.yml", copy, 64);
    IndexServer server(dir / "torn.yml", dir, "torn");
    CHECK(count_of(server.port()) == 2 * kBatch);
    CHECK_THAT(server.process().log(), contains(fmt::format("a record cut short at byte {}", last)));
    CHECK(fs::file_size(copy / "index.wal") == last);
  }
}

TEST_CASE("a workspace missing its snapshot or its log does not start, and names the missing file",
          "[index][durability]") {
  const fs::path dir = testing::scratch_dir("index missing files");
  const fs::path workspace = dir / "workspace";
  write_index_flow(dir / "index.yml", workspace, 1);  // a snapshot each MiB of log
  {
    IndexServer server(dir / "index.yml", dir, "indexing");
    Client client(server.port());
    for (int b = 0; b < 40; ++b) REQUIRE(client.post("/index", index_body(b)).status == 200);
    REQUIRE(testing::eventually(30s, [&] { return !fs::exists(workspace / "index.wal.old"); }));
    for (int b = 40; b < 43; ++b) REQUIRE(client.post("/index", index_body(b)).status == 200);
    server.process().signal(SIGKILL);
    REQUIRE(server.process().wait(10s).has_value());
  }
  REQUIRE(fs::exists(workspace / "index.snapshot"));
  const auto without = [&](const std::string& file) {
    const fs::path copy = copy_workspace(workspace, dir / ("without " + file));
    fs::remove(copy / file);
    write_index_flow(dir / (file + ".yml"), copy, 1);
    return std::make_pair(failed_start(dir / (file + ".yml"), dir, "without " + file), copy.string());
  };
  SECTION("index.snapshot deleted, the log kept") {
    const auto [log, folder] = without("index.snapshot");
    CHECK_THAT(log, contains(folder + ": index.snapshot is missing"));
  }
  SECTION("index.wal deleted, the snapshot kept") {
    const auto [log, folder] = without("index.wal");
    CHECK_THAT(log, contains(folder + ": index.wal is missing"));
  }
  SECTION("both there: every answered document") {
    IndexServer server(dir / "index.yml", dir, "whole");
    CHECK(count_of(server.port()) == 43 * kBatch);
  }
}

TEST_CASE("a snapshot that cannot start fails no request, and snapshots resume once the folder is writable",
          "[index][durability]") {
  const fs::path dir = testing::scratch_dir("index snapshot cannot start");
  const fs::path workspace = dir / "workspace", flow = dir / "index.yml";
  write_index_flow(flow, workspace, 1);
  int b = 0;
  {
    IndexServer server(flow, dir, "first");
    Client client(server.port());
    for (; b < 8; ++b) REQUIRE(client.post("/index", index_body(b)).status == 200);  // under 1 MiB of log
    ReadOnlyFolder folder(workspace);
    if (!folder.done()) {
      WARN("skipped (the folder cannot be made read-only): " << folder.why_not());
      return;
    }
    // Past 1 MiB: no new log can be created; the changes are in the log, so each is answered 200.
    for (; b < 30; ++b) {
      const auto reply = client.post("/index", index_body(b));
      INFO(reply.body);
      CHECK(reply.status == 200);
    }
    CHECK_FALSE(fs::exists(workspace / "index.snapshot"));
    CHECK_THAT(server.process().log(), contains("a snapshot failed"));
    folder.writable();
    const bool resumed = testing::eventually(
        90s,
        [&] {
          CHECK(client.post("/index", index_body(b++)).status == 200);
          return fs::exists(workspace / "index.snapshot");
        },
        200ms);
    CHECK(resumed);
    CHECK(testing::eventually(30s, [&] { return !fs::exists(workspace / "index.wal.old"); }));
    server.process().signal(SIGKILL);
    REQUIRE(server.process().wait(10s).has_value());
  }
  IndexServer restarted(flow, dir, "second");
  CHECK(count_of(restarted.port()) == static_cast<std::uint64_t>(b) * kBatch);
  Client client(restarted.port());
  for (int k = 0; k < b; k += 4) CHECK(batch_is_whole(client, k));
}

TEST_CASE("a FIFO or a device in place of a workspace file stops serve at once, naming the file",
          "[index][durability]") {
  const fs::path dir = testing::scratch_dir("index fifo");
  const auto refused = [&](const std::string& name, const std::string& file, bool fifo) {
    const fs::path workspace = dir / name;
    fs::create_directories(workspace);
    if (fifo) {
      REQUIRE(::mkfifo((workspace / file).c_str(), 0644) == 0);
    } else {
      fs::create_symlink("/dev/zero", workspace / file);
    }
    write_index_flow(dir / (name + ".yml"), workspace, 64);
    const auto started = std::chrono::steady_clock::now();
    const std::string log = failed_start(dir / (name + ".yml"), dir, name);
    CHECK(std::chrono::steady_clock::now() - started < 30s);
    CHECK_THAT(log, contains(fmt::format("{} is {}, not a regular file", (workspace / file).string(),
                                         fifo ? "a FIFO" : "a character device")));
  };
  SECTION("index.wal a FIFO") { refused("wal fifo", "index.wal", true); }
  SECTION("index.snapshot a FIFO") { refused("snapshot fifo", "index.snapshot", true); }
  SECTION("index.wal.old a FIFO") { refused("old fifo", "index.wal.old", true); }
  SECTION("LOCK a FIFO") { refused("lock fifo", "LOCK", true); }
  SECTION("index.wal a link to /dev/zero") { refused("wal device", "index.wal", false); }
}

namespace {

// Format 1, as flowline wrote workspaces before their files chained: the same frames, a header record of
// kind, magic, format, dimension and metric, and no generations.
void put32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
std::string text_of(std::string_view s) {
  std::string out;
  put32(out, static_cast<std::uint32_t>(s.size()));
  return out.append(s);
}
std::string frame1(const std::string& body) {
  boost::crc_32_type crc;
  crc.process_bytes(body.data(), body.size());
  std::string out;
  put32(out, static_cast<std::uint32_t>(body.size()));
  put32(out, crc.checksum());
  boost::crc_32_type head;
  head.process_bytes(out.data(), 8);
  put32(out, head.checksum());
  return out + body;
}
std::string header1() {
  std::string body("\x01", 1);
  put32(body, 0x49564c46);  // "FLVI"
  body += std::string("\x01\x00", 2);
  put32(body, 4);
  return body + std::string(1, '\0');  // cosine
}
float value1(int i, int d) { return static_cast<float>(std::sin(1.7 * i + d)); }
std::string upsert1(int first, int count) {
  std::string body("\x02", 1);
  put32(body, static_cast<std::uint32_t>(count));
  put32(body, 4);
  for (int i = first; i < first + count; ++i) {
    body += text_of(fmt::format("doc-{}", i)) + text_of(fmt::format("text {}", i)) + text_of("") + text_of("");
  }
  for (int i = first; i < first + count; ++i) {
    for (int d = 0; d < 4; ++d) {
      const float v = value1(i, d);
      body.append(reinterpret_cast<const char*>(&v), 4);
    }
  }
  return body;
}

std::uint16_t format_of(const fs::path& file) {
  const std::string bytes = testing::read_text(file);
  REQUIRE(bytes.size() > 20);
  return static_cast<std::uint16_t>(static_cast<unsigned char>(bytes[17]) |
                                    (static_cast<unsigned char>(bytes[18]) << 8));
}

std::string start_error(const fs::path& workspace) {
  try {
    index_test::IndexFlow index(index_test::backends().front(), json::object{{"workspace", workspace.string()}});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "started";
}

}  // namespace

TEST_CASE("a format-1 workspace is read as before and rewritten in format 2 at its first start",
          "[index][durability]") {
  const fs::path workspace = index_test::fresh_workspace("format 1");
  fs::create_directories(workspace);
  std::string end("\x05", 1);
  end += std::string("\x0a\0\0\0\0\0\0\0", 8);  // 10 documents
  testing::write_text(workspace / "index.snapshot", frame1(header1()) + frame1(upsert1(0, 10)) + frame1(end));
  testing::write_text(workspace / "index.wal.old", frame1(header1()) + frame1(upsert1(10, 5)));
  std::string remove("\x03", 1);
  put32(remove, 1);
  remove += text_of("doc-0");
  // The log's last write was cut short: three bytes of a frame header.
  testing::write_text(workspace / "index.wal",
                      frame1(header1()) + frame1(remove) + frame1(upsert1(15, 5)) + std::string("\x40\0\0", 3));
  const auto check = [&] {
    index_test::IndexFlow index(index_test::backends().front(), json::object{{"workspace", workspace.string()}});
    CHECK(index.status().at("count").as_uint64() == 19);
    Document query;
    query.embedding = at::tensor(std::vector<float>{value1(17, 0), value1(17, 1), value1(17, 2), value1(17, 3)});
    const DocumentArray found = index.post("/search", index_test::one_document(query));
    REQUIRE_FALSE(found[0].matches.empty());
    CHECK(found[0].matches[0].id == "doc-17");
    CHECK(found[0].matches[0].text == "text 17");
    const DocumentArray gone =
        index.post("/search", index_test::one_document(query), json::object{{"filter", json::object{{"id", "doc-0"}}}});
    CHECK(gone[0].matches.empty());
  };
  check();
  CHECK(format_of(workspace / "index.snapshot") == 2);
  CHECK(format_of(workspace / "index.wal") == 2);
  CHECK_FALSE(fs::exists(workspace / "index.wal.old"));
  check();  // and read again as format 2
}

TEST_CASE("a log of another workspace beside a snapshot is refused, naming it", "[index][durability]") {
  const index_test::Corpus corpus(100, 8);
  const auto build = [&](const std::string& name) {
    const fs::path workspace = index_test::fresh_workspace(name);
    index_test::IndexFlow index(index_test::backends().front(), json::object{{"workspace", workspace.string()}});
    index.post("/index", corpus.documents(0, 50));
    return workspace;
  };
  const fs::path mine = build("mine"), theirs = build("theirs");
  fs::copy_file(theirs / "index.wal", mine / "index.wal", fs::copy_options::overwrite_existing);
  CHECK_THAT(start_error(mine), contains((mine / "index.wal").string() + " belongs to another workspace"));
}
