// One document of Jina's HTTP bodies, read and written by walking the one table of Document fields
// (flowline/document_fields.hpp), so that nothing a flow returns — matches, scores, chunks, tensors — is
// lost on the way to the client (protocols.hpp).
//
// Jina's names differ from flowline's in two places (blob is "bytes_", uri is "url") and its shapes in three
// (an embedding and a tensor are (nested) lists of numbers, as docarray writes and reads them — a tensor read
// back from a list is float32; a score is {"value": number}, docarray's NamedScore). A request's tensor may also
// come in flowline's {"dtype", "shape", "data"}. Every other field is flowline's JSON form (io.hpp). "id", "text",
// "bytes_", "embedding" and "url" are always written (null when unset), as Jina's TextDoc answers; the others only when
// set. An answer to docarray < 0.30's client names blob and uri "blob" and "uri", as it did (JinaNames).
#include "protocols.hpp"

#include "flowline/document_fields.hpp"
#include "flowline/error.hpp"
#include "flowline/io.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace flowline::gateway {

namespace json = boost::json;

namespace {

// Jina's name of each field, in the order of flowline's table.
constexpr std::array<std::string_view, kDocumentFieldNames.size()> kJinaNames = {
    "id",        "text", "bytes_", "tensor", "embedding", "tags",
    "mime_type", "url",  "scores", "chunks", "matches",   "parent_id"};

}  // namespace

std::string_view jina_name(DocumentField field) noexcept { return kJinaNames[static_cast<std::size_t>(field)]; }

namespace {

// A field's name in an answer: Jina's, but docarray < 0.30's "blob" and "uri" for its clients.
std::string_view written_name(DocumentField field, JinaNames names) {
  if (names == JinaNames::docarray_v1 && field == DocumentField::blob) return "blob";
  if (names == JinaNames::docarray_v1 && field == DocumentField::uri) return "uri";
  return jina_name(field);
}

}  // namespace

bool jina_always_written(DocumentField field) noexcept {
  return field == DocumentField::id || field == DocumentField::text || field == DocumentField::blob ||
         field == DocumentField::embedding || field == DocumentField::uri;
}

std::optional<DocumentField> jina_field_named(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kJinaNames.size(); ++i) {
    if (kJinaNames[i] == name) return static_cast<DocumentField>(i);
  }
  return find_document_field(name);
}

namespace {

// Where a value sits in the body, for messages: "data[0].matches[2]", and FastAPI's loc ["body", "data", 0,
// "matches", 2]. A chain of links on the reader's stack, each naming its parent: nothing is made unless a
// message needs it (the reader walks every document and field of every request).
struct Where {
  const Where* parent = nullptr;  // none: the root, a field of the body
  std::string_view name;          // a field's name (a key of the body, alive while it is read)
  std::size_t index = 0;          // else a position in a list
  bool is_index = false;

