// Fuzz target: a VectorIndex workspace's files (executors/vector_index/src/workspace.hpp) on any bytes. The
// first byte says which files the rest becomes: 0 the log (index.wal), 1 the snapshot (index.snapshot), 2 the
// snapshot's first half and the log's second; 3 the snapshot, index.wal.old and index.wal, and 4 index.wal
// and index.wal.next, each file but the last after its u32 length (a file of length 0 is left out). So the
// chaining of format 2's files (generations, the workspace id, the bytes of its log a snapshot holds) is
// fuzzed as well as the frames. Properties: load() replays or throws flowline::Error naming the workspace;
// everything it replays is well formed (one row of the index's dimension per document).
#include "flowline/error.hpp"

#include "fuzz_support.hpp"
#include "workspace.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
namespace vi = flowline::vector_index;

namespace {

class Checked : public vi::Replay {
 public:
  void header(std::size_t dim, vi::Metric) override { dim_ = dim; }
  void upsert(std::vector<vi::Entry> entries, const at::Tensor& rows) override {
    if (rows.dim() != 2 || rows.size(0) != static_cast<std::int64_t>(entries.size()) ||
        rows.size(1) != static_cast<std::int64_t>(dim_)) {
      flowline::fuzz::broken("rows that do not match their documents or the dimension");
    }
  }
  void remove(const std::vector<std::string>&) override {}
  void clear() override {}

 private:
  std::size_t dim_ = 0;
};

void write(const fs::path& file, const std::uint8_t* data, std::size_t size) {
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Modes 3 and 4: the files named, each but the last after its u32 length (a file of length 0 is left out).
void write_files(const fs::path& folder, std::initializer_list<const char*> names, const std::uint8_t* data,
                 std::size_t size) {
  std::size_t left = names.size();
  for (const char* name : names) {
    std::size_t length = size;
    if (--left > 0) {
      length = 0;
      for (int i = 0; i < 4 && size > 0; ++i, ++data, --size) length |= static_cast<std::size_t>(*data) << (8 * i);
      length = std::min(length, size);
    }
    if (length > 0) write(folder / name, data, length);
    data += length;
    size -= length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fs::path folder = fs::temp_directory_path() / fmt::format("flowline-fuzz-workspace-{}", ::getpid());
  if (size == 0) return 0;
  fs::remove_all(folder);
  fs::create_directories(folder);
  const std::uint8_t mode = data[0] % 5;
  ++data;
  --size;
  if (mode == 3) {
    write_files(folder, {"index.snapshot", "index.wal.old", "index.wal"}, data, size);
  } else if (mode == 4) {
    write_files(folder, {"index.wal", "index.wal.next"}, data, size);
  } else {
    const std::size_t half = mode == 2 ? size / 2 : (mode == 1 ? size : 0);
    if (mode >= 1) write(folder / "index.snapshot", data, half);
    if (mode != 1) write(folder / "index.wal", data + half, size - half);
  }
  try {
    vi::Workspace workspace(folder);
    Checked replay;
    workspace.load(replay, 0, vi::Metric::cosine);
  } catch (const flowline::Error& e) {
    if (std::string_view(e.what()).find(folder.string()) == std::string_view::npos) flowline::fuzz::broken(e.what());
  }
  return 0;
}
