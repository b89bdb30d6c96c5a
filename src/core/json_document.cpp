// The JSON form of a Document (io.hpp): append_json writes it, document_from_json reads it, both walking the
// table of Document fields (document_fields.hpp). Floats are written in their shortest exact form: single
// numbers by std::to_chars ("0.25"), rows of floats (embeddings, float32 tensors: the bulk of JSON answers
// and JSONL files) by Dragonbox where it was found at build time ("2.5E-1", 40% less time a value), else by
// std::to_chars too.
#include "flowline/document_fields.hpp"
#include "flowline/error.hpp"
#include "flowline/io.hpp"
#include "json_parse.hpp"

#include <ATen/ATen.h>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#if __has_include(<dragonbox/dragonbox_to_chars.h>)
#include <dragonbox/dragonbox_to_chars.h>
#define FLOWLINE_ROWS_BY_DRAGONBOX 1
#endif

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

namespace flowline {

namespace {

// Characters that a JSON string may hold as they are: printable ASCII except '"' and '\\', and UTF-8 bytes.
constexpr bool plain_json_char(unsigned char c) { return c >= 0x20 && c != '"' && c != '\\'; }

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t run = 0;  // start of the current run of plain characters
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (plain_json_char(c)) continue;
    out.append(s.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
    }
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

// A float or double in its shortest form that reads back to the same value; non-finite values as strings.
template <class T>
void append_number(std::string& out, T v) {
  if (!std::isfinite(v)) {
    out += std::isnan(v) ? "\"nan\"" : (v > 0 ? "\"inf\"" : "\"-inf\"");
    return;
  }
  if (v == 0 && std::signbit(v)) {
    out += "-0.0";  // "-0" would read back as the integer 0, losing the sign
    return;
  }
  char buffer[40];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  out.append(buffer, result.ptr);
}

void append_integer(std::string& out, std::int64_t v) {
  char buffer[24];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  out.append(buffer, result.ptr);
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void append_base64(std::string& out, const std::uint8_t* bytes, std::size_t size) {
  out += '"';
  std::size_t i = 0;
  for (; i + 2 < size; i += 3) {
    const std::uint32_t v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i < size) {
    std::uint32_t v = bytes[i] << 16;
    if (i + 1 < size) v |= bytes[i + 1] << 8;
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < size ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  out += '"';
}

Bytes decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) throw Error("field 'blob': base64 text length must be a multiple of 4");
  Bytes out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if ((v[k] = value(c)) < 0 || pad > 0) {
        throw Error(fmt::format("field 'blob': invalid base64 character at offset {}", i + k));
      }
    }
    const std::uint32_t bits = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out.push_back(static_cast<std::uint8_t>(bits >> 16));
    if (pad < 2) out.push_back(static_cast<std::uint8_t>((bits >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<std::uint8_t>(bits & 0xFF));
  }
  return out;
}

struct DtypeName {
  at::ScalarType type;
  const char* name;
};
constexpr DtypeName kDtypes[] = {
    {at::kFloat, "float32"}, {at::kDouble, "float64"}, {at::kHalf, "float16"}, {at::kBFloat16, "bfloat16"},
    {at::kLong, "int64"},    {at::kInt, "int32"},      {at::kShort, "int16"},  {at::kChar, "int8"},
    {at::kByte, "uint8"},    {at::kBool, "bool"},
};

const char* dtype_name(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  throw Error(fmt::format("tensor dtype {} cannot be written as JSON", c10::toString(type)));
}

template <class T>
void append_value(std::string& out, T v) {
  if constexpr (std::is_same_v<T, bool>) {
    out += v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    append_number(out, v);
  } else {
    append_integer(out, static_cast<std::int64_t>(v));
  }
}

template <class T>
void append_values(std::string& out, const T* data, at::IntArrayRef shape, std::size_t dim, std::size_t& offset) {
  out += '[';
  const int64_t n = shape.empty() ? 0 : shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ',';
    if (dim + 1 < shape.size()) {
      append_values(out, data, shape, dim + 1, offset);
    } else {
      append_value(out, data[offset++]);
    }
  }
  out += ']';
}

// A row of floats as a JSON array, formatted straight into `out`'s buffer (the hot loop of JSON answers and
// JSONL output), without a capacity check per character. Each finite value in its shortest exact form:
// Dragonbox's scientific text ("-1.17549435E-38", at most 15 characters; "-0E0" keeps the sign, the exponent
// making it a float for every JSON reader), or std::to_chars' (as append_values writes).
void append_float_row(std::string& out, const float* values, std::size_t n) {
  constexpr std::size_t kMaxChars = 16;  // a comma, then at most 15 characters (",\"-inf\"" is 7)
  const std::size_t start = out.size();
  out.resize(start + 2 + n * kMaxChars);
  char* p = out.data() + start;
  *p++ = '[';
  for (std::size_t i = 0; i < n; ++i) {
    if (i) *p++ = ',';
    const float v = values[i];
#ifdef FLOWLINE_ROWS_BY_DRAGONBOX
    if (std::isfinite(v)) {
      p = jkj::dragonbox::to_chars_n(v, p);
    } else {
#else
    if (std::isfinite(v) && !(v == 0 && std::signbit(v))) {
      p = std::to_chars(p, p + kMaxChars, v).ptr;
    } else {
#endif
      std::string special;
      append_number(special, v);
      p = std::copy(special.begin(), special.end(), p);
    }
  }
  *p++ = ']';
  out.resize(static_cast<std::size_t>(p - out.data()));
}

void append_tensor_values(std::string& out, const at::Tensor& tensor) {
  const at::ScalarType type = tensor.scalar_type();
  if (type == at::kFloat && tensor.dim() == 1 && tensor.device().is_cpu() && tensor.is_contiguous()) {
    // The common case, an embedding: no conversion, no copy.
    append_float_row(out, tensor.data_ptr<float>(), static_cast<std::size_t>(tensor.numel()));
    return;
  }
  at::Tensor t = tensor.to(at::kCPU).contiguous();
  // Half and bfloat16 values are exact in float, so they are written as floats and read back exactly.
  if (type == at::kHalf || type == at::kBFloat16) t = t.to(at::kFloat);
  std::size_t offset = 0;
  if (t.dim() == 0) {
    AT_DISPATCH_ALL_TYPES_AND(at::kBool, t.scalar_type(), "append_tensor",
                              [&] { append_value(out, *t.data_ptr<scalar_t>()); });
  } else {
    AT_DISPATCH_ALL_TYPES_AND(at::kBool, t.scalar_type(), "append_tensor",
                              [&] { append_values(out, t.data_ptr<scalar_t>(), t.sizes(), 0, offset); });
  }
}

void append_tensor(std::string& out, const at::Tensor& tensor) {
  const at::ScalarType type = tensor.scalar_type();
  out += "{\"dtype\":\"";
  out += dtype_name(type);
  out += "\",\"shape\":[";
  for (int64_t i = 0; i < tensor.dim(); ++i) {
    if (i) out += ',';
    append_integer(out, tensor.size(i));
  }
  out += "],\"data\":";
  append_tensor_values(out, tensor);
  out += '}';
}

// One field's value, by the field's type.
void append_field_value(std::string& out, const std::string& value) { append_json_string(out, value); }
void append_field_value(std::string& out, const Bytes& value) { append_base64(out, value.data(), value.size()); }
void append_field_value(std::string& out, const at::Tensor& value) { append_tensor(out, value); }
void append_field_value(std::string& out, const Tags& value) { out += boost::json::serialize(value); }
void append_field_value(std::string& out, const std::map<std::string, float, std::less<>>& scores) {
  out += '{';
  bool first = true;
  for (const auto& [name, value] : scores) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, name);
    out += ':';
    append_number(out, value);
  }
  out += '}';
}
void append_field_value(std::string& out, const DocumentArray& docs) {
  out += '[';
  bool first = true;
  for (const auto& d : docs) {
    if (!first) out += ',';
    first = false;
    append_json(out, d);
  }
  out += ']';
}

