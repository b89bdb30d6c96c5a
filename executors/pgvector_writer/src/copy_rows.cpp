// The PgVectorWriter's binary COPY stream (copy_rows.hpp).
#include "copy_rows.hpp"

#include <ATen/ATen.h>
#include <boost/json/serialize.hpp>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace flowline::pgvector_writer {
namespace {

// Big-endian appends, as binary COPY wants.
void put16(std::string& out, std::uint16_t v) {
  const std::array<char, 2> b{static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b.data(), 2);
}
void put32(std::string& out, std::uint32_t v) {
  const std::array<char, 4> b{static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                              static_cast<char>(v)};
  out.append(b.data(), 4);
}
void put_text(std::string& out, std::string_view s) {
  put32(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

}  // namespace

std::size_t send_copy_rows(Lane& lane, const std::vector<std::string>& fields, const DocumentArray& docs,
                           std::span<const std::size_t> rows, const std::vector<at::Tensor>& embeddings,
                           const std::string& what) {
  constexpr std::size_t kPart = std::size_t{256} << 10;
  std::string& buffer = lane.buffer;
  std::size_t sent = 0;
  buffer.clear();
  static constexpr char kHeader[] = "PGCOPY\n\377\r\n";  // 11 bytes with its NUL
  buffer.append(kHeader, 11);
  put32(buffer, 0);  // flags
  put32(buffer, 0);  // header extension length
  for (std::size_t i : rows) {
    const Document& d = docs[i];
    put16(buffer, static_cast<std::uint16_t>(fields.size()));
    for (const auto& f : fields) {
      if (f == "id") {
        put_text(buffer, d.id);
      } else if (f == "text") {
        put_text(buffer, d.text);
      } else if (f == "tags") {
        const std::string json = boost::json::serialize(d.tags);
        put32(buffer, static_cast<std::uint32_t>(json.size() + 1));
        buffer.push_back('\1');  // jsonb's binary format: version 1, then the JSON text
        buffer.append(json);
      } else if (f == "embedding") {
        // pgvector's vector_recv: int16 dimensions, int16 unused, then float4s, all big-endian.
        const at::Tensor& e = embeddings[i];
        const auto n = static_cast<std::size_t>(e.numel());
        put32(buffer, static_cast<std::uint32_t>(4 + 4 * n));
        put16(buffer, static_cast<std::uint16_t>(n));
        put16(buffer, 0);
        const std::size_t at = buffer.size();
        buffer.resize(at + 4 * n);
        const auto* src = e.data_ptr<float>();
        char* out = buffer.data() + at;
        for (std::size_t k = 0; k < n; ++k) {
          const std::uint32_t bits = __builtin_bswap32(std::bit_cast<std::uint32_t>(src[k]));
          std::memcpy(out + 4 * k, &bits, 4);
        }
      } else {
        put_text(buffer, f == "mime_type" ? d.mime_type : f == "uri" ? d.uri : d.parent_id);
      }
    }
    if (buffer.size() >= kPart) {
      lane.conn->copy_put(buffer, what);
      sent += buffer.size();
      buffer.clear();
    }
  }
  put16(buffer, 0xffff);  // trailer: -1
  lane.conn->copy_put(buffer, what);
  return sent + buffer.size();
}

}  // namespace flowline::pgvector_writer
