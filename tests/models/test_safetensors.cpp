// Tests of the safetensors reader (flowline/models/safetensors.hpp): errors naming the file and tensor,
// round trips, and the inputs the fuzzer found.
#include "test_support.hpp"

#include "flowline/models/safetensors.hpp"

#include <ATen/ATen.h>

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