// ---- reading ----

[[noreturn]] void field_error(const std::string& field, const std::string& message) {
  throw Error(fmt::format("field '{}': {}", field, message));
}

std::string get_string(const boost::json::value& v, const std::string& field) {
  if (!v.is_string()) field_error(field, "expected a string");
  return std::string(v.get_string());
}

// "nan", "inf" and "-inf": how non-finite floats are written (JSON has no literal for them).
std::optional<double> non_finite(const boost::json::value& v) {
  if (!v.is_string()) return std::nullopt;
  const auto s = v.get_string();
  if (s == "nan") return std::nan("");
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  return std::nullopt;
}

void flatten(const boost::json::value& v, std::vector<double>& out, const std::string& field) {
  if (v.is_array()) {
    for (const auto& item : v.get_array()) flatten(item, out, field);
  } else if (v.is_double()) {
    out.push_back(v.get_double());
  } else if (v.is_int64()) {
    out.push_back(static_cast<double>(v.get_int64()));
  } else if (v.is_uint64()) {
    out.push_back(static_cast<double>(v.get_uint64()));
  } else if (v.is_bool()) {
    out.push_back(v.get_bool() ? 1.0 : 0.0);
  } else if (const auto special = non_finite(v)) {
    out.push_back(*special);
  } else {
    field_error(field, "expected numbers in 'data'");
  }
}

