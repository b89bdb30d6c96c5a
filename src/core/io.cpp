#include "flowline/io.hpp"
#include "flowline/error.hpp"
#include "flowline/text.hpp"
#include "json_parse.hpp"

#include <ATen/ATen.h>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <utf8proc.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>

namespace flowline {

namespace {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void append_base64(std::string& out, const Bytes& bytes) {
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const std::uint32_t v = (bytes[i] << 16) | (bytes[i + 1] << 8) | bytes[i + 2];
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  if (i < bytes.size()) {
    std::uint32_t v = bytes[i] << 16;
    if (i + 1 < bytes.size()) v |= bytes[i + 1] << 8;
    out += kBase64[v >> 18];
    out += kBase64[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
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
void append_values(std::string& out, const T* data, at::IntArrayRef shape, std::size_t dim, std::size_t& offset) {
  out += '[';
  const int64_t n = shape.empty() ? 0 : shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ',';
    if (dim + 1 < shape.size()) {
      append_values(out, data, shape, dim + 1, offset);
    } else {
      const T v = data[offset++];
      if constexpr (std::is_same_v<T, bool>) {
        out += v ? "true" : "false";
      } else if constexpr (std::is_floating_point_v<T>) {
        if (std::isfinite(v)) {
          fmt::format_to(std::back_inserter(out), "{}", v);
        } else {
          out += std::isnan(v) ? "\"nan\"" : (v > 0 ? "\"inf\"" : "\"-inf\"");
        }
      } else {
        fmt::format_to(std::back_inserter(out), "{}", static_cast<int64_t>(v));
      }
    }
  }
  out += ']';
}

void append_tensor(std::string& out, const at::Tensor& tensor) {
  at::Tensor t = tensor.to(at::kCPU).contiguous();
  const at::ScalarType type = t.scalar_type();
  // Half and bfloat16 values are exact in float, so they are written as floats and read back exactly.
  if (type == at::kHalf || type == at::kBFloat16) t = t.to(at::kFloat);
  out += "{\"dtype\":\"";
  out += dtype_name(type);
  out += "\",\"shape\":[";
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (i) out += ',';
    fmt::format_to(std::back_inserter(out), "{}", t.size(i));
  }
  out += "],\"data\":";
  std::size_t offset = 0;
  if (t.dim() == 0) {
    // A scalar tensor: data is a bare value.
    std::string inner;
    const int64_t one[] = {1};
    AT_DISPATCH_ALL_TYPES_AND(at::kBool, t.scalar_type(), "append_tensor", [&] {
      append_values(inner, t.data_ptr<scalar_t>(), at::IntArrayRef(one), 0, offset);
    });
    out += inner.substr(1, inner.size() - 2);
  } else {
    AT_DISPATCH_ALL_TYPES_AND(at::kBool, t.scalar_type(), "append_tensor", [&] {
      append_values(out, t.data_ptr<scalar_t>(), t.sizes(), 0, offset);
    });
  }
  out += '}';
}

void append_array(std::string& out, const DocumentArray& docs) {
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
  } else if (v.is_string() && (v.get_string() == "nan" || v.get_string() == "inf" || v.get_string() == "-inf")) {
    const auto s = v.get_string();
    out.push_back(s == "nan" ? std::nan("") : s == "inf" ? INFINITY : -INFINITY);
  } else {
    field_error(field, "expected numbers in 'data'");
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
  for (const auto& s : shape->get_array()) {
    if (!s.is_int64() || s.get_int64() < 0) field_error(field + ".shape", "expected a list of non-negative integers");
    sizes.push_back(s.get_int64());
    count *= s.get_int64();
  }
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(count));
  flatten(*data, values, field);
  if (static_cast<int64_t>(values.size()) != count) {
    field_error(field + ".data", fmt::format("shape {} needs {} values, got {}", fmt::join(sizes, "x"), count, values.size()));
  }
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(at::kDouble));
  std::copy(values.begin(), values.end(), t.data_ptr<double>());
  return t.to(*type);
}

DocumentArray array_from_json(const boost::json::value& v, const std::string& field) {
  if (!v.is_array()) field_error(field, "expected a list of documents");
  DocumentArray out;
  for (const auto& item : v.get_array()) out.push_back(document_from_json(item));
  return out;
}

const std::vector<std::string>& document_fields() {
  static const std::vector<std::string> fields = {"id",   "text", "blob",      "tensor", "embedding", "tags",
                                                  "mime_type", "uri", "scores", "chunks", "matches", "parent_id"};
  return fields;
}

}  // namespace

