// Fuzz target: the remote executors' wire protocol (src/core/remote/wire.hpp) on any bytes, read as one
// frame the way both ends read them: the length prefix against a maximum, then the frame by its type.
// Properties: a malformed frame is a wire::WireError and nothing else; a frame that decodes encodes back
// to the same bytes (Hello, Welcome, Error, Ping, Cancel), so decoding loses nothing; a Request is read as
// version 3 writes it (with its deadline) and as versions 1-2 write it (without), and what decodes encodes
// again for that version with the same id and deadline; a Response reads under protocol version 1 exactly
// when its status is one version 1 has, and one encoded for a version 1 peer keeps whether it failed and why.
// Version 4 (shared memory): a Request is also read against a small segment — its region must lie in it and
// its tensors in the region — and a Response against a region of that segment (a tensor read past the
// segment's ends would be an ASan report); a request whose region passes the segment's end never decodes;
// Segment and Attached frames encode back to the same bytes.
#include "remote/wire.hpp"

#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace wire = flowline::wire;

namespace {

// A segment for version 4 frames: 4 KiB, its region [1024, 3072) for answers.
constexpr std::size_t kSegmentBytes = 4096;
char segment[kSegmentBytes];

void same_bytes(const std::string& encoded, std::string_view frame) {
  if (std::string_view(encoded).substr(wire::kLengthBytes) != frame)
    flowline::fuzz::broken("re-encoding changed the frame");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < wire::kLengthBytes) return 0;
  try {
    const std::uint32_t length = wire::read_length(data, 1 << 20);
    const std::string_view frame(reinterpret_cast<const char*>(data) + wire::kLengthBytes,
                                 std::min<std::size_t>(length, size - wire::kLengthBytes));
    switch (wire::frame_type(frame)) {
      case wire::FrameType::Hello:
        same_bytes(wire::encode_hello(wire::decode_hello(frame)), frame);
        break;
      case wire::FrameType::Welcome:
        same_bytes(wire::encode_welcome(wire::decode_welcome(frame)), frame);
        break;
      case wire::FrameType::Request:
        for (const std::uint16_t version : {std::uint16_t{2}, wire::kVersion, wire::kSharedVersion}) {
          try {
            wire::SharedRegion shared{segment, kSegmentBytes};
            const wire::RequestFrame r =
                wire::decode_request(frame, version, version == wire::kSharedVersion ? &shared : nullptr);
            if (r.shared_bytes > 0 &&
                (r.shared_offset > kSegmentBytes || r.shared_bytes > kSegmentBytes - r.shared_offset))
              flowline::fuzz::broken("a request's region past the segment was accepted");
            if (wire::frame_id(frame) != r.id) flowline::fuzz::broken("frame_id disagrees with decode_request");
            if (version < 3 && r.deadline_ms != 0) flowline::fuzz::broken("a version 2 request has a deadline");
            // Tags re-serialize differently, so not the same bytes; the id and the deadline survive.
            const std::string again =
                wire::encode_request(r.id, r.endpoint, r.parameters, r.docs, r.deadline_ms, version);
            const wire::RequestFrame back =
                wire::decode_request(std::string_view(again).substr(wire::kLengthBytes), version);
            if (back.id != r.id || back.deadline_ms != r.deadline_ms || back.endpoint != r.endpoint)
              flowline::fuzz::broken("a re-encoded request lost its id, deadline or endpoint");
          } catch (const wire::WireError&) {
          }
        }
        break;
      case wire::FrameType::Response: {
        try {
          wire::SharedRegion region{segment, kSegmentBytes, 1024, 2048, 1024, 0};
          (void)wire::decode_response(frame, wire::kSharedVersion, &region);
        } catch (const wire::WireError&) {
        }
        const wire::ResponseFrame r = wire::decode_response(frame);
        (void)wire::encode_response(r.id, r.status, r.error, r.error_executor, r.docs);
        // Version 1 knows statuses 0 and 1 only: it reads them as version 2 does and refuses the others, and
        // what a version 1 connection is sent reads there (a RequestError goes out as Failed).
        bool old_reads = true;
        try {
          if (wire::decode_response(frame, 1).status != r.status)
            flowline::fuzz::broken("version 1 read another status");
        } catch (const wire::WireError&) {
          old_reads = false;
        }
        if (old_reads != (r.status <= wire::ResponseStatus::Failed))
          flowline::fuzz::broken("version 1 reads a status it does not have, or refuses one it has");
        const std::string old = wire::encode_response(r.id, r.status, r.error, r.error_executor, {}, 1);
        const wire::ResponseFrame back = wire::decode_response(std::string_view(old).substr(wire::kLengthBytes), 1);
        if (back.ok() != r.ok() || back.error != r.error || back.error_executor != r.error_executor)
          flowline::fuzz::broken("a version 1 answer lost its outcome or its error");
        break;
      }
      case wire::FrameType::Error:
        same_bytes(wire::encode_error(wire::decode_error(frame)), frame);
        break;
      case wire::FrameType::Ping:
      case wire::FrameType::Pong:
        same_bytes(wire::encode_ping(wire::frame_type(frame), wire::decode_ping(frame)), frame);
        break;
      case wire::FrameType::Cancel:
        same_bytes(wire::encode_cancel(wire::decode_cancel(frame)), frame);
        break;
      case wire::FrameType::Segment:
        same_bytes(wire::encode_segment(wire::decode_segment(frame)), frame);
        break;
      case wire::FrameType::Attached:
        same_bytes(wire::encode_attached(wire::decode_attached(frame)), frame);
        break;
    }
  } catch (const wire::WireError&) {
  }
  return 0;
}
