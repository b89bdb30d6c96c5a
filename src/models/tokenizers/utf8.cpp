// UTF-8 in and out (pipeline.hpp): text to code points, with U+FFFD for each byte that does not start a
// well-formed sequence, and code points back.
#include "pipeline.hpp"

namespace flowline::models::tokenizers {

namespace {

// Calls point(c, first byte, length) for each code point of `in`.
template <class Point>
void each_point(std::string_view in, Point&& point) {
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const std::size_t n = in.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      point(static_cast<char32_t>(b), i, 1);
      ++i;
      continue;
    }
    std::size_t len = 0;
    char32_t c = 0, min = 0;
    if ((b & 0xE0) == 0xC0)
      len = 2, c = b & 0x1F, min = 0x80;
    else if ((b & 0xF0) == 0xE0)
      len = 3, c = b & 0x0F, min = 0x800;
    else if ((b & 0xF8) == 0xF0)
      len = 4, c = b & 0x07, min = 0x10000;
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      c = (c << 6) | (p[i + k] & 0x3F);
    }
    ok = ok && c >= min && c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF);
    point(ok ? c : U'\uFFFD', i, ok ? len : 1);
    i += ok ? len : 1;
  }
}

}  // namespace

void decode_utf8(std::string_view in, std::u32string& out) {
  out.clear();
  each_point(in, [&](char32_t c, std::size_t, std::size_t) { out.push_back(c); });
}

// The places after the text, in loops the compiler vectorizes (pushed beside each code point, they cost the
// decoding half again), and only where a step reads them (Scratch::identity): one loop from each shift on.
void write_identity_places(Scratch& s) {
  s.align.resize(s.identity_chars);
  Align* const a = s.align.data();
  const auto fill = [&](std::size_t from, std::size_t to, std::uint32_t shift) {
    const std::uint32_t first = s.base + shift;
    for (std::size_t i = from; i < to; ++i)
      a[i] = Align{first + static_cast<std::uint32_t>(i), first + static_cast<std::uint32_t>(i) + 1};
  };
  std::size_t from = 0;
  std::uint32_t shift = 0;
  for (const Scratch::Shift next : s.shifts) {
    fill(from, next.at, shift);
    from = next.at, shift = next.shift;
  }
  fill(from, s.identity_chars, shift);
  s.deferred = false;
}

void utf8_starts(std::string_view in, std::vector<std::size_t>& starts) {
  starts.clear();
  each_point(in, [&](char32_t, std::size_t at, std::size_t) { starts.push_back(at); });
  starts.push_back(in.size());
}

void encode_utf8(std::u32string_view in, std::string& out) {
  out.resize(4 * in.size());  // the most it can take; written through a pointer, then cut to size
  char* p = out.data();
  for (const char32_t c : in) {
    if (c < 0x80) {
      *p++ = static_cast<char>(c);
    } else if (c < 0x800) {
      *p++ = static_cast<char>(0xC0 | (c >> 6));
      *p++ = static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      *p++ = static_cast<char>(0xE0 | (c >> 12));
      *p++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      *p++ = static_cast<char>(0x80 | (c & 0x3F));
    } else {
      *p++ = static_cast<char>(0xF0 | (c >> 18));
      *p++ = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      *p++ = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      *p++ = static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  out.resize(static_cast<std::size_t>(p - out.data()));
}

}  // namespace flowline::models::tokenizers