void append_json(std::string& out, const Document& doc) {
  out += "{\"id\":";
  append_json_string(out, doc.id);
  if (!doc.text.empty()) {
    out += ",\"text\":";
    append_json_string(out, doc.text);
  }
  if (!doc.blob.empty()) {
    out += ",\"blob\":\"";
    append_base64(out, doc.blob);
    out += '"';
  }
  if (doc.tensor.defined()) {
    out += ",\"tensor\":";
    append_tensor(out, doc.tensor);
  }
  if (doc.embedding.defined()) {
    out += ",\"embedding\":";
    append_tensor(out, doc.embedding);
  }
  if (!doc.tags.empty()) {
    out += ",\"tags\":";
    out += boost::json::serialize(doc.tags);
  }
  if (!doc.mime_type.empty()) {
    out += ",\"mime_type\":";
    append_json_string(out, doc.mime_type);
  }
  if (!doc.uri.empty()) {
    out += ",\"uri\":";
    append_json_string(out, doc.uri);
  }
  if (!doc.scores.empty()) {
    out += ",\"scores\":{";
    bool first = true;
    for (const auto& [name, value] : doc.scores) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, name);
      fmt::format_to(std::back_inserter(out), ":{}", value);
    }
    out += '}';
  }
  if (!doc.chunks.empty()) {
    out += ",\"chunks\":";
    append_array(out, doc.chunks);
  }
  if (!doc.matches.empty()) {
    out += ",\"matches\":";
    append_array(out, doc.matches);
  }
  if (!doc.parent_id.empty()) {
    out += ",\"parent_id\":";
    append_json_string(out, doc.parent_id);
  }
  out += '}';
}

std::string to_json(const Document& doc) {
  std::string out;
  append_json(out, doc);
  return out;
}

