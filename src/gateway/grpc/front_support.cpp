// front_support.hpp: the token, status codes, and protobuf messages to and from gRPC's byte buffers through
// gRPC's own protobuf serialization (grpc::SerializationTraits), so the bytes are those the generated code
// reads and writes.
#include "front_support.hpp"

#include <fmt/format.h>
#include <grpcpp/impl/codegen/proto_utils.h>

namespace flowline::gateway {

bool authorized(const Core& core, const grpc::CallbackServerContext* context) {
  const auto& metadata = context->client_metadata();
  const auto it = metadata.find("authorization");
  return core.authorized(it == metadata.end() ? std::string_view()
                                              : std::string_view(it->second.data(), it->second.size()));
}

grpc::StatusCode grpc_code(Refusal kind) noexcept {
  switch (kind) {
    case Refusal::BadRequest:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case Refusal::Unauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case Refusal::NotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Refusal::TooLarge:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Refusal::Busy:
    case Refusal::Unavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case Refusal::Timeout:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case Refusal::Failed:
      break;
  }
  return grpc::StatusCode::INTERNAL;
}

bool parse_message(grpc::ByteBuffer& bytes, google::protobuf::MessageLite& message) {
  return grpc::SerializationTraits<google::protobuf::MessageLite>::Deserialize(&bytes, &message).ok();
}

std::string not_parsed(std::string_view method, const google::protobuf::MessageLite& message, std::size_t bytes) {
  return fmt::format("the message ({} bytes) does not parse as {}, the request of {}", bytes, message.GetTypeName(),
                     method);
}

std::optional<std::string> serialize_message(const google::protobuf::MessageLite& message, grpc::ByteBuffer& out) {
  bool own_buffer = false;
  const grpc::Status status =
      grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(message, &out, &own_buffer);
  if (status.ok()) return std::nullopt;
  return status.error_message().empty() ? std::string("the message could not be serialized") : status.error_message();
}

}  // namespace flowline::gateway
