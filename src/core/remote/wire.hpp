// The binary wire protocol between a flow and an executor server (docs/remote-protocol.md is its
// specification): frames, the handshake, and documents with tensors as raw bytes. Pure functions over byte
// buffers, no sockets: callable from any thread. Private to flowline::core (the fuzz target and the tests
// include it directly).
//
// A frame on the wire is a little-endian u32 length (of what follows, 1..max_frame_bytes) and that many
// bytes: a u8 frame type and its body. Every decode function checks each length against what is left of
// the frame and throws WireError naming the field and its offset; none reads past the buffer or sizes
// memory from a length it has not checked.
#pragma once

#include "flowline/document.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flowline::wire {

// The protocol versions this build speaks: it offers kMinVersion..kVersion in its Hello and, as a server,
// answers with the highest version both sides speak. Version 2 added ResponseStatus::RequestError; a
// version 1 peer reads it as Failed (encode_response downgrades it), so old peers keep working both ways.
// Version 3 added a request's deadline (RequestFrame::deadline_ms) and the Cancel frame; on a version 1 or 2
// connection the deadline is not written and no Cancel is sent (the request then runs to its end there).
// Version 4 is version 3 with a shared-memory segment per connection (the Segment/Attached frames, a
// request's region, tensors whose elements lie in the segment): flowline's client offers 1..4 (kSharedVersion)
// and uses the segment with a flow's own Python workers only; flowline's executor server speaks 1..3
// (kVersion), so a client reaches it in version 3 over plain frames.
inline constexpr std::uint16_t kMinVersion = 1;
inline constexpr std::uint16_t kVersion = 3;         // flowline's executor server's highest, the codecs' default
inline constexpr std::uint16_t kSharedVersion = 4;   // the client's highest: version 3 + a shared segment
inline constexpr std::string_view kMagic = "FLWL";   // the first four bytes of a HELLO body
inline constexpr std::size_t kLengthBytes = 4;       // the frame length prefix
inline constexpr std::size_t kMaxDocumentDepth = 8;  // chunks of chunks ... deeper is refused
inline constexpr std::size_t kMaxTensorDims = 8;

enum class FrameType : std::uint8_t {
  Hello = 1,     // client -> server, first frame: magic, versions, token
  Welcome = 2,   // server -> client: the chosen version and what is served
  Request = 3,   // client -> server: id, endpoint, parameters, documents
  Response = 4,  // server -> client: id, status, error, documents
  Error = 5,     // either way: a protocol error; the sender closes the connection after it
  Ping = 6,      // either way: answered by a Pong with the same nonce
  Pong = 7,
  Cancel = 8,     // version 3, client -> server: the request of this id is not wanted any more (no answer of its own)
  Segment = 9,    // version 4, client -> server, once after the Welcome: a shared-memory segment to map
  Attached = 10,  // version 4, server -> client: whether it mapped the segment (and why not)
};

// Version 4: a tensor whose dtype byte has this bit set holds a u64 offset into the connection's segment
// where its bytes would be.
inline constexpr std::uint8_t kSharedTensorBit = 0x80;
// Regions and tensors in a segment start at multiples of this (cache lines; numpy's alignment).
inline constexpr std::size_t kSharedAlign = 64;

// A request's part of its connection's shared segment (version 4), as the encoder and decoder see it. The
// caller owns the mapping and the region (SharedSegment, remote_host.hpp); these are plain views.
//   encoding a Request: tensors of at least min_tensor_bytes are written into the region from `offset` while
//     they fit (the rest inline); the frame then names the region and where the answer may start.
//   encoding a Response (a server's side; tests): tensors of at least min_tensor_bytes go into
//     [answer_offset, offset + bytes) while they fit.
//   decoding either: a tensor in the segment must lie wholly inside [offset, offset + bytes), else the frame
//     is refused (WireError naming both ranges); its bytes are copied out into a new tensor.
struct SharedRegion {
  char* base = nullptr;             // the segment's first byte in this process
  std::uint64_t segment_bytes = 0;  // the segment's size
  std::uint64_t offset = 0;         // the region: [offset, offset + bytes) of the segment
  std::uint64_t bytes = 0;
  std::uint64_t answer_offset = 0;   // where an answer's tensors may start (set by encode_request)
  std::size_t min_tensor_bytes = 0;  // encoding: smaller tensors go inline
};

// A Segment frame's body (version 4): the client's memfd, reached by the server as /proc/<pid>/fd/<fd>
// (so only a server on the client's machine with access to its processes can map it), `bytes` long, its
// first 16 bytes equal to `token` (so a server that opened another file, or one on another machine, sees
// that it is not the client's segment and declines).
struct SegmentOffer {
  std::uint64_t bytes = 0;
  std::uint32_t pid = 0;
  std::uint32_t fd = 0;
  std::string token;
};
struct SegmentReply {
  bool accepted = false;
  std::string reason;  // when not accepted
};

