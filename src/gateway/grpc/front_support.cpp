// front_support.hpp: the token, status codes, and protobuf messages to and from gRPC's byte buffers through
// gRPC's own protobuf serialization (grpc::SerializationTraits), so the bytes are those the generated code
// reads and writes.
#include "front_support.hpp"

#include <fmt/format.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <cstdint>
#include <vector>
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

namespace {

// Reads protobuf's wire format across a message's slices, within the length of the field it was last moved into.
class WireReader {
 public:
  explicit WireReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {
    for (const auto& slice : slices) end_ += slice.size();
  }

  // Moves into the first field `number` of the current message that is length-delimited; false when there is
  // none or the bytes end early.
  bool enter(std::uint32_t number) {
    while (at_ < end_) {
      std::uint64_t tag = 0, length = 0;
      if (!varint(tag)) return false;
      const auto wire = static_cast<int>(tag & 7);
      if (tag >> 3 == number && wire == 2) {
        if (!varint(length) || length > end_ - at_) return false;
        end_ = at_ + length;
        return true;
      }
      if (!skip_value(wire)) return false;
    }
    return false;
  }

  bool varint(std::uint64_t& value) {
    value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      std::uint8_t b = 0;
      if (!byte(b)) return false;
      value |= std::uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }

  bool byte(std::uint8_t& b) {
    if (at_ >= end_) return false;
    while (offset_ >= slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
    b = slices_[slice_].begin()[offset_++];
    ++at_;
    return true;
  }

  bool at_end() const { return at_ >= end_; }

 private:
  bool skip(std::uint64_t n) {
    if (n > end_ - at_) return false;
    at_ += n;
    while (n > 0) {
      const std::size_t here = std::min<std::uint64_t>(n, slices_[slice_].size() - offset_);
      offset_ += here;
      n -= here;
      if (offset_ == slices_[slice_].size() && n > 0) {
        ++slice_;
        offset_ = 0;
      }
    }
    return true;
  }

  bool skip_value(int wire) {
    std::uint64_t n = 0;
    switch (wire) {
      case 0:
        return varint(n);
      case 1:
        return skip(8);
      case 2:
        return varint(n) && skip(n);
      case 5:
        return skip(4);
      default:  // groups: in neither generation's messages
        return false;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  std::size_t slice_ = 0, offset_ = 0;  // where the next byte is
  std::uint64_t at_ = 0, end_ = 0;      // bytes read so far; the end of the message being read
};

}  // namespace

std::optional<bool> docarray_v1_documents(const grpc::ByteBuffer& bytes) {
  std::vector<grpc::Slice> slices;
  if (!bytes.Dump(&slices).ok()) return std::nullopt;
  WireReader reader(slices);
  // DataRequestProto.data (4) -> DataContentProto.docs (1) -> the list's first document (1).
  if (!reader.enter(4) || !reader.enter(1) || !reader.enter(1) || reader.at_end()) return std::nullopt;
  std::uint64_t tag = 0, length = 0;
  std::uint8_t first = 0;
  if (!reader.varint(tag)) return std::nullopt;
  if (tag >> 3 != 1) return true;  // a DocProto holds nothing but field 1
  if ((tag & 7) != 2 || !reader.varint(length) || length == 0 || !reader.byte(first)) return std::nullopt;
  return first != 0x0a;  // a map entry starts with its key's tag; an id with a letter or digit
}

bool docarray_v1_message(const grpc::ByteBuffer& bytes) { return docarray_v1_documents(bytes).value_or(false); }

bool docarray_v1_on_stream(const grpc::ByteBuffer& bytes, std::optional<bool>& stream) {
  if (const std::optional<bool> said = docarray_v1_documents(bytes)) stream = said;
  return stream.value_or(false);
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
