// The wire protocol's encoder and decoder (see wire.hpp and docs/remote-protocol.md).
#include "wire.hpp"

#include "flowline/document_fields.hpp"

#include <ATen/ATen.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <limits>

namespace flowline::wire {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian, as this host");

// ---- writing --------------------------------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(FrameType type) {
    out_.resize(kLengthBytes);
    u8(static_cast<std::uint8_t>(type));
  }
  template <class T>
  void put(T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out_.append(bytes, sizeof(T));
  }
  void u8(std::uint8_t v) { put(v); }
  void u16(std::uint16_t v) { put(v); }
  void u32(std::uint32_t v) { put(v); }
  void u64(std::uint64_t v) { put(v); }
  void raw(const void* data, std::size_t n) { out_.append(static_cast<const char*>(data), n); }
  void str(std::string_view s) {
    if (s.size() > std::numeric_limits<std::uint32_t>::max()) throw WireError("a string of 4 GiB or more");
    u32(static_cast<std::uint32_t>(s.size()));
    raw(s.data(), s.size());
  }
  // The finished frame, with its length prefix filled in.
  std::string finish() {
    const std::size_t length = out_.size() - kLengthBytes;
    if (length > std::numeric_limits<std::uint32_t>::max()) throw WireError("a frame of 4 GiB or more");
    const auto n = static_cast<std::uint32_t>(length);
    std::memcpy(out_.data(), &n, sizeof n);
    return std::move(out_);
  }
  std::string& buffer() { return out_; }

 private:
  std::string out_;
};

// Tensor element types on the wire.
struct DtypeCode {
  std::uint8_t code;
  at::ScalarType type;
  const char* name;
};
constexpr DtypeCode kDtypes[] = {
    {1, at::kFloat, "float32"}, {2, at::kHalf, "float16"}, {3, at::kBFloat16, "bfloat16"}, {4, at::kDouble, "float64"},
    {5, at::kLong, "int64"},    {6, at::kInt, "int32"},    {7, at::kShort, "int16"},       {8, at::kChar, "int8"},
    {9, at::kByte, "uint8"},    {10, at::kBool, "bool"},
};

// Where a version 4 frame's large tensors go: [at, end) of a segment mapped at `base`.
struct SharedCursor {
  char* base = nullptr;
  std::uint64_t at = 0, end = 0;
  std::size_t min_bytes = 0;
};

std::uint64_t aligned(std::uint64_t n) { return (n + kSharedAlign - 1) / kSharedAlign * kSharedAlign; }

std::uint8_t dtype_code(const at::Tensor& tensor) {
  for (const auto& d : kDtypes)
    if (d.type == tensor.scalar_type()) return d.code;
  throw WireError(fmt::format("a tensor of dtype {} has no wire code", c10::toString(tensor.scalar_type())));
}

void write_tensor(Writer& w, const at::Tensor& tensor, SharedCursor* shared) {
  const std::uint8_t code = dtype_code(tensor);
  if (static_cast<std::size_t>(tensor.dim()) > kMaxTensorDims)
    throw WireError(fmt::format("a tensor of {} dimensions (at most {})", tensor.dim(), kMaxTensorDims));
  const at::Tensor host = tensor.device().is_cpu() ? tensor.contiguous() : tensor.to(at::kCPU).contiguous();
  const std::size_t bytes = host.numel() * host.element_size();
  const bool in_segment = shared && bytes >= shared->min_bytes && bytes > 0 && shared->end >= shared->at &&
                          aligned(bytes) <= shared->end - shared->at;
  w.u8(in_segment ? static_cast<std::uint8_t>(code | kSharedTensorBit) : code);
  w.u8(static_cast<std::uint8_t>(host.dim()));
  for (const auto size : host.sizes()) w.u64(static_cast<std::uint64_t>(size));
  w.u64(bytes);
  if (in_segment) {
    std::memcpy(shared->base + shared->at, host.data_ptr(), bytes);
    w.u64(shared->at);
    shared->at += aligned(bytes);
  } else {
    w.raw(host.data_ptr(), bytes);
  }
}