  Where at(std::string_view field) const { return Where{this, field, 0, false}; }
  Where at(std::size_t position) const { return Where{this, {}, position, true}; }
  json::array loc() const {
    json::array out = parent ? parent->loc() : json::array{"body"};
    if (is_index) {
      out.emplace_back(index);
    } else {
      out.emplace_back(name);
    }
    return out;
  }
  std::string path() const {
    if (is_index) return fmt::format("{}[{}]", parent ? parent->path() : std::string(), index);
    return parent ? fmt::format("{}.{}", parent->path(), name) : std::string(name);
  }
};

[[noreturn]] void invalid(std::string_view type, const Where& where, std::string_view expected,
                          const json::value& input) {
  throw jina_validation_error(type, where.loc(), fmt::format("{}: {}", where.path(), expected), input);
}

std::string string_value(const json::value& v, const Where& where) {
  if (!v.is_string()) invalid("string_type", where, "expected a string", v);
  return std::string(v.get_string());
}

at::Tensor embedding_value(const json::value& v, const Where& where) {
  const json::array* values = v.if_array();
  if (!values) invalid("list_type", where, "expected a list of numbers", v);
  at::Tensor row = at::empty({static_cast<int64_t>(values->size())}, at::kFloat);
  float* out = row.data_ptr<float>();
  for (std::size_t j = 0; j < values->size(); ++j) {
    const json::value& x = (*values)[j];
    if (!x.is_number()) invalid("list_type", where, "expected a list of numbers", v);
    const double value = x.to_number<double>();
    if (std::abs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
      invalid("float_type", where.at(j),
              fmt::format("{} is beyond float32's range (±3.4028235e38)", json::serialize(x)), x);
    }
    out[j] = static_cast<float>(value);
  }
  return row;
}

// A score: a number, or docarray's NamedScore {"value": number, ...}.
float score_value(const json::value& v, const Where& where) {
  const json::value* number = &v;
  if (const json::object* named = v.if_object()) {
    const auto it = named->find("value");
    number = it == named->end() ? nullptr : &it->value();
  }
  if (!number || !number->is_number()) invalid("float_type", where, "expected a number or {\"value\": number}", v);
  return static_cast<float>(number->to_number<double>());
}

// A tensor in flowline's form {"dtype", "shape", "data"}, or a (nested) list of numbers as float32.
void read_tensor(Document& doc, const json::value& v, const Where& where) {
  json::value listed;  // a plain list, wrapped in flowline's form (the list is copied once, into it)
  if (v.is_array()) {
    json::array shape;
    for (const json::value* level = &v; level->is_array(); level = &level->get_array().front()) {
      shape.emplace_back(static_cast<std::int64_t>(level->get_array().size()));
      if (level->get_array().empty()) break;
    }
    listed = json::object{{"dtype", "float32"}, {"shape", std::move(shape)}, {"data", v}};
  }
  try {
    read_json_field(doc, DocumentField::tensor, v.is_array() ? listed : v);
  } catch (const Error& e) {
    invalid("value_error", where, fmt::format("expected a tensor ({})", e.what()), v);
  }
}

Document read_document(const json::value& v, const Where& where);

DocumentArray documents_value(const json::value& v, const Where& where) {
  if (!v.is_array()) invalid("list_type", where, "expected a list of documents", v);
  DocumentArray docs;
  const json::array& items = v.get_array();
  docs.reserve(items.size());
  for (std::size_t j = 0; j < items.size(); ++j) docs.push_back(read_document(items[j], where.at(j)));
  return docs;
}

void read_field(Document& doc, DocumentField field, const json::value& v, const Where& where) {
  switch (field) {
    case DocumentField::id:
      doc.id = string_value(v, where);
      return;
    case DocumentField::text:
      doc.text = string_value(v, where);
      return;
    case DocumentField::mime_type:
      doc.mime_type = string_value(v, where);
      return;
    case DocumentField::uri:
      doc.uri = string_value(v, where);
      return;
    case DocumentField::parent_id:
      doc.parent_id = string_value(v, where);
      return;
    case DocumentField::embedding:
      doc.embedding = embedding_value(v, where);
      return;
    case DocumentField::tensor:
      read_tensor(doc, v, where);
      return;
    case DocumentField::chunks:
      doc.chunks = documents_value(v, where);
      return;
    case DocumentField::matches:
      doc.matches = documents_value(v, where);
      return;
    case DocumentField::tags:
      if (!v.is_object()) invalid("dict_type", where, "expected an object", v);
      doc.tags = v.get_object();
      return;
    case DocumentField::scores:
      if (!v.is_object()) invalid("dict_type", where, "expected an object of scores", v);
      for (const auto& kv : v.get_object()) {
        doc.scores[std::string(kv.key())] = score_value(kv.value(), where.at(kv.key()));
      }
      return;
    case DocumentField::blob:
      try {
        read_json_field(doc, field, v);
      } catch (const Error& e) {
        invalid("bytes_type", where, fmt::format("expected base64 text ({})", e.what()), v);
      }
      return;
  }
}

Document read_document(const json::value& v, const Where& where) {
  if (!v.is_object()) invalid("model_attributes_type", where, "expected a document (a JSON object)", v);
  Document doc(Document::WithId{});  // an id is generated below only when the body gives none
  for (const auto& kv : v.get_object()) {
    if (kv.value().is_null()) continue;
    if (const auto field = jina_field_named(kv.key())) read_field(doc, *field, kv.value(), where.at(kv.key()));
  }
  if (doc.id.empty()) doc.id = generate_id();
  return doc;
}

void append_scores(std::string& out, const Document& doc) {
  out += '{';
  bool first = true;
  for (const auto& [name, value] : doc.scores) {
    if (!first) out += ',';
    first = false;
    append_json_text(out, name);
    std::string number;  // "[0.93]": the float in its shortest exact form
    append_json_floats(number, &value, 1);
    out += ":{\"value\":";
    out.append(number, 1, number.size() - 2);
    out += '}';
  }
  out += '}';
}

void append_documents(std::string& out, const DocumentArray& docs, JinaNames names) {
  out += '[';
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i) out += ',';
    append_jina_document(out, docs[i], names);
  }
  out += ']';
}

}  // namespace

