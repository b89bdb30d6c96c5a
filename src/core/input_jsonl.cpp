// The JSONL input's fast path (input_jsonl.hpp): a small JSON scanner over one line that writes the
// document's fields as it goes. Anything unusual returns false and the caller's general parser takes over.
#include "input_jsonl.hpp"

#include "flowline/document_fields.hpp"
#include "flowline/io.hpp"
#include "json_parse.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace flowline::detail {
namespace {

// Boost.JSON's default max_depth: a value nested deeper is the general parser's to refuse.
constexpr int kMaxDepth = 32;

class LineScanner {
 public:
  explicit LineScanner(std::string_view line) : p_(line.data()), end_(line.data() + line.size()) {}

  bool document(Document& doc) {
    if (!take('{')) return false;
    std::uint32_t seen = 0;
    std::string key;
    if (!take('}')) {
      do {
        if (!string(key) || !take(':')) return false;
        const auto field = find_document_field(key);
        if (!field) return false;  // unknown: the general parser names it and the closest match
        const std::uint32_t bit = 1u << static_cast<unsigned>(*field);
        if (seen & bit) return false;
        seen |= bit;
        bool ok = false;
        for_each_document_field([&](DocumentField f, std::string_view, auto member) {
          if (f == *field) ok = value(doc, f, doc.*member);
        });
        if (!ok) return false;
      } while (take(','));
      if (!take('}')) return false;
    }
    skip_space();
    if (p_ != end_) return false;
    if (doc.id.empty()) doc.id = generate_id();  // as document_from_json: no id, or an empty one
    return true;
  }

 private:
  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool take(char c) {
    skip_space();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }

  // A JSON string into `out` (decoded). Escapes beyond the BMP pairs and control characters: false.
  bool string(std::string& out) {
    if (!take('"')) return false;
    out.clear();
    while (true) {
      const char* start = p_;
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
      out.append(start, p_);
      if (p_ == end_ || static_cast<unsigned char>(*p_) < 0x20) return false;
      if (*p_++ == '"') return true;
      if (p_ == end_) return false;
      const char e = *p_++;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          if (!code_point(out)) return false;
          break;
        default:
          return false;
      }
    }
  }