// A malformed frame: what was wrong and where (a byte offset within the frame).
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a Response says of its request. The numbers are the wire's status byte.
enum class ResponseStatus : std::uint8_t {
  Ok = 0,            // the executor ran; the documents are its output
  Failed = 1,        // the executor failed the request: the server's fault (HTTP 500, gRPC INTERNAL)
  RequestError = 2,  // version 2: the request itself is wrong (flowline::RequestError: 422, INVALID_ARGUMENT)
};
// The highest status a peer speaking `version` reads.
ResponseStatus max_status(std::uint16_t version) noexcept;

struct Hello {
  std::uint16_t min_version = kMinVersion;
  std::uint16_t max_version = kVersion;
  std::string token;
};

struct Welcome {
  std::uint16_t version = kVersion;
  std::string executor;       // the executor's name in the server's flow
  std::string executor_type;  // its registered type
  std::uint32_t max_frame_bytes = 0;
  std::uint32_t max_in_flight = 0;  // requests the server takes per connection before it stops reading
};

struct RequestFrame {
  std::uint64_t id = 0;
  // Version 4: the request's region of the segment (0, 0: none) and where the answer's tensors may go.
  std::uint64_t shared_offset = 0, shared_bytes = 0, answer_offset = 0;
  // Version 3: milliseconds the server may spend on the request, counted from its arrival, after which it
  // cancels the request as a Cancel frame would; 0: none (and always 0 from a version 1 or 2 peer).
  std::uint32_t deadline_ms = 0;
  std::string endpoint;
  std::string parameters;  // a JSON object, as text ("" for none)
  DocumentArray docs;
};

struct ResponseFrame {
  std::uint64_t id = 0;
  ResponseStatus status = ResponseStatus::Ok;  // not Ok: the request failed (not retried)
  std::string error;                           // when !ok()
  bool ok() const noexcept { return status == ResponseStatus::Ok; }
  std::string error_executor;  // when !ok
  DocumentArray docs;
};

// ---- encoding: each returns a whole frame, length prefix included --------------------------------------

std::string encode_hello(const Hello& hello);
std::string encode_welcome(const Welcome& welcome);
// Tensors on a GPU are copied to the host; non-contiguous ones are made contiguous. The documents are
// read, not changed.
// `version`: the connection's; the deadline is written from version 3 on.
// `shared` (version 4, may be null): the request's region; encode_request sets its answer_offset.
std::string encode_request(std::uint64_t id, std::string_view endpoint, std::string_view parameters,
                           const DocumentArray& docs, std::uint32_t deadline_ms = 0, std::uint16_t version = kVersion,
                           SharedRegion* shared = nullptr);
// `version`: the connection's; a status that version does not have goes out as Failed.
std::string encode_response(std::uint64_t id, ResponseStatus status, std::string_view error,
                            std::string_view error_executor, const DocumentArray& docs,
                            std::uint16_t version = kVersion, const SharedRegion* shared = nullptr);
std::string encode_error(std::string_view message);
std::string encode_ping(FrameType type, std::uint64_t nonce);  // Ping or Pong
std::string encode_cancel(std::uint64_t id);                   // version 3
std::string encode_segment(const SegmentOffer& offer);         // version 4
std::string encode_attached(const SegmentReply& reply);        // version 4
// The bytes a request's tensors of at least `min_tensor_bytes` take in a segment (each aligned), nested
// documents included: what a region for `docs` needs before room for the answer.
std::uint64_t shared_bytes(const DocumentArray& docs, std::size_t min_tensor_bytes);

// ---- decoding: `frame` is what follows the length prefix (type byte first) ---------------------------

// The length prefix of a frame: throws WireError when it is 0 or above `max_frame_bytes`.
std::uint32_t read_length(const unsigned char* prefix, std::size_t max_frame_bytes);
FrameType frame_type(std::string_view frame);  // throws on an empty frame or an unknown type

Hello decode_hello(std::string_view frame);
Welcome decode_welcome(std::string_view frame);
// `version`: the connection's (the deadline is read from version 3 on, the region from version 4 on).
// `shared`: the connection's segment (base and segment_bytes; the region is taken from the frame and checked
// against the segment); null: a tensor in a segment is a malformed frame.
RequestFrame decode_request(std::string_view frame, std::uint16_t version = kVersion,
                            const SharedRegion* shared = nullptr);
// `version`: the connection's; a status above max_status(version) is a malformed frame. `shared`: the
// request's region (a tensor outside it is a malformed frame); null: a tensor in a segment is one too.
ResponseFrame decode_response(std::string_view frame, std::uint16_t version = kVersion,
                              const SharedRegion* shared = nullptr);
std::string decode_error(std::string_view frame);
std::uint64_t decode_ping(std::string_view frame);    // Ping or Pong: the nonce
std::uint64_t decode_cancel(std::string_view frame);  // the id of the request to cancel
SegmentOffer decode_segment(std::string_view frame);
SegmentReply decode_attached(std::string_view frame);
// The id of a Request or Response frame, read without decoding its documents.
std::uint64_t frame_id(std::string_view frame);

// Every document of `docs`, encoded as the documents of a Request body (for tests and the fuzz target).
std::string encode_documents(const DocumentArray& docs);
DocumentArray decode_documents(std::string_view bytes);

}  // namespace flowline::wire
