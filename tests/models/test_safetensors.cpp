// Tests of the safetensors reader (flowline/models/safetensors.hpp): errors naming the file and tensor,
// round trips, and the inputs the fuzzer found.
#include "test_support.hpp"

#include "flowline/models/safetensors.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <fcntl.h>
#include <future>
#include <sys/stat.h>
#include <unistd.h>

using namespace flowline;
using namespace flowline::models;

TEST_CASE("a file that is not safetensors is rejected with a clear error", "[encoder][safetensors]") {
  const auto dir = testing::scratch_dir("bad safetensors");
  testing::write_text(dir / "short.safetensors", "abc");
  CHECK_THROWS_WITH(
      SafetensorsFile(dir / "short.safetensors"),
      "safetensors file '" + (dir / "short.safetensors").string() + "': too short (3 bytes) to hold a header");
  testing::write_text(dir / "text.safetensors", "this is just a text file, not weights");
  CHECK_THROWS_WITH(SafetensorsFile(dir / "text.safetensors"), testing::contains("does not fit the file"));
  std::string header = R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  testing::write_text(dir / "bad.safetensors", bytes + header + std::string(8, '\0'));
  CHECK_THROWS_WITH(SafetensorsFile(dir / "bad.safetensors"),
                    testing::ends_with("tensor 'w': 8 bytes of data for shape [4] of F32 (16 expected)"));
}

TEST_CASE("safetensors written by flowline read back exactly", "[encoder][safetensors]") {
  const auto dir = testing::scratch_dir("safetensors roundtrip");
  const at::Tensor a = at::randn({3, 5}), b = at::arange(7, at::kLong);
  save_safetensors(dir / "x.safetensors", {{"a", a}, {"b", b}});
  const SafetensorsFile file(dir / "x.safetensors");
  CHECK(file.names() == std::vector<std::string>{"a", "b"});
  CHECK(at::equal(file.get("a"), a));
  CHECK(at::equal(file.get("b"), b));
}

TEST_CASE("an empty tensor at an unaligned offset reads as an empty tensor", "[encoder][safetensors]") {
  // Found by tests/fuzz/fuzz_safetensors: the unaligned path copied zero bytes from a null pointer, which
  // UBSan reports (scripts/sanitize.sh address runs this test under it).
  const auto dir = testing::scratch_dir("safetensors empty unaligned");
  std::string header = R"({"e": {"dtype": "BF16", "shape": [0, 4], "data_offsets": [1, 1]}, )"
                       R"("b": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})";
  header += std::string((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  testing::write_text(dir / "e.safetensors", bytes + header + std::string("\x01\x00", 2));
  const SafetensorsFile file(dir / "e.safetensors");
  const at::Tensor e = file.get("e");
  CHECK(e.sizes() == at::IntArrayRef{0, 4});
  CHECK(e.scalar_type() == at::kBFloat16);
  CHECK(file.get("b").sum().item<int64_t>() == 1);
}

TEST_CASE("safetensors offsets that are negative and shapes that overflow are errors naming the tensor",
          "[encoder][safetensors]") {
  // Found by tests/fuzz/fuzz_safetensors: a negative offset escaped as Boost.JSON's "not exact" error; a
  // shape whose element count overflows could wrap around to the size of the data.
  const auto dir = testing::scratch_dir("safetensors bad offsets");
  auto write = [&](const std::string& name, std::string header, std::size_t data_bytes) {
    header += std::string((8 - header.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(header.size());
    testing::write_text(dir / name, bytes + header + std::string(data_bytes, '\0'));
    return dir / name;
  };
  const auto negative =
      write("negative.safetensors", R"({"h": {"dtype": "F16", "shape": [4], "data_offsets": [-2, 8]}})", 8);
  CHECK_THROWS_WITH(SafetensorsFile(negative),
                    testing::ends_with("tensor 'h': data_offsets must be two non-negative integers"));
  const auto huge = write("huge.safetensors",
                          R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 8);
  CHECK_THROWS_WITH(SafetensorsFile(huge),
                    testing::ends_with("tensor 'w': shape [4611686018427387904, 4] is too large"));
}

TEST_CASE(
    "safetensors whose data offsets overlap, leave a gap or stop short of the file's end are refused naming "
    "the tensor",
    "[encoder][safetensors]") {
  // Hugging Face's safetensors refuses all three (InvalidOffset, MetadataIncompleteBuffer).
  const auto dir = testing::scratch_dir("safetensors layout");
  auto write = [&](const std::string& name, std::string header, std::size_t data_bytes) {
    header += std::string((8 - header.size() % 8) % 8, ' ');
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(header.size());
    testing::write_text(dir / name, bytes + header + std::string(data_bytes, '\0'));
    return dir / name;
  };
  const auto overlap = write("overlap.safetensors",
                             R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                             R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                             12);
  CHECK_THROWS_WITH(SafetensorsFile(overlap), testing::contains("'" + overlap.string() +
                                                                "': tensor 'b': data_offsets [4, 12] overlap "
                                                                "tensor 'a' (which ends at 8)"));
  const auto same = write("same.safetensors",
                          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                          R"("b": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                          8);
  CHECK_THROWS_WITH(SafetensorsFile(same), testing::contains("tensor 'b': data_offsets [0, 8] overlap tensor 'a'"));
  const auto gap = write("gap.safetensors",
                         R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
                         R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}})",
                         20);
  CHECK_THROWS_WITH(SafetensorsFile(gap), testing::contains("tensor 'b': data_offsets [12, 20] leave a gap of 4 "
                                                            "bytes after tensor 'a'"));
  const auto late = write("late.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12);
  CHECK_THROWS_WITH(SafetensorsFile(late),
                    testing::contains("tensor 'a': data_offsets [4, 12] leave a gap of 4 bytes after the header"));
  const auto trailing =
      write("trailing.safetensors", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12);
  CHECK_THROWS_WITH(SafetensorsFile(trailing), testing::contains("'" + trailing.string() +
                                                                 "': 4 bytes of data after the last tensor ('a', "
                                                                 "ending at 8)"));
  // In order and back to back (the file's order need not be the offsets'): read.
  const auto good = write("good.safetensors",
                          R"({"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}, )"
                          R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
                          16);
  CHECK(SafetensorsFile(good).names() == std::vector<std::string>{"a", "b"});
  std::filesystem::remove_all(dir);
}

TEST_CASE("a FIFO in place of a safetensors file is refused without blocking", "[encoder][safetensors]") {
  const auto dir = testing::scratch_dir("safetensors fifo");
  REQUIRE(::mkfifo((dir / "w.safetensors").c_str(), 0600) == 0);
  auto opened = std::async(std::launch::async, [&] {
    try {
      SafetensorsFile file(dir / "w.safetensors");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  if (opened.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int fd = ::open((dir / "w.safetensors").c_str(), O_WRONLY | O_NONBLOCK);  // lets the open end
    if (fd >= 0) ::close(fd);
    FAIL("opening a FIFO blocked");
  }
  CHECK_THAT(opened.get(), testing::contains("w.safetensors': not a regular file"));
  std::filesystem::remove_all(dir);
}