  bool hex4(std::uint32_t& v) {
    if (end_ - p_ < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      const char c = *p_;
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') {
        v |= static_cast<std::uint32_t>((c | 0x20) - 'a' + 10);
      } else {
        return false;
      }
    }
    return true;
  }

  // After "\u": one code point (a surrogate pair for one beyond the BMP) as UTF-8. A lone surrogate: false.
  bool code_point(std::string& out) {
    std::uint32_t cp = 0;
    if (!hex4(cp)) return false;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      std::uint32_t low = 0;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
      p_ += 2;
      if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return true;
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // A JSON number (its grammar checked here: std::from_chars also takes "1.", ".5", "01" and "inf"), as
  // float32: the double that Python's float() (and std::from_chars) gives, correctly rounded, then rounded
  // to float32. Out of a double's range: false.
  bool number(float& out) {
    skip_space();
    const char* start = p_;
    const char* q = p_;
    const bool negative = q < end_ && *q == '-';
    if (negative) ++q;
    if (q == end_ || !digit(*q)) return false;
    // The significant digits (up to 19, in a uint64) and the power of ten they are scaled by.
    std::uint64_t mantissa = 0;
    int digits = 0, scale = 0;
    bool exact = true;  // every significant digit is in `mantissa`
    const auto add = [&](char c) {
      if (mantissa == 0 && c == '0') return;
      if (digits < 19) {
        mantissa = mantissa * 10 + static_cast<std::uint64_t>(c - '0');
        ++digits;
      } else {
        exact = exact && c == '0';
        ++scale;  // a digit past the 19th: the mantissa's place moves up by one
      }
    };
    if (*q == '0') {
      ++q;
    } else {
      while (q < end_ && digit(*q)) add(*q++);
    }
    if (q < end_ && *q == '.') {
      ++q;
      if (q == end_ || !digit(*q)) return false;
      while (q < end_ && *q == '0' && mantissa == 0) {  // leading zeros of a fraction: the scale only
        ++q;
        --scale;
      }
      // Eight digits at a time while they fit in the 19 (a float32 written as a double has 17).
      std::uint64_t eight = 0;
      while (digits + 8 <= 19 && end_ - q >= 8 && eight_digits(q, eight) && (mantissa > 0 || *q != '0')) {
        mantissa = mantissa * 100000000 + eight;
        digits += 8;
        scale -= 8;
        q += 8;
      }
      while (q < end_ && digit(*q)) {
        add(*q++);
        --scale;
      }
    }
    int exponent = 0;
    if (q < end_ && (*q == 'e' || *q == 'E')) {
      ++q;
      const bool minus = q < end_ && *q == '-';
      if (q < end_ && (*q == '+' || *q == '-')) ++q;
      if (q == end_ || !digit(*q)) return false;
      while (q < end_ && digit(*q)) exponent = std::min(exponent * 10 + (*q++ - '0'), 100000);
      if (minus) exponent = -exponent;
    }
    p_ = q;
    if (exact && quick_float(mantissa, scale + exponent, negative, out)) return true;
    double v = 0;
    auto [ptr, ec] = std::from_chars(start, q, v);
    if (ec == std::errc::result_out_of_range && q - start < 64) {
      // libstdc++ says "out of range" for a result below a double's normal range too: glibc's strtod
      // (correctly rounded, as from_chars) gives that subnormal or zero; an overflow is refused below.
      char text[64];
      std::memcpy(text, start, static_cast<std::size_t>(q - start));
      text[q - start] = '\0';
      v = std::strtod(text, nullptr);
      ec = std::errc();
      ptr = q;
    }
    if (ec != std::errc() || ptr != q || !std::isfinite(v)) return false;
    out = static_cast<float>(v);
    return true;
  }

  // Whether the 8 bytes at `q` are all digits; their value in `value` (the bytes read as one word).
  static bool eight_digits(const char* q, std::uint64_t& value) {
    static_assert(std::endian::native == std::endian::little, "the first digit is the word's lowest byte");
    std::uint64_t word;
    std::memcpy(&word, q, 8);
    if ((((word & 0xF0F0F0F0F0F0F0F0) | (((word + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0) >> 4)) !=
         0x3333333333333333))
      return false;
    word -= 0x3030303030303030;
    word = (word * 10) + (word >> 8);  // pairs of digits
    value = (((word & 0x000000FF000000FF) * (100 + (1000000ULL << 32))) +
             (((word >> 16) & 0x000000FF000000FF) * (1 + (10000ULL << 32)))) >>
            32;
    return true;
  }

  // mantissa x 10^power as float32 without the general conversion, when that is provably the same float:
  // the double x computed here (one rounding converting the mantissa, one in the power of ten when it is
  // negative, one multiplying) is within 2 units in the last place of the correctly rounded double d, so x and d
  // round to the same float32 unless a float32 rounding boundary (a midpoint between two float32s, which a
  // double represents exactly) lies that close: then, and outside float32's normal range, it declines.
  static bool quick_float(std::uint64_t mantissa, int power, bool negative, float& out) {
    static constexpr double kPowers[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                         1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    static constexpr double kInversePowers[] = {1e-0,  1e-1,  1e-2,  1e-3,  1e-4,  1e-5,  1e-6,  1e-7,
                                                1e-8,  1e-9,  1e-10, 1e-11, 1e-12, 1e-13, 1e-14, 1e-15,
                                                1e-16, 1e-17, 1e-18, 1e-19, 1e-20, 1e-21, 1e-22};
    if (mantissa == 0) {
      out = negative ? -0.0f : 0.0f;
      return true;
    }
    if (power < -22 || power > 22) return false;
    double x = static_cast<double>(mantissa);
    // A multiplication by 10^-k (itself rounded) rather than a division by 10^k: one more half unit of
    // error, well inside the margin below, and the division's latency gone.
    x = power < 0 ? x * kInversePowers[-power] : x * kPowers[power];
    if (!(x >= 1.2e-38 && x <= 3.4e38)) return false;  // float32's normal range, with a margin
    std::uint64_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    // The 29 bits a double has below a float32's last place: 0x10000000 is the midpoint between two floats.
    const std::int64_t below = static_cast<std::int64_t>(bits & 0x1FFFFFFF) - 0x10000000;
    if (below >= -16 && below <= 16) return false;
    out = static_cast<float>(negative ? -x : x);
    return true;
  }

  // One value of a tensor's data: a number, "nan", "inf", "-inf", true or false (as document_from_json).
  bool data_value(float& out) {
    skip_space();
    if (p_ == end_) return false;
    float v = 0;
    if (*p_ == '"') {
      const auto rest = std::string_view(p_, static_cast<std::size_t>(end_ - p_));
      if (rest.starts_with("\"nan\"")) {
        v = std::nanf("");
        p_ += 5;
      } else if (rest.starts_with("\"inf\"")) {
        v = INFINITY;
        p_ += 5;
      } else if (rest.starts_with("\"-inf\"")) {
        v = -INFINITY;
        p_ += 6;
      } else {
        return false;
      }
    } else if (*p_ == 't' || *p_ == 'f') {
      const auto rest = std::string_view(p_, static_cast<std::size_t>(end_ - p_));
      if (rest.starts_with("true")) {
        v = 1;
        p_ += 4;
      } else if (rest.starts_with("false")) {
        p_ += 5;
      } else {
        return false;
      }
    } else {
      return number(out);
    }
    out = v;
    return true;
  }

  // The values of `data`, nested lists flattened (as document_from_json reads them), into `row`.
  bool data(std::vector<float>& row, int depth) {
    if (depth >= kMaxDepth || !take('[')) return false;
    if (take(']')) return true;
    do {
      skip_space();
      if (p_ < end_ && *p_ == '[') {
        if (!data(row, depth + 1)) return false;
      } else {
        float v = 0;
        if (!data_value(v)) return false;
        row.push_back(v);
      }
    } while (take(','));
    return take(']');
  }

  // A list of non-negative integers (a tensor's shape), their product in `count`.
  bool shape(std::vector<int64_t>& sizes, int64_t& count) {
    if (!take('[')) return false;
    count = 1;
    if (take(']')) return true;
    do {
      skip_space();
      const char* start = p_;
      while (p_ < end_ && digit(*p_)) ++p_;
      if (p_ == start || (*start == '0' && p_ - start > 1)) return false;
      int64_t s = 0;
      const auto [ptr, ec] = std::from_chars(start, p_, s);
      if (ec != std::errc() || ptr != p_) return false;
      if (__builtin_mul_overflow(count, s, &count)) return false;
      sizes.push_back(s);
    } while (take(','));
    return take(']');
  }

  // {"dtype": "float32", "shape": [...], "data": [...]} in any key order; other dtypes are the general
  // parser's (it converts each by its own rules).
  bool tensor(at::Tensor& out, int depth) {
    thread_local std::vector<float> row;
    row.clear();
    std::vector<int64_t> sizes;
    int64_t count = 1;
    unsigned seen = 0;
    std::string key;
    if (!take('{')) return false;
    do {
      if (!string(key) || !take(':')) return false;
      unsigned bit = 0;
      bool ok = false;
      if (key == "dtype") {
        bit = 1;
        std::string dtype;
        ok = string(dtype) && dtype == "float32";
      } else if (key == "shape") {
        bit = 2;
        ok = shape(sizes, count);
      } else if (key == "data") {
        bit = 4;
        ok = data(row, depth + 1);
      }
      if (!ok || (seen & bit)) return false;
      seen |= bit;
    } while (take(','));
    if (!take('}') || seen != 7) return false;
    // An empty tensor's nested lists are checked by the general parser; a count that differs, it reports.
    if (count == 0 || static_cast<int64_t>(row.size()) != count) return false;
    out = at::empty(sizes, at::TensorOptions().dtype(at::kFloat));
    std::memcpy(out.data_ptr<float>(), row.data(), row.size() * sizeof(float));
    return true;
  }

  // Skips one JSON value (strings, lists, objects and literals), checking only that its brackets and
  // quotes balance; its text is then parsed by the general parser.
  bool skip_value(int depth) {
    skip_space();
    if (p_ == end_) return false;
    const char c = *p_;
    if (c == '"') {
      for (++p_; p_ < end_ && *p_ != '"'; ++p_) {
        if (*p_ == '\\' && ++p_ == end_) return false;
      }
      if (p_ == end_) return false;
      ++p_;
      return true;
    }
    if (c == '[' || c == '{') {
      if (depth >= kMaxDepth) return false;
      const char close = c == '[' ? ']' : '}';
      ++p_;
      if (take(close)) return true;
      do {
        if (close == '}' && (!skip_value(depth + 1) || !take(':'))) return false;
        if (!skip_value(depth + 1)) return false;
      } while (take(','));
      return take(close);
    }
    while (p_ < end_ && *p_ != ',' && *p_ != '}' && *p_ != ']' && *p_ != ' ' && *p_ != '\t' && *p_ != '\r' &&
           *p_ != '\n')
      ++p_;
    return true;
  }

  bool value(Document&, DocumentField, std::string& out) { return string(out); }
  bool value(Document&, DocumentField, at::Tensor& out) { return tensor(out, 2); }
  // Tags, blob, scores, chunks, matches: the value's text through the general parser, field by field.
  template <class T>
  bool value(Document& doc, DocumentField field, T&) {
    skip_space();
    const char* start = p_;
    if (!skip_value(2)) return false;
    boost::system::error_code ec;
    const boost::json::value v = parse_json(std::string_view(start, static_cast<std::size_t>(p_ - start)), ec);
    if (ec) return false;
    try {
      read_json_field(doc, field, v);
    } catch (const std::exception&) {
      return false;
    }
    return true;
  }

  const char* p_;
  const char* end_;
};

}  // namespace

bool read_document_fast(std::string_view line, Document& doc) { return LineScanner(line).document(doc); }

}  // namespace flowline::detail