void write_documents(Writer& w, const DocumentArray& docs, std::size_t depth, SharedCursor* shared);

void write_document(Writer& w, const Document& doc, std::size_t depth, SharedCursor* shared) {
  std::uint8_t present = 0;
  for_each_document_field([&](DocumentField, std::string_view, auto member) {
    if (!field_is_empty(doc.*member)) ++present;
  });
  w.u8(present);
  for_each_document_field([&](DocumentField field, std::string_view, auto member) {
    const auto& value = doc.*member;
    if (field_is_empty(value)) return;
    w.u8(static_cast<std::uint8_t>(field));
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) {
      w.str(value);
    } else if constexpr (std::is_same_v<T, Bytes>) {
      w.str(std::string_view(reinterpret_cast<const char*>(value.data()), value.size()));
    } else if constexpr (std::is_same_v<T, at::Tensor>) {
      write_tensor(w, value, shared);
    } else if constexpr (std::is_same_v<T, Tags>) {
      w.str(boost::json::serialize(value));
    } else if constexpr (std::is_same_v<T, DocumentArray>) {
      write_documents(w, value, depth + 1, shared);
    } else {  // scores
      w.u32(static_cast<std::uint32_t>(value.size()));
      for (const auto& [name, score] : value) {
        w.str(name);
        w.put(score);
      }
    }
  });
}

void write_documents(Writer& w, const DocumentArray& docs, std::size_t depth, SharedCursor* shared) {
  if (depth > kMaxDocumentDepth) throw WireError(fmt::format("documents nested deeper than {}", kMaxDocumentDepth));
  w.u32(static_cast<std::uint32_t>(docs.size()));
  for (const auto& doc : docs) write_document(w, doc, depth, shared);
}

// ---- reading --------------------------------------------------------------------------------------------

class Reader {
 public:
  explicit Reader(std::string_view frame, std::size_t start = 0) : data_(frame), at_(start) {}

  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::uint8_t u8(const char* what) { return get<std::uint8_t>(what); }
  std::uint16_t u16(const char* what) { return get<std::uint16_t>(what); }
  std::uint32_t u32(const char* what) { return get<std::uint32_t>(what); }
  std::uint64_t u64(const char* what) { return get<std::uint64_t>(what); }
  std::string_view bytes(std::size_t n, const char* what) {
    need(n, what);
    std::string_view out = data_.substr(at_, n);
    at_ += n;
    return out;
  }
  std::string_view str(const char* what) {
    const std::uint32_t n = u32(what);
    return bytes(n, what);
  }
  std::size_t left() const { return data_.size() - at_; }
  std::size_t offset() const { return at_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw WireError(fmt::format("bad frame at byte {}: {}", at_, what));
  }
  void end() const {
    if (at_ != data_.size()) fail(fmt::format("{} bytes after the last field", data_.size() - at_));
  }

 private:
  void need(std::size_t n, const char* what) const {
    if (n > left()) fail(fmt::format("{} needs {} bytes, {} left in the frame", what, n, left()));
  }
  std::string_view data_;
  std::size_t at_;
};

// The part of a segment a version 4 frame's tensors may be read from: [begin, end) of the segment at `base`.
struct SharedBounds {
  const char* base = nullptr;
  std::uint64_t begin = 0, end = 0;
};