Document jina_document(const json::value& value, std::size_t index) {
  const Where data{nullptr, "data"};
  return read_document(value, data.at(index));
}

std::size_t jina_size_hint(const Document& doc) {
  // Names, punctuation and nulls; the strings (escapes aside); a float in at most 15 characters and its comma;
  // base64 for the blob; a guess per tag and score; then chunks and matches.
  std::size_t n = 128 + doc.id.size() + doc.text.size() + doc.uri.size() + doc.mime_type.size() + doc.parent_id.size() +
                  doc.blob.size() * 4 / 3;
  if (doc.embedding.defined()) n += static_cast<std::size_t>(doc.embedding.numel()) * 16;
  if (doc.tensor.defined()) n += 64 + static_cast<std::size_t>(doc.tensor.numel()) * 16;
  n += doc.tags.size() * 32 + doc.scores.size() * 48;
  for (const Document& chunk : doc.chunks) n += jina_size_hint(chunk);
  for (const Document& match : doc.matches) n += jina_size_hint(match);
  return n;
}

JinaNames jina_names_of(const json::value& data) {
  const json::object* first = data.if_object();
  if (const json::array* items = data.if_array(); items && !items->empty()) first = (*items)[0].if_object();
  if (!first || first->contains("bytes_") || first->contains("url")) return JinaNames::docarray_v2;
  return first->contains("blob") || first->contains("uri") ? JinaNames::docarray_v1 : JinaNames::docarray_v2;
}

void append_jina_document(std::string& out, const Document& doc, JinaNames names) {
  out += '{';
  bool first = true;
  for_each_document_field([&](DocumentField field, std::string_view, auto member) {
    const bool unset = field_is_empty(doc.*member);
    if (unset && !jina_always_written(field)) return;
    if (!first) out += ',';
    first = false;
    out += '"';
    out += written_name(field, names);
    out += "\":";
    // Jina writes a document with a url but no text as text null.
    if (unset && (field != DocumentField::text || !doc.uri.empty())) {
      out += "null";
      return;
    }
    switch (field) {
      case DocumentField::embedding:
        append_float_embedding(out, doc.embedding);
        break;
      case DocumentField::tensor:
        append_json_tensor_values(out, doc.tensor);
        break;
      case DocumentField::scores:
        append_scores(out, doc);
        break;
      case DocumentField::chunks:
        append_documents(out, doc.chunks, names);
        break;
      case DocumentField::matches:
        append_documents(out, doc.matches, names);
        break;
      default:
        append_json_field(out, doc, field);
    }
  });
  out += '}';
}

}  // namespace flowline::gateway