std::size_t count_arrays(const boost::json::value& v) {
  if (!v.is_array()) return 0;
  std::size_t n = 1;
  for (const auto& item : v.get_array()) n += count_arrays(item);
  return n;
}

// A tensor without values is written as nested empty lists, one per index of the dimensions before the
// first zero: shape [8888888885, 0] would be written as 8.9 billion "[]" (found by fuzz_document_json:
// 70 bytes in, gigabytes out). So those lists must be there in the data, as to_json writes them.
void check_empty_shape(const std::vector<int64_t>& sizes, const boost::json::value& data, const std::string& field) {
  std::uint64_t lists = 1;
  for (const int64_t s : sizes) {
    if (s == 0) break;
    if (__builtin_mul_overflow(lists, static_cast<std::uint64_t>(s), &lists)) lists = UINT64_MAX;
  }
  const std::size_t present = count_arrays(data);
  if (sizes.size() > 1 && lists > present) {
    field_error(field + ".data", fmt::format("shape {} has no values but {} nested lists, and data has {}",
                                             fmt::join(sizes, "x"), lists, present));
  }
}

at::Tensor tensor_from_json(const boost::json::value& v, const std::string& field) {
  if (!v.is_object()) field_error(field, "expected {\"dtype\", \"shape\", \"data\"}");
  const auto& o = v.get_object();
  const auto* dtype = o.if_contains("dtype");
  const auto* shape = o.if_contains("shape");
  const auto* data = o.if_contains("data");
  if (!dtype || !shape || !data) field_error(field, "expected the keys dtype, shape and data");
  const std::string dtype_text = get_string(*dtype, field + ".dtype");
  std::optional<at::ScalarType> type;
  for (const auto& d : kDtypes) {
    if (dtype_text == d.name) type = d.type;
  }
  if (!type) field_error(field + ".dtype", fmt::format("unknown dtype '{}'", dtype_text));
  if (!shape->is_array()) field_error(field + ".shape", "expected a list of integers");
  std::vector<int64_t> sizes;
  int64_t count = 1;
  bool overflow = false;
  for (const auto& s : shape->get_array()) {
    if (!s.is_int64() || s.get_int64() < 0) field_error(field + ".shape", "expected a list of non-negative integers");
    sizes.push_back(s.get_int64());
    overflow |= __builtin_mul_overflow(count, s.get_int64(), &count);
  }
  if (overflow) field_error(field + ".shape", fmt::format("shape {} is too large", fmt::join(sizes, "x")));
  // The values are counted before anything is sized by the shape: a request declaring a shape of billions
  // with three values must not make the reader reserve gigabytes (found by tests/fuzz/fuzz_document_json).
  std::vector<double> values;
  flatten(*data, values, field);
  if (count == 0) check_empty_shape(sizes, *data, field);
  if (static_cast<int64_t>(values.size()) != count) {
    field_error(field + ".data",
                fmt::format("shape {} needs {} values, got {}", fmt::join(sizes, "x"), count, values.size()));
  }
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  std::copy(values.begin(), values.end(), t.data_ptr<double>());
  return t.to(*type);
}

