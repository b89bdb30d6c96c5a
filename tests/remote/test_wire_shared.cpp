// Wire version 4's shared memory on its own (src/core/remote/shared_segment.hpp, wire.hpp): tensors written
// into a request's region of a SharedSegment and read back bit for bit, what does not fit going inline,
// answers' offsets checked against the request's region, the Segment and Attached frames, the allocator,
// and a client that offers version 4 reaching flowline's own executor server (version 3) over plain frames.
#include "test_support.hpp"

#include "remote/shared_segment.hpp"
#include "remote/wire.hpp"

#include "flowline/executor_server.hpp"
#include "flowline/flow.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>
#include <vector>

using namespace flowline;
namespace wire = flowline::wire;
using flowline::remote::SharedSegment;

namespace {

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const std::size_t bytes = a.numel() * a.element_size();
  return bytes == 0 || std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), bytes) == 0;
}

// A tensor of `type` and `shape` with every byte set from a counter (so NaN payloads and bools' bytes too).
at::Tensor patterned(at::ScalarType type, std::vector<std::int64_t> shape, int seed) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(type));
  auto* bytes = static_cast<unsigned char*>(t.data_ptr());
  const std::size_t n = t.numel() * t.element_size();
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = type == at::kBool ? (i + seed) % 2 : static_cast<unsigned char>(i * 31 + seed);
  return t;
}

std::string_view body_of(const std::string& frame) { return std::string_view(frame).substr(wire::kLengthBytes); }

}  // namespace

TEST_CASE("tensors of every dtype and shape cross through a shared segment bit for bit", "[remote][shared]") {
  const auto segment = SharedSegment::create(64u << 20);
  DocumentArray docs;
  const std::vector<at::ScalarType> types{at::kFloat, at::kHalf,  at::kBFloat16, at::kDouble, at::kLong,
                                          at::kInt,   at::kShort, at::kChar,     at::kByte,   at::kBool};
  int seed = 0;
  for (const auto type : types) {
    Document d("t");
    d.tensor = patterned(type, {64, 33, 5}, ++seed);  // >= 16 KiB for every dtype: in the segment
    d.embedding = patterned(type, {7}, ++seed);       // small: inline
    docs.push_back(d);
  }
  Document empty("empty");
  empty.tensor = at::empty({0, 224, 3}, at::TensorOptions().dtype(at::kByte));
  docs.push_back(empty);
  Document large("large");
  large.tensor = patterned(at::kFloat, {4, 1024, 1024}, 99);  // 16 MiB
  Document parent("parent");
  parent.chunks.push_back(large);
  docs.push_back(parent);

  const std::uint64_t want = wire::shared_bytes(docs, remote::kSharedMinTensorBytes);
  auto region = segment->allocate(2 * want);
  REQUIRE(region);
  wire::SharedRegion view = region.view(remote::kSharedMinTensorBytes);
  const std::string frame = wire::encode_request(7, "/x", "", docs, 0, wire::kSharedVersion, &view);
  // The large tensors are in the segment, not in the frame.
  CHECK(frame.size() < 64 * 1024);
  CHECK(view.answer_offset - view.offset == want);

  wire::SharedRegion server{segment->data(), segment->size()};
  const wire::RequestFrame request = wire::decode_request(body_of(frame), wire::kSharedVersion, &server);
  CHECK(request.shared_offset == view.offset);
  CHECK(request.shared_bytes == view.bytes);
  CHECK(request.answer_offset == view.answer_offset);
  REQUIRE(request.docs.size() == docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) {
    INFO(i);
    CHECK(same_bits(request.docs[i].tensor, docs[i].tensor));
    if (docs[i].embedding.defined()) CHECK(same_bits(request.docs[i].embedding, docs[i].embedding));
  }
  CHECK(same_bits(request.docs[request.docs.size() - 1].chunks[0].tensor, large.tensor));

  // The answer: its tensors written into the region's free part, read back by the client within the region.
  wire::SharedRegion answer_side = view;
  const std::string answer =
      wire::encode_response(7, wire::ResponseStatus::Ok, "", "", request.docs, wire::kSharedVersion, &answer_side);
  CHECK(answer.size() < 64 * 1024);
  const wire::ResponseFrame response = wire::decode_response(body_of(answer), wire::kSharedVersion, &view);
  REQUIRE(response.docs.size() == docs.size());
  for (std::size_t i = 0; i < docs.size(); ++i) CHECK(same_bits(response.docs[i].tensor, docs[i].tensor));

  region.reset();
  CHECK(segment->free_bytes() == segment->size() - wire::kSharedAlign);  // everything given back, coalesced
}

