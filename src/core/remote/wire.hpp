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
inline constexpr std::uint16_t kMinVersion = 1;
inline constexpr std::uint16_t kVersion = 3;
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
  Cancel = 8,  // version 3, client -> server: the request of this id is not wanted any more (no answer of its own)
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
std::string encode_request(std::uint64_t id, std::string_view endpoint, std::string_view parameters,
                           const DocumentArray& docs, std::uint32_t deadline_ms = 0, std::uint16_t version = kVersion);
// `version`: the connection's; a status that version does not have goes out as Failed.
std::string encode_response(std::uint64_t id, ResponseStatus status, std::string_view error,
                            std::string_view error_executor, const DocumentArray& docs,
                            std::uint16_t version = kVersion);
std::string encode_error(std::string_view message);
std::string encode_ping(FrameType type, std::uint64_t nonce);  // Ping or Pong
std::string encode_cancel(std::uint64_t id);                   // version 3

// ---- decoding: `frame` is what follows the length prefix (type byte first) ---------------------------

// The length prefix of a frame: throws WireError when it is 0 or above `max_frame_bytes`.
std::uint32_t read_length(const unsigned char* prefix, std::size_t max_frame_bytes);
FrameType frame_type(std::string_view frame);  // throws on an empty frame or an unknown type

Hello decode_hello(std::string_view frame);
Welcome decode_welcome(std::string_view frame);
// `version`: the connection's (the deadline is read from version 3 on).
RequestFrame decode_request(std::string_view frame, std::uint16_t version = kVersion);
// `version`: the connection's; a status above max_status(version) is a malformed frame.
ResponseFrame decode_response(std::string_view frame, std::uint16_t version = kVersion);
std::string decode_error(std::string_view frame);
std::uint64_t decode_ping(std::string_view frame);    // Ping or Pong: the nonce
std::uint64_t decode_cancel(std::string_view frame);  // the id of the request to cancel
// The id of a Request or Response frame, read without decoding its documents.
std::uint64_t frame_id(std::string_view frame);

// Every document of `docs`, encoded as the documents of a Request body (for tests and the fuzz target).
std::string encode_documents(const DocumentArray& docs);
DocumentArray decode_documents(std::string_view bytes);

}  // namespace flowline::wire