// One field's value from JSON, by the field's type.
void read_field_value(std::string& out, const boost::json::value& v, const std::string& field) {
  out = get_string(v, field);
}
void read_field_value(Bytes& out, const boost::json::value& v, const std::string& field) {
  out = decode_base64(get_string(v, field));
}
void read_field_value(at::Tensor& out, const boost::json::value& v, const std::string& field) {
  out = tensor_from_json(v, field);
}
void read_field_value(Tags& out, const boost::json::value& v, const std::string& field) {
  if (!v.is_object()) field_error(field, "expected a JSON object");
  out = v.get_object();
}
void read_field_value(std::map<std::string, float, std::less<>>& out, const boost::json::value& v,
                      const std::string& field) {
  if (!v.is_object()) field_error(field, "expected a JSON object of numbers");
  for (const auto& [name, score] : v.get_object()) {
    // Scores are written as floats, so a score that overflows float32 (or is NaN) is written as "inf" or
    // "nan" like an embedding value, and must read back (found by tests/fuzz/fuzz_document_json).
    if (const auto special = non_finite(score)) {
      out[std::string(name)] = static_cast<float>(*special);
      continue;
    }
    if (!score.is_number())
      field_error(fmt::format("{}.{}", field, std::string_view(name)),
                  "expected a number, \"nan\", \"inf\" or \"-inf\"");
    out[std::string(name)] = static_cast<float>(score.to_number<double>());
  }
}
void read_field_value(DocumentArray& out, const boost::json::value& v, const std::string& field) {
  if (!v.is_array()) field_error(field, "expected a list of documents");
  for (const auto& item : v.get_array()) out.push_back(document_from_json(item));
}

}  // namespace

void append_json(std::string& out, const Document& doc, FieldSet fields) {
  out += '{';
  bool first = true;
  for_each_document_field([&](DocumentField field, std::string_view name, auto member) {
    const auto& value = doc.*member;
    // The id is always written; other fields only when selected and set.
    if (field != DocumentField::id && (!fields.contains(field) || field_is_empty(value))) return;
    if (!first) out += ',';
    first = false;
    out += '"';
    out += name;
    out += "\":";
    append_field_value(out, value);
  });
  out += '}';
}

void append_json(std::string& out, const Document& doc) { append_json(out, doc, FieldSet::all()); }

void append_json_field(std::string& out, const Document& doc, DocumentField field) {
  for_each_document_field([&](DocumentField f, std::string_view, auto member) {
    if (f == field) append_field_value(out, doc.*member);
  });
}

void read_json_field(Document& doc, DocumentField field, const boost::json::value& value) {
  for_each_document_field([&](DocumentField f, std::string_view name, auto member) {
    if (f == field) read_field_value(doc.*member, value, std::string(name));
  });
}

void append_json_text(std::string& out, std::string_view text) { append_json_string(out, text); }
void append_json_floats(std::string& out, const float* values, std::size_t n) { append_float_row(out, values, n); }
void append_json_base64(std::string& out, const void* data, std::size_t size) {
  append_base64(out, static_cast<const std::uint8_t*>(data), size);
}
void append_json_tensor_values(std::string& out, const at::Tensor& tensor) { append_tensor_values(out, tensor); }

std::string to_json(const Document& doc) {
  std::string out;
  append_json(out, doc);
  return out;
}

Document document_from_json(const boost::json::value& json) {
  if (!json.is_object()) throw Error("a document must be a JSON object");
  Document doc;
  for (const auto& entry : json.get_object()) {
    const std::string name(entry.key());
    const boost::json::value& value = entry.value();  // (not a structured binding: Clang 14 cannot capture one)
    const auto wanted = find_document_field(name);
    if (!wanted) {
      const std::string hint =
          closest_match(name, std::vector<std::string>(kDocumentFieldNames.begin(), kDocumentFieldNames.end()));
      throw Error(
          fmt::format("unknown field '{}'{}", name, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
    for_each_document_field([&](DocumentField field, std::string_view, auto member) {
      if (field == *wanted) read_field_value(doc.*member, value, name);
    });
  }
  if (doc.id.empty()) doc.id = generate_id();
  return doc;
}

Document document_from_json(std::string_view json_text) {
  boost::system::error_code ec;
  boost::json::value v = detail::parse_json(json_text, ec);
  if (ec) throw Error(fmt::format("invalid JSON: {}", ec.message()));
  return document_from_json(v);
}

}  // namespace flowline
