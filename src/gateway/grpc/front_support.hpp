// What the gRPC front's services share (front.cpp, info_services.cpp): the bearer token from a call's
// metadata, a refusal's gRPC status code, and messages as raw bytes. The services take their requests as
// bytes (gRPC's raw callback methods) and parse them here, so that a message that does not parse as the
// method's request is answered INVALID_ARGUMENT naming the method and the message (gRPC C++ 1.51's
// generated services end a stream with OK, and answer a unary call UNIMPLEMENTED without a word, before any
// flowline code runs). Functions callable from any thread. Private to flowline::gateway.
#pragma once

#include "../core.hpp"

#include <google/protobuf/message_lite.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace flowline::gateway {

// Whether the call's metadata carries the gateway's bearer token ("authorization: Bearer <token>"), or
// none is needed.
bool authorized(const Core& core, const grpc::CallbackServerContext* context);

// The gRPC status code a refusal ends its call with (BadRequest: INVALID_ARGUMENT, TooLarge:
// RESOURCE_EXHAUSTED, ...; Failed: INTERNAL).
grpc::StatusCode grpc_code(Refusal kind) noexcept;

// Parses `bytes` as `message` (protobuf's wire format, as gRPC's generated code parses it); `bytes` is
// emptied. False when they are not that message's encoding (`message` then holds what was read before the
// fault, to be dropped). May throw std::bad_alloc.
bool parse_message(grpc::ByteBuffer& bytes, google::protobuf::MessageLite& message);

// Whether a jina.DataRequestProto's documents are docarray < 0.30's (DocumentProto, jina_v1.proto) rather than
// docarray >= 0.30's (DocProto), told from the first document's first bytes without parsing the message: a
// DocProto holds only its field 1, map entries whose first byte is their key's tag (0x0a); a DocumentProto
// starts with its id (field 1, a string of letters and digits) or, without one, with another field. nullopt
// when there is no document or the bytes end early (the parse then says what is wrong). A request without
// documents cannot be told by its bytes at all: the Jina clients of both generations build it alike (header,
// parameters, no data; jina_v1.proto and jina.proto give DataRequestProto the same fields and numbers).
std::optional<bool> docarray_v1_documents(const grpc::ByteBuffer& bytes);
// docarray_v1_documents(), false when the documents do not say (a request is docarray >= 0.30's by default).
bool docarray_v1_message(const grpc::ByteBuffer& bytes);

// The generation a request of a jina.JinaRPC/Call stream is read and answered in: the one its documents say
// (docarray_v1_documents), else the one the stream's earlier requests said (`stream`: one client's stream
// speaks one generation), else docarray >= 0.30's. A request whose documents say sets `stream`.
bool docarray_v1_on_stream(const grpc::ByteBuffer& bytes, std::optional<bool>& stream);

// What a refusal of a message that does not parse says: "the message (4 bytes) does not parse as
// jina.DataRequestProto, the request of jina.JinaRPC/Call". `method` as gRPC names it, without the
// leading slash.
std::string not_parsed(std::string_view method, const google::protobuf::MessageLite& message, std::size_t bytes);

// Serializes `message` into `out` (as gRPC's generated code would before writing it). nullopt when done,
// else what failed. May throw std::bad_alloc.
std::optional<std::string> serialize_message(const google::protobuf::MessageLite& message, grpc::ByteBuffer& out);

}  // namespace flowline::gateway