Document document_from_json(const boost::json::value& json) {
  if (!json.is_object()) throw Error("a document must be a JSON object");
  Document doc;
  for (const auto& [key, value] : json.get_object()) {
    const std::string field(key);
    if (field == "id") {
      doc.id = get_string(value, field);
    } else if (field == "text") {
      doc.text = get_string(value, field);
    } else if (field == "blob") {
      doc.blob = decode_base64(get_string(value, field));
    } else if (field == "tensor") {
      doc.tensor = tensor_from_json(value, field);
    } else if (field == "embedding") {
      doc.embedding = tensor_from_json(value, field);
    } else if (field == "tags") {
      if (!value.is_object()) field_error(field, "expected a JSON object");
      doc.tags = value.get_object();
    } else if (field == "mime_type") {
      doc.mime_type = get_string(value, field);
    } else if (field == "uri") {
      doc.uri = get_string(value, field);
    } else if (field == "scores") {
      if (!value.is_object()) field_error(field, "expected a JSON object of numbers");
      for (const auto& [name, score] : value.get_object()) {
        if (!score.is_number()) field_error(fmt::format("scores.{}", std::string_view(name)), "expected a number");
        doc.scores[std::string(name)] = static_cast<float>(score.to_number<double>());
      }
    } else if (field == "chunks") {
      doc.chunks = array_from_json(value, field);
    } else if (field == "matches") {
      doc.matches = array_from_json(value, field);
    } else if (field == "parent_id") {
      doc.parent_id = get_string(value, field);
    } else {
      const std::string hint = closest_match(field, document_fields());
      throw Error(fmt::format("unknown field '{}'{}", field, hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
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

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(SourceLocation{path.string()}, fmt::format("cannot open file: {}", std::strerror(errno)));
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(SourceLocation{path.string()}, "is a folder, not a file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(SourceLocation{path.string()}, fmt::format("read failed: {}", std::strerror(errno)));
  return text;
}

DocumentArray read_jsonl(const std::filesystem::path& path) {
  auto source = open_file_source(path, InputFormat::Jsonl);
  DocumentArray out;
  while (source->read(out, 4096) > 0) {
  }
  return out;
}

void write_jsonl(const std::filesystem::path& path, const DocumentArray& docs) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("cannot write '{}': {}", path.string(), std::strerror(errno)));
  std::string line;
  for (const auto& d : docs) {
    line.clear();
    append_json(line, d);
    line += '\n';
    out.write(line.data(), static_cast<std::streamsize>(line.size()));
  }
  out.flush();
  if (!out) throw Error(fmt::format("cannot write '{}': {}", path.string(), std::strerror(errno)));
}

std::size_t find_invalid_utf8(std::string_view text) noexcept {
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t i = 0;
  while (i < text.size()) {
    if (data[i] < 0x80) {
      ++i;
      continue;
    }
    utf8proc_int32_t cp;
    const auto n = utf8proc_iterate(data + i, static_cast<utf8proc_ssize_t>(text.size() - i), &cp);
    if (n <= 0) return i;
    i += static_cast<std::size_t>(n);
  }
  return std::string_view::npos;
}

std::size_t ArraySource::read(DocumentArray& out, std::size_t max) {
  std::size_t n = 0;
  while (n < max && next_ < docs_.size()) {
    out.push_back(std::move(docs_[next_++]));
    ++n;
  }
  return n;
}

InputFormat parse_input_format(std::string_view name) {
  if (name == "lines") return InputFormat::Lines;
  if (name == "paragraphs") return InputFormat::Paragraphs;
  if (name == "jsonl") return InputFormat::Jsonl;
  if (name == "text") return InputFormat::Text;
  throw Error(fmt::format("unknown input format '{}'; expected lines, paragraphs, jsonl or text", name));
}

namespace {

void check_utf8(const std::string& path, std::string_view text, std::size_t first_line) {
  const std::size_t bad = find_invalid_utf8(text);
  if (bad == std::string_view::npos) return;
  std::size_t line = first_line, line_start = 0;
  for (std::size_t i = 0; i < bad; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  throw InputError(SourceLocation{path, static_cast<int>(line), static_cast<int>(bad - line_start + 1)},
                   fmt::format("invalid UTF-8 (byte 0x{:02x})", static_cast<unsigned char>(text[bad])));
}

// lines and jsonl: streamed one line at a time.
class LineSource : public DocumentSource {
 public:
  LineSource(const std::filesystem::path& path, bool jsonl) : path_(path.string()), jsonl_(jsonl), in_(path, std::ios::binary) {
    std::error_code ec;
    if (!in_ || std::filesystem::is_directory(path, ec)) {
      throw InputError(SourceLocation{path_}, std::filesystem::is_directory(path, ec)
                                                  ? std::string("is a folder, not a file")
                                                  : fmt::format("cannot open file: {}", std::strerror(errno)));
    }
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t n = 0;
    while (n < max && std::getline(in_, line_)) {
      ++line_number_;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (line_number_ == 1 && line_.compare(0, 3, "\xEF\xBB\xBF") == 0) line_.erase(0, 3);
      if (line_.find_first_not_of(" \t") == std::string::npos) continue;
      check_utf8(path_, line_, line_number_);
      if (jsonl_) {
        try {
          Document doc = document_from_json(std::string_view(line_));
          if (doc.uri.empty()) doc.uri = path_;
          out.push_back(std::move(doc));
        } catch (const Error& e) {
          throw InputError(SourceLocation{path_, static_cast<int>(line_number_)}, e.what());
        }
      } else {
        Document doc(line_);
        doc.uri = path_;
        doc.tags["line"] = static_cast<std::int64_t>(line_number_);
        out.push_back(std::move(doc));
      }
      ++n;
    }
    if (in_.bad()) throw InputError(SourceLocation{path_, static_cast<int>(line_number_)}, "read failed");
    return n;
  }

 private:
  std::string path_;
  bool jsonl_;
  std::ifstream in_;
  std::string line_;
  std::size_t line_number_ = 0;
};

// paragraphs and text: the file is read whole (a paragraph needs the lines around it).
class WholeFileSource : public DocumentSource {
 public:
  WholeFileSource(const std::filesystem::path& path, bool paragraphs) : path_(path.string()) {
    text_ = read_file(path);
    check_utf8(path_, text_, 1);
    if (paragraphs) {
      spans_ = split_paragraphs(text_);
    } else {
      const std::size_t bom = text_.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
      spans_.push_back(TextSpan{bom, text_.size(), 0, 0, 1});
    }
    paragraphs_ = paragraphs;
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t n = 0;
    for (; n < max && next_ < spans_.size(); ++n, ++next_) {
      const TextSpan& span = spans_[next_];
      Document doc(text_.substr(span.byte_begin, span.byte_end - span.byte_begin));
      doc.uri = path_;
      if (paragraphs_) {
        doc.tags["paragraph"] = static_cast<std::int64_t>(next_);
        doc.tags["line"] = static_cast<std::int64_t>(span.line);
        doc.tags["start"] = static_cast<std::int64_t>(span.char_begin);
        doc.tags["end"] = static_cast<std::int64_t>(span.char_end);
      }
      out.push_back(std::move(doc));
    }
    return n;
  }

 private:
  std::string path_;
  std::string text_;
  std::vector<TextSpan> spans_;
  std::size_t next_ = 0;
  bool paragraphs_ = false;
};

// A folder: its regular files in name order, each read with the same format.
class FolderSource : public DocumentSource {
 public:
  FolderSource(const std::filesystem::path& folder, InputFormat format) : format_(format) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
      if (entry.is_regular_file() && entry.path().filename().string().front() != '.') files_.push_back(entry.path());
    }
    if (ec) throw InputError(SourceLocation{folder.string()}, fmt::format("cannot list folder: {}", ec.message()));
    if (files_.empty()) throw InputError(SourceLocation{folder.string()}, "the folder holds no files");
    std::sort(files_.begin(), files_.end());
  }
  std::size_t read(DocumentArray& out, std::size_t max) override {
    std::size_t n = 0;
    while (n < max) {
      if (!current_) {
        if (next_ == files_.size()) break;
        current_ = open_file_source(files_[next_++], format_);
      }
      const std::size_t got = current_->read(out, max - n);
      if (got == 0) current_.reset();
      n += got;
    }
    return n;
  }

 private:
  InputFormat format_;
  std::vector<std::filesystem::path> files_;
  std::size_t next_ = 0;
  std::unique_ptr<DocumentSource> current_;
};

}  // namespace

std::unique_ptr<DocumentSource> open_file_source(const std::filesystem::path& path, InputFormat format) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return std::make_unique<FolderSource>(path, format);
  switch (format) {
    case InputFormat::Lines: return std::make_unique<LineSource>(path, false);
    case InputFormat::Jsonl: return std::make_unique<LineSource>(path, true);
    case InputFormat::Paragraphs: return std::make_unique<WholeFileSource>(path, true);
    case InputFormat::Text: return std::make_unique<WholeFileSource>(path, false);
  }
  throw Error("unknown input format");
}

}  // namespace flowline