at::Tensor read_tensor(Reader& r, const SharedBounds* shared) {
  std::uint8_t code = r.u8("tensor dtype");
  const bool in_segment = (code & kSharedTensorBit) != 0;
  if (in_segment && !shared) r.fail("a tensor in a shared segment on a connection without one");
  code = static_cast<std::uint8_t>(code & ~kSharedTensorBit);
  const DtypeCode* dtype = nullptr;
  for (const auto& d : kDtypes)
    if (d.code == code) dtype = &d;
  if (!dtype) r.fail(fmt::format("unknown tensor dtype code {}", code));
  const std::uint8_t dims = r.u8("tensor rank");
  if (dims > kMaxTensorDims) r.fail(fmt::format("a tensor of {} dimensions (at most {})", dims, kMaxTensorDims));
  std::vector<std::int64_t> shape;
  std::uint64_t numel = 1;
  // The product of the non-zero sizes bounds the strides LibTorch computes, even for an empty tensor
  // (fuzz_wire_frames: [2, 6.6e17, 0] made at::empty throw on overflowing strides).
  std::uint64_t extent = 1;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / 16;
  for (std::uint8_t i = 0; i < dims; ++i) {
    const std::uint64_t size = r.u64("tensor shape");
    if (size != 0 && extent > kMax / size) r.fail(fmt::format("tensor dimension {} ({}) overflows the shape", i, size));
    if (size != 0) extent *= size;
    numel *= size;
    shape.push_back(static_cast<std::int64_t>(size));
  }
  const std::uint64_t bytes = r.u64("tensor byte length");
  const std::uint64_t item = c10::elementSize(dtype->type);
  if (numel * item != bytes) {
    r.fail(fmt::format("a {} tensor of shape [{}] has {} bytes, not {}", dtype->name, fmt::join(shape, ", "),
                       numel * item, bytes));
  }
  std::string_view data;
  if (in_segment) {
    const std::uint64_t offset = r.u64("tensor offset");
    if (offset < shared->begin || offset > shared->end || bytes > shared->end - offset) {
      r.fail(
          fmt::format("a tensor of {} bytes at offset {} of the shared segment, outside this request's region "
                      "[{}, {})",
                      bytes, offset, shared->begin, shared->end));
    }
    data = std::string_view(shared->base + offset, bytes);
  } else {
    data = r.bytes(bytes, "tensor data");  // checked before any memory is sized
  }
  at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(dtype->type));
  if (bytes > 0) std::memcpy(tensor.data_ptr(), data.data(), bytes);
  return tensor;
}

DocumentArray read_documents(Reader& r, std::size_t depth, const SharedBounds* shared);

void read_field(Reader& r, Document& doc, DocumentField which, std::size_t depth, const SharedBounds* shared) {
  bool found = false;
  for_each_document_field([&](DocumentField field, std::string_view name, auto member) {
    if (field != which) return;
    found = true;
    auto& value = doc.*member;
    if (!field_is_empty(value)) r.fail(fmt::format("field '{}' given twice", name));
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) {
      value = std::string(r.str("a string field"));
    } else if constexpr (std::is_same_v<T, Bytes>) {
      const auto b = r.str("blob");
      value.assign(b.begin(), b.end());
    } else if constexpr (std::is_same_v<T, at::Tensor>) {
      value = read_tensor(r, shared);
    } else if constexpr (std::is_same_v<T, Tags>) {
      const auto text = r.str("tags");
      boost::system::error_code ec;
      boost::json::value parsed = boost::json::parse(text, ec);
      if (ec || !parsed.is_object()) r.fail("tags: expected a JSON object");
      value = std::move(parsed.get_object());
    } else if constexpr (std::is_same_v<T, DocumentArray>) {
      value = read_documents(r, depth + 1, shared);
    } else {  // scores
      const std::uint32_t n = r.u32("score count");
      if (n > r.left() / 8) r.fail(fmt::format("{} scores cannot fit in {} bytes", n, r.left()));
      for (std::uint32_t i = 0; i < n; ++i) {
        std::string name(r.str("score name"));
        value[std::move(name)] = r.get<float>("score value");
      }
    }
  });
  if (!found) r.fail(fmt::format("unknown document field {}", static_cast<int>(which)));
}