TEST_CASE("a tensor larger than the region goes inline and a version 3 frame never names the segment",
          "[remote][shared]") {
  const auto segment = SharedSegment::create(1u << 20);
  Document d("big");
  d.tensor = patterned(at::kFloat, {512, 1024}, 3);  // 2 MiB: more than the whole segment
  DocumentArray docs(std::vector<Document>{d});
  CHECK_FALSE(segment->allocate(4u << 20));
  auto region = segment->allocate(segment->largest_free());
  REQUIRE(region);
  wire::SharedRegion view = region.view(remote::kSharedMinTensorBytes);
  const std::string frame = wire::encode_request(1, "/", "", docs, 0, wire::kSharedVersion, &view);
  CHECK(frame.size() > (2u << 20));  // inline
  const wire::SharedRegion server{segment->data(), segment->size()};
  const auto back = wire::decode_request(body_of(frame), wire::kSharedVersion, &server);
  CHECK(same_bits(back.docs[0].tensor, d.tensor));

  Document small("fits");
  small.tensor = patterned(at::kByte, {224, 224, 3}, 4);
  const std::string v3 = wire::encode_request(2, "/", "", DocumentArray(std::vector<Document>{small}), 0, 3, &view);
  CHECK(v3.size() > 150'000);  // version 3 has no segment: the tensor is in the frame
  CHECK(same_bits(wire::decode_request(body_of(v3), 3).docs[0].tensor, small.tensor));
}

TEST_CASE("an answer's tensor outside its request's region fails to decode, naming the ranges", "[remote][shared]") {
  const auto segment = SharedSegment::create(4u << 20);
  auto mine = segment->allocate(1u << 20);
  auto other = segment->allocate(1u << 20);
  REQUIRE(mine);
  REQUIRE(other);
  Document d("x");
  d.tensor = patterned(at::kByte, {224, 224, 3}, 5);
  // A server that writes its answer into another request's region, or names bytes past the segment's end, is
  // refused.
  wire::SharedRegion elsewhere = other.view(0);
  const std::string into_other = wire::encode_response(
      3, wire::ResponseStatus::Ok, "", "", DocumentArray(std::vector<Document>{d}), wire::kSharedVersion, &elsewhere);
  std::string past_the_end = into_other;
  const std::uint64_t offset = other.view(0).offset, far = std::uint64_t{1} << 40;
  const auto at = past_the_end.find(std::string_view(reinterpret_cast<const char*>(&offset), sizeof offset));
  REQUIRE(at != std::string::npos);
  std::memcpy(past_the_end.data() + at, &far, sizeof far);
  const wire::SharedRegion view = mine.view(0);
  const std::string range = fmt::format("region [{}, {})", view.offset, view.offset + view.bytes);
  for (const std::string* answer : std::vector<const std::string*>{&into_other, &past_the_end}) {
    CHECK_THROWS_WITH(wire::decode_response(body_of(*answer), wire::kSharedVersion, &view),
                      testing::contains("outside this request's " + range));
    // Without a segment at all, a tensor in one is refused too.
    CHECK_THROWS_WITH(wire::decode_response(body_of(*answer), wire::kSharedVersion, nullptr),
                      testing::contains("a tensor in a shared segment on a connection without one"));
  }
  // Within its own region it reads.
  CHECK(
      same_bits(wire::decode_response(body_of(into_other), wire::kSharedVersion, &elsewhere).docs[0].tensor, d.tensor));
}

TEST_CASE("Segment and Attached frames round-trip and the allocator coalesces", "[remote][shared]") {
  const auto segment = SharedSegment::create(1u << 20);
  const wire::SegmentOffer offer = segment->offer();
  CHECK(offer.token.size() == 16);
  CHECK(std::memcmp(segment->data(), offer.token.data(), 16) == 0);
  const wire::SegmentOffer back = wire::decode_segment(body_of(wire::encode_segment(offer)));
  CHECK(back.bytes == offer.bytes);
  CHECK(back.pid == offer.pid);
  CHECK(back.fd == offer.fd);
  CHECK(back.token == offer.token);
  const auto reply = wire::decode_attached(body_of(wire::encode_attached({false, "cannot open /proc/1/fd/3"})));
  CHECK_FALSE(reply.accepted);
  CHECK(reply.reason == "cannot open /proc/1/fd/3");
  CHECK(wire::decode_attached(body_of(wire::encode_attached({true, ""}))).accepted);

  const std::uint64_t all = segment->free_bytes();
  auto a = segment->allocate(100);  // rounded up to the alignment
  auto b = segment->allocate(1000);
  auto c = segment->allocate(64);
  CHECK(segment->free_bytes() == all - 128 - 1024 - 64);
  b.reset();
  auto d = segment->allocate(900);  // first fit: b's place
  d.reset();
  a.reset();
  c.reset();
  CHECK(segment->free_bytes() == all);
  CHECK(segment->largest_free() == all);
}

TEST_CASE("an executor server (version 3) is reached over plain frames even at an address offered a segment",
          "[remote][shared]") {
  // flowline's own server takes no segment: a client that offers versions 1..4 gets version 3, sends no
  // Segment frame (a server would refuse it and close), and tensors cross in the frames unchanged.
  Flow served(executor_flow(load_flow_config_text("executors:\n  - {name: mid, uses: NoOp}\n", "server.yml"), "mid"));
  served.start();
  ExecutorServer server(served, "mid");
  server.start({});
  const std::string address = fmt::format("127.0.0.1:{}", server.port());
  remote::offer_shared_memory(address, 1u << 20);
  Flow flow(load_flow_config_text(fmt::format("executors:\n  - {{name: mid, hosts: ['{}']}}\n", address), "c.yml"));
  flow.start();
  Document d("image");
  d.tensor = patterned(at::kByte, {224, 224, 3}, 6);
  const DocumentArray out = flow.post("/", DocumentArray(std::vector<Document>{d, d}));
  REQUIRE(out.size() == 2);
  CHECK(same_bits(out[0].tensor, d.tensor));
  CHECK(same_bits(out[1].tensor, d.tensor));
  const FlowStats stats = flow.stats();
  REQUIRE(stats.remote_hosts.size() == 1);
  CHECK(stats.remote_hosts[0].lost == 0);
  CHECK(stats.remote_hosts[0].reconnects == 0);
  flow.close();
  remote::offer_shared_memory(address, 0);
  server.stop();
  served.close();
}