DocumentArray read_documents(Reader& r, std::size_t depth, const SharedBounds* shared) {
  if (depth > kMaxDocumentDepth) r.fail(fmt::format("documents nested deeper than {}", kMaxDocumentDepth));
  const std::uint32_t count = r.u32("document count");
  if (count > r.left()) r.fail(fmt::format("{} documents cannot fit in {} bytes", count, r.left()));
  DocumentArray docs;
  docs.reserve(count);
  Document blank;  // the id comes from the frame: copying an empty document skips generating one per document
  blank.id.clear();
  for (std::uint32_t i = 0; i < count; ++i) {
    Document doc(blank);
    const std::uint8_t fields = r.u8("field count");
    for (std::uint8_t f = 0; f < fields; ++f) {
      const std::uint8_t which = r.u8("field tag");
      if (which >= kDocumentFieldNames.size()) r.fail(fmt::format("unknown document field {}", which));
      read_field(r, doc, static_cast<DocumentField>(which), depth, shared);
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

Reader body(std::string_view frame, FrameType expected) {
  if (frame_type(frame) != expected)
    throw WireError(
        fmt::format("expected frame type {}, got {}", static_cast<int>(expected), static_cast<int>(frame[0])));
  return Reader(frame, 1);
}

}  // namespace

std::string encode_hello(const Hello& hello) {
  Writer w(FrameType::Hello);
  w.raw(kMagic.data(), kMagic.size());
  w.u16(hello.min_version);
  w.u16(hello.max_version);
  w.str(hello.token);
  return w.finish();
}

std::string encode_welcome(const Welcome& welcome) {
  Writer w(FrameType::Welcome);
  w.u16(welcome.version);
  w.str(welcome.executor);
  w.str(welcome.executor_type);
  w.u32(welcome.max_frame_bytes);
  w.u32(welcome.max_in_flight);
  return w.finish();
}

std::string encode_request(std::uint64_t id, std::string_view endpoint, std::string_view parameters,
                           const DocumentArray& docs, std::uint32_t deadline_ms, std::uint16_t version,
                           SharedRegion* shared) {
  Writer w(FrameType::Request);
  w.u64(id);
  if (version >= 3) w.u32(deadline_ms);
  std::size_t region_at = 0;
  if (version >= kSharedVersion) {
    region_at = w.buffer().size();
    for (int i = 0; i < 3; ++i) w.u64(0);  // the region and the answer's offset, filled in below
  }
  w.str(endpoint);
  w.str(parameters);
  const bool use = shared && version >= kSharedVersion && shared->bytes > 0;
  SharedCursor cursor;
  if (use)
    cursor = SharedCursor{shared->base, shared->offset, shared->offset + shared->bytes, shared->min_tensor_bytes};
  write_documents(w, docs, 0, use ? &cursor : nullptr);
  if (use) {
    shared->answer_offset = cursor.at;
    const std::uint64_t region[3] = {shared->offset, shared->bytes, cursor.at};
    std::memcpy(w.buffer().data() + region_at, region, sizeof region);
  }
  return w.finish();
}

ResponseStatus max_status(std::uint16_t version) noexcept {
  return version >= 2 ? ResponseStatus::RequestError : ResponseStatus::Failed;
}

std::string encode_response(std::uint64_t id, ResponseStatus status, std::string_view error,
                            std::string_view error_executor, const DocumentArray& docs, std::uint16_t version,
                            const SharedRegion* shared) {
  if (status > max_status(version)) status = ResponseStatus::Failed;
  Writer w(FrameType::Response);
  w.u64(id);
  w.u8(static_cast<std::uint8_t>(status));
  w.str(error);
  w.str(error_executor);
  SharedCursor cursor;
  const bool use = shared && version >= kSharedVersion && shared->bytes > 0;
  if (use)
    cursor =
        SharedCursor{shared->base, shared->answer_offset, shared->offset + shared->bytes, shared->min_tensor_bytes};
  write_documents(w, docs, 0, use ? &cursor : nullptr);
  return w.finish();
}

std::string encode_error(std::string_view message) {
  Writer w(FrameType::Error);
  w.str(message);
  return w.finish();
}

std::string encode_ping(FrameType type, std::uint64_t nonce) {
  Writer w(type);
  w.u64(nonce);
  return w.finish();
}

std::string encode_cancel(std::uint64_t id) {
  Writer w(FrameType::Cancel);
  w.u64(id);
  return w.finish();
}

std::string encode_segment(const SegmentOffer& offer) {
  Writer w(FrameType::Segment);
  w.u64(offer.bytes);
  w.u32(offer.pid);
  w.u32(offer.fd);
  w.str(offer.token);
  return w.finish();
}

std::string encode_attached(const SegmentReply& reply) {
  Writer w(FrameType::Attached);
  w.u8(reply.accepted ? 1 : 0);
  w.str(reply.reason);
  return w.finish();
}

std::uint64_t shared_bytes(const DocumentArray& docs, std::size_t min_tensor_bytes) {
  std::uint64_t total = 0;
  for (const auto& doc : docs) {
    for (const at::Tensor* t : {&doc.tensor, &doc.embedding}) {
      if (!t->defined()) continue;
      const std::uint64_t bytes = static_cast<std::uint64_t>(t->numel()) * t->element_size();
      if (bytes > 0 && bytes >= min_tensor_bytes) total += aligned(bytes);
    }
    total += shared_bytes(doc.chunks, min_tensor_bytes) + shared_bytes(doc.matches, min_tensor_bytes);
  }
  return total;
}

std::string encode_documents(const DocumentArray& docs) {
  Writer w(FrameType::Request);
  write_documents(w, docs, 0, nullptr);
  return w.buffer().substr(kLengthBytes + 1);
}

DocumentArray decode_documents(std::string_view bytes) {
  Reader r(bytes);
  DocumentArray docs = read_documents(r, 0, nullptr);
  r.end();
  return docs;
}

std::uint32_t read_length(const unsigned char* prefix, std::size_t max_frame_bytes) {
  std::uint32_t n = 0;
  std::memcpy(&n, prefix, sizeof n);
  if (n == 0) throw WireError("bad frame: length 0 (a frame holds at least its type byte)");
  if (n > max_frame_bytes)
    throw WireError(
        fmt::format("bad frame: length {} is above the maximum frame size of {} bytes", n, max_frame_bytes));
  return n;
}

FrameType frame_type(std::string_view frame) {
  if (frame.empty()) throw WireError("bad frame: empty");
  const auto type = static_cast<std::uint8_t>(frame[0]);
  if (type < 1 || type > 10) throw WireError(fmt::format("bad frame: unknown frame type {}", type));
  return static_cast<FrameType>(type);
}

Hello decode_hello(std::string_view frame) {
  Reader r = body(frame, FrameType::Hello);
  if (r.bytes(kMagic.size(), "magic") != kMagic) r.fail("not a flowline client (the magic is not FLWL)");
  Hello hello;
  hello.min_version = r.u16("min_version");
  hello.max_version = r.u16("max_version");
  hello.token = std::string(r.str("token"));
  r.end();
  return hello;
}

Welcome decode_welcome(std::string_view frame) {
  Reader r = body(frame, FrameType::Welcome);
  Welcome welcome;
  welcome.version = r.u16("version");
  welcome.executor = std::string(r.str("executor"));
  welcome.executor_type = std::string(r.str("executor_type"));
  welcome.max_frame_bytes = r.u32("max_frame_bytes");
  welcome.max_in_flight = r.u32("max_in_flight");
  r.end();
  return welcome;
}

RequestFrame decode_request(std::string_view frame, std::uint16_t version, const SharedRegion* shared) {
  Reader r = body(frame, FrameType::Request);
  RequestFrame out;
  out.id = r.u64("id");
  if (version >= 3) out.deadline_ms = r.u32("deadline_ms");
  SharedBounds bounds;
  if (version >= kSharedVersion) {
    out.shared_offset = r.u64("shared_offset");
    out.shared_bytes = r.u64("shared_bytes");
    out.answer_offset = r.u64("answer_offset");
    const std::uint64_t size = shared ? shared->segment_bytes : 0;
    if (out.shared_bytes > 0 &&
        (out.shared_offset > size || out.shared_bytes > size - out.shared_offset ||
         out.answer_offset < out.shared_offset || out.answer_offset - out.shared_offset > out.shared_bytes))
      r.fail(fmt::format("the request's region [{}, +{}) (answers from {}) is not within a shared segment of {} bytes",
                         out.shared_offset, out.shared_bytes, out.answer_offset, size));
    if (shared) bounds = SharedBounds{shared->base, out.shared_offset, out.shared_offset + out.shared_bytes};
  }
  out.endpoint = std::string(r.str("endpoint"));
  out.parameters = std::string(r.str("parameters"));
  out.docs = read_documents(r, 0, shared ? &bounds : nullptr);
  r.end();
  return out;
}

ResponseFrame decode_response(std::string_view frame, std::uint16_t version, const SharedRegion* shared) {
  Reader r = body(frame, FrameType::Response);
  ResponseFrame out;
  out.id = r.u64("id");
  const std::uint8_t status = r.u8("status");
  if (status > static_cast<std::uint8_t>(max_status(version)))
    r.fail(fmt::format("unknown status {} (protocol version {})", status, version));
  out.status = static_cast<ResponseStatus>(status);
  out.error = std::string(r.str("error"));
  out.error_executor = std::string(r.str("error_executor"));
  const bool use = shared && version >= kSharedVersion && shared->offset <= shared->segment_bytes &&
                   shared->bytes <= shared->segment_bytes - shared->offset;
  const SharedBounds bounds{use ? shared->base : nullptr, use ? shared->offset : 0,
                            use ? shared->offset + shared->bytes : 0};
  out.docs = read_documents(r, 0, use ? &bounds : nullptr);
  r.end();
  return out;
}

std::string decode_error(std::string_view frame) {
  Reader r = body(frame, FrameType::Error);
  std::string message(r.str("message"));
  r.end();
  return message;
}

std::uint64_t decode_ping(std::string_view frame) {
  const FrameType type = frame_type(frame);
  if (type != FrameType::Ping && type != FrameType::Pong) throw WireError("expected a Ping or Pong frame");
  Reader r(frame, 1);
  const std::uint64_t nonce = r.u64("nonce");
  r.end();
  return nonce;
}

std::uint64_t decode_cancel(std::string_view frame) {
  Reader r = body(frame, FrameType::Cancel);
  const std::uint64_t id = r.u64("id");
  r.end();
  return id;
}

SegmentOffer decode_segment(std::string_view frame) {
  Reader r = body(frame, FrameType::Segment);
  SegmentOffer offer;
  offer.bytes = r.u64("bytes");
  offer.pid = r.u32("pid");
  offer.fd = r.u32("fd");
  offer.token = std::string(r.str("token"));
  r.end();
  return offer;
}

SegmentReply decode_attached(std::string_view frame) {
  Reader r = body(frame, FrameType::Attached);
  SegmentReply reply;
  const std::uint8_t accepted = r.u8("accepted");
  if (accepted > 1) r.fail(fmt::format("accepted is {}, not 0 or 1", accepted));
  reply.accepted = accepted == 1;
  reply.reason = std::string(r.str("reason"));
  r.end();
  return reply;
}

std::uint64_t frame_id(std::string_view frame) {
  const FrameType type = frame_type(frame);
  if (type != FrameType::Request && type != FrameType::Response)
    throw WireError("expected a Request or Response frame");
  Reader r(frame, 1);
  return r.u64("id");
}

}  // namespace flowline::wire
