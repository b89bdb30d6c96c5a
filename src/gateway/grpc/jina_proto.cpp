// Jina's gRPC messages to gateway calls and back (jina_proto.hpp). Documents are read and written by walking
// the one table of Document fields, so that nothing a flow returns is lost on the way to the client.
#include "jina_proto.hpp"

#include "flowline/document_fields.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <boost/json/object.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstring>
#include <limits>

namespace flowline::gateway {

namespace json = boost::json;
using docarray::NodeProto;

namespace {

[[noreturn]] void bad(const std::string& where, const std::string& expected) {
  throw RefusedError(Refusal::BadRequest, fmt::format("{}: {}", where, expected));
}

// numpy's dtype strings and LibTorch's types (little-endian hosts, as numpy's "<" says).
struct DType {
  std::string_view numpy;
  at::ScalarType type;
};
constexpr std::array<DType, 16> kDTypes = {{{"<f4", at::kFloat},
                                            {"float32", at::kFloat},
                                            {"<f2", at::kHalf},
                                            {"float16", at::kHalf},
                                            {"<f8", at::kDouble},
                                            {"float64", at::kDouble},
                                            {"<i8", at::kLong},
                                            {"int64", at::kLong},
                                            {"<i4", at::kInt},
                                            {"int32", at::kInt},
                                            {"<i2", at::kShort},
                                            {"int16", at::kShort},
                                            {"|i1", at::kChar},
                                            {"int8", at::kChar},
                                            {"|u1", at::kByte},
                                            {"|b1", at::kBool}}};

const char* case_name(NodeProto::ContentCase c) {
  switch (c) {
    case NodeProto::kText:
      return "text";
    case NodeProto::kInteger:
      return "an integer";
    case NodeProto::kFloat:
      return "a float";
    case NodeProto::kBoolean:
      return "a boolean";
    case NodeProto::kBlob:
      return "bytes";
    case NodeProto::kNdarray:
      return "an ndarray";
    case NodeProto::kDoc:
      return "a document";
    case NodeProto::kDocArray:
      return "a document list";
    case NodeProto::kList:
    case NodeProto::kSet:
    case NodeProto::kTuple:
      return "a list";
    case NodeProto::kDict:
      return "a dict";
    case NodeProto::CONTENT_NOT_SET:
      break;
  }
  return "nothing";
}

[[noreturn]] void wrong_kind(const std::string& where, std::string_view expected, const NodeProto& node) {
  bad(where, fmt::format("expected {}, got {}", expected, case_name(node.content_case())));
}

std::string text_of(const NodeProto& node, const std::string& where) {
  if (node.content_case() != NodeProto::kText) wrong_kind(where, "text", node);
  return node.text();
}

// A dense array of either docarray generation (their DenseNdArrayProto have the same fields).
template <class Dense>
at::Tensor read_dense(const Dense& dense, const std::string& where) {
  const DType* dtype = nullptr;
  for (const auto& d : kDTypes) {
    if (d.numpy == dense.dtype()) dtype = &d;
  }
  if (!dtype) {
    bad(where, fmt::format("dtype '{}' is not read (expected one of <f4, <f2, <f8, <i8, <i4, <i2, |i1, |u1, |b1)",
                           dense.dtype()));
  }
  std::vector<std::int64_t> shape;
  std::uint64_t count = 1;
  for (const std::uint32_t d : dense.shape()) {
    if (d != 0 && count > std::numeric_limits<std::uint32_t>::max() / d) bad(where, "the shape is too large");
    count *= d;
    shape.push_back(d);
  }
  const std::size_t item = at::elementSize(dtype->type);
  if (count * item != dense.buffer().size()) {
    bad(where, fmt::format("the shape [{}] of {} needs {} bytes, the buffer holds {}", fmt::join(shape, ", "),
                           dense.dtype(), count * item, dense.buffer().size()));
  }
  at::Tensor tensor = at::empty(shape, at::TensorOptions().dtype(dtype->type));
  if (count) std::memcpy(tensor.data_ptr(), dense.buffer().data(), dense.buffer().size());
  return tensor;
}

at::Tensor read_ndarray(const docarray::NdArrayProto& array, const std::string& where) {
  return read_dense(array.dense(), where);
}

template <class Dense>
void write_dense(Dense& dense, const at::Tensor& value, bool as_float) {
  at::Tensor t = value;
  if (!t.device().is_cpu()) t = t.to(at::kCPU);
  if (as_float && t.scalar_type() != at::kFloat) t = t.to(at::kFloat);
  const DType* dtype = nullptr;
  for (const auto& d : kDTypes) {
    if (d.type == t.scalar_type() && !dtype) dtype = &d;
  }
  if (!dtype) {
    t = t.to(at::kFloat);
    dtype = &kDTypes[0];
  }
  t = t.contiguous();
  dense.set_buffer(t.data_ptr(), t.numel() * t.element_size());
  for (const std::int64_t d : t.sizes()) dense.add_shape(static_cast<std::uint32_t>(d));
  dense.set_dtype(std::string(dtype->numpy));
}

void write_ndarray(NodeProto& node, const at::Tensor& value, bool as_float) {
  write_dense(*node.mutable_ndarray()->mutable_dense(), value, as_float);
  node.set_type("ndarray");
}

json::value value_of(const NodeProto& node, const std::string& where, std::size_t depth, const ParseLimits& limits);

json::object dict_of(const docarray::DictOfAnyProto& dict, const std::string& where, std::size_t depth,
                     const ParseLimits& limits) {
  json::object out;
  for (const auto& [key, value] : dict.data())
    out[key] = value_of(value, fmt::format("{}.{}", where, key), depth, limits);
  return out;
}

// A tag's value: scalars, lists and dicts of them.
json::value value_of(const NodeProto& node, const std::string& where, std::size_t depth, const ParseLimits& limits) {
  if (depth > limits.max_json_depth) bad(where, fmt::format("nested deeper than {} levels", limits.max_json_depth));
  switch (node.content_case()) {
    case NodeProto::kText:
      return json::value(node.text());
    case NodeProto::kInteger:
      return json::value(node.integer());
    case NodeProto::kFloat:
      return json::value(node.float_());
    case NodeProto::kBoolean:
      return json::value(node.boolean());
    case NodeProto::kDict:
      return dict_of(node.dict(), where, depth + 1, limits);
    case NodeProto::kList:
    case NodeProto::kSet:
    case NodeProto::kTuple: {
      const auto& list = node.content_case() == NodeProto::kList  ? node.list()
                         : node.content_case() == NodeProto::kSet ? node.set()
                                                                  : node.tuple();
      json::array out;
      for (int i = 0; i < list.data_size(); ++i)
        out.push_back(value_of(list.data(i), fmt::format("{}[{}]", where, i), depth + 1, limits));
      return out;
    }
    case NodeProto::CONTENT_NOT_SET:
      return nullptr;
    default:
      wrong_kind(where, "text, a number, a boolean, a list or a dict", node);
  }
}

void write_value(NodeProto& node, const json::value& v) {
  switch (v.kind()) {
    case json::kind::string:
      node.set_text(std::string(v.get_string()));
      break;
    case json::kind::int64:
      if (v.get_int64() >= std::numeric_limits<std::int32_t>::min() &&
          v.get_int64() <= std::numeric_limits<std::int32_t>::max()) {
        node.set_integer(static_cast<std::int32_t>(v.get_int64()));
      } else {
        node.set_float_(static_cast<double>(v.get_int64()));
      }
      break;
    case json::kind::uint64:
      node.set_float_(static_cast<double>(v.get_uint64()));
      break;
    case json::kind::double_:
      node.set_float_(v.get_double());
      break;
    case json::kind::bool_:
      node.set_boolean(v.get_bool());
      break;
    case json::kind::array: {
      auto* list = node.mutable_list();
      for (const auto& item : v.get_array()) write_value(*list->add_data(), item);
      break;
    }
    case json::kind::object: {
      auto* dict = node.mutable_dict()->mutable_data();
      for (const auto& [key, item] : v.get_object()) write_value((*dict)[std::string(key)], item);
      break;
    }
    case json::kind::null:
      break;
  }
}

DocumentArray read_documents(const docarray::DocListProto& list, const std::string& where, const ParseLimits& limits) {
  DocumentArray docs;
  docs.reserve(static_cast<std::size_t>(list.docs_size()));
  for (int i = 0; i < list.docs_size(); ++i)
    docs.push_back(read_document(list.docs(i), fmt::format("{}[{}]", where, i), limits));
  return docs;
}

void read_field(Document& doc, DocumentField field, const NodeProto& node, const std::string& where,
                const ParseLimits& limits) {
  switch (field) {
    case DocumentField::id:
      doc.id = text_of(node, where);
      if (doc.id.empty()) doc.id = generate_id();
      break;
    case DocumentField::text:
      doc.text = text_of(node, where);
      break;
    case DocumentField::mime_type:
      doc.mime_type = text_of(node, where);
      break;
    case DocumentField::uri:
      doc.uri = text_of(node, where);
      break;
    case DocumentField::parent_id:
      doc.parent_id = text_of(node, where);
      break;
    case DocumentField::blob:
      if (node.content_case() != NodeProto::kBlob) wrong_kind(where, "bytes", node);
      doc.blob.assign(node.blob().begin(), node.blob().end());
      break;
    case DocumentField::tensor:
    case DocumentField::embedding: {
      if (node.content_case() != NodeProto::kNdarray) wrong_kind(where, "an ndarray", node);
      (field == DocumentField::tensor ? doc.tensor : doc.embedding) = read_ndarray(node.ndarray(), where);
      break;
    }
    case DocumentField::tags:
      if (node.content_case() != NodeProto::kDict) wrong_kind(where, "a dict", node);
      doc.tags = dict_of(node.dict(), where, 1, limits);
      break;
    case DocumentField::scores:
      if (node.content_case() != NodeProto::kDict) wrong_kind(where, "a dict of numbers", node);
      for (const auto& [name, score] : node.dict().data()) {
        const std::string at = fmt::format("{}.{}", where, name);
        const NodeProto* number = &score;
        if (score.content_case() == NodeProto::kDict) {  // docarray v1's NamedScore: {"value": number}
          const auto it = score.dict().data().find("value");
          if (it == score.dict().data().end()) bad(at, "expected a number or {\"value\": number}");
          number = &it->second;
        }
        if (number->content_case() == NodeProto::kFloat) {
          doc.scores[name] = static_cast<float>(number->float_());
        } else if (number->content_case() == NodeProto::kInteger) {
          doc.scores[name] = static_cast<float>(number->integer());
        } else {
          wrong_kind(at, "a number", *number);
        }
      }
      break;
    case DocumentField::chunks:
    case DocumentField::matches:
      if (node.content_case() != NodeProto::kDocArray) wrong_kind(where, "a document list", node);
      (field == DocumentField::chunks ? doc.chunks : doc.matches) = read_documents(node.doc_array(), where, limits);
      break;
  }
}

// A protobuf Struct's Value (a request parameter, a docarray < 0.30 document's tag) as JSON.
json::value struct_value(const google::protobuf::Value& v, const std::string& where, std::size_t depth,
                         const ParseLimits& limits) {
  if (depth > limits.max_json_depth) bad(where, fmt::format("nested deeper than {} levels", limits.max_json_depth));
  switch (v.kind_case()) {
    case google::protobuf::Value::kNumberValue:
      return json::value(v.number_value());
    case google::protobuf::Value::kStringValue:
      return json::value(v.string_value());
    case google::protobuf::Value::kBoolValue:
      return json::value(v.bool_value());
    case google::protobuf::Value::kStructValue: {
      json::object o;
      for (const auto& [k, item] : v.struct_value().fields()) o[k] = struct_value(item, where, depth + 1, limits);
      return o;
    }
    case google::protobuf::Value::kListValue: {
      json::array a;
      for (const auto& item : v.list_value().values()) a.push_back(struct_value(item, where, depth + 1, limits));
      return a;
    }
    default:
      return nullptr;
  }
}

// JSON as a protobuf Struct's Value.
void write_struct_value(google::protobuf::Value& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::string:
      out.set_string_value(std::string(v.get_string()));
      break;
    case json::kind::int64:
      out.set_number_value(static_cast<double>(v.get_int64()));
      break;
    case json::kind::uint64:
      out.set_number_value(static_cast<double>(v.get_uint64()));
      break;
    case json::kind::double_:
      out.set_number_value(v.get_double());
      break;
    case json::kind::bool_:
      out.set_bool_value(v.get_bool());
      break;
    case json::kind::array: {
      auto* list = out.mutable_list_value();
      for (const auto& item : v.get_array()) write_struct_value(*list->add_values(), item);
      break;
    }
    case json::kind::object: {
      auto* fields = out.mutable_struct_value()->mutable_fields();
      for (const auto& [key, item] : v.get_object()) write_struct_value((*fields)[std::string(key)], item);
      break;
    }
    case json::kind::null:
      out.set_null_value(google::protobuf::NULL_VALUE);
      break;
  }
}

void write_documents(docarray::DocListProto& out, const DocumentArray& docs) {
  out.mutable_docs()->Reserve(static_cast<int>(docs.size()));
  for (const Document& doc : docs) write_document(*out.add_docs(), doc);
}

void write_documents(docarray_v1::DocumentArrayProto& out, const DocumentArray& docs) {
  out.mutable_docs()->Reserve(static_cast<int>(docs.size()));
  for (const Document& doc : docs) write_document(*out.add_docs(), doc);
}

DocumentArray read_documents(const google::protobuf::RepeatedPtrField<docarray_v1::DocumentProto>& list,
                             const std::string& where, const ParseLimits& limits) {
  DocumentArray docs;
  docs.reserve(static_cast<std::size_t>(list.size()));
  for (int i = 0; i < list.size(); ++i)
    docs.push_back(read_document(list.Get(i), fmt::format("{}[{}]", where, i), limits));
  return docs;
}

at::Tensor read_ndarray(const docarray_v1::NdArrayProto& array, const std::string& where) {
  if (array.content_case() == docarray_v1::NdArrayProto::kSparse)
    bad(where, "a sparse ndarray is not read (send it dense)");
  return read_dense(array.dense(), where);
}

void write_ndarray(docarray_v1::NdArrayProto& out, const at::Tensor& value, bool as_float) {
  write_dense(*out.mutable_dense(), value, as_float);
  out.set_cls_name("numpy");
}

// The header and parameters of a request of either generation: the call without its documents.
template <class Proto>
Call call_of_header(Proto& request, const ParseLimits& limits) {
  Call call;
  jina::HeaderProto& header = *request.mutable_header();
  call.endpoint = header.has_exec_endpoint() && !header.exec_endpoint().empty() ? header.exec_endpoint() : "/";
  call.target = header.target_executor();
  if (header.request_id().empty()) header.set_request_id(generate_id());
  call.request_id = header.request_id();
  for (const auto& [key, value] : request.parameters().fields())
    call.parameters[key] = struct_value(value, "parameters", 1, limits);
  return call;
}

void refuse_too_many(int documents, const ParseLimits& limits) {
  if (static_cast<std::size_t>(documents) > limits.max_documents) {
    throw RefusedError(Refusal::TooLarge,
                       fmt::format("{} documents in one request; at most {} are taken (--max-documents)", documents,
                                   limits.max_documents));
  }
}

template <class Proto>
void write_answer_of(Proto& answer, const DocumentArray& docs) {
  answer.mutable_header()->set_target_executor("");
  answer.mutable_header()->mutable_status()->set_code(jina::StatusProto::SUCCESS);
  write_documents(*answer.mutable_data()->mutable_docs(), docs);
}

template <class Proto>
void write_failure_of(Proto& answer, const Response& response) {
  auto* header = answer.mutable_header();
  header->set_target_executor("");
  auto* status = header->mutable_status();
  status->set_code(jina::StatusProto::ERROR);
  status->set_description(fmt::format("executor '{}' failed: {}", response.error_executor, response.error));
  auto* exception = status->mutable_exception();
  exception->set_name("ExecutorError");
  exception->add_args(response.error);
  exception->set_executor(response.error_executor);
  write_documents(*answer.mutable_data()->mutable_docs(), response.docs);
}

}  // namespace

Document read_document(const docarray::DocProto& in, const std::string& where, const ParseLimits& limits) {
  Document doc;
  for (const auto& [name, node] : in.data()) {
    const std::optional<DocumentField> field = jina_field_named(name);
    // Fields flowline's documents lack are ignored, as Jina's TextDoc ignores them; unset ones stay unset.
    if (!field || node.content_case() == NodeProto::CONTENT_NOT_SET) continue;
    read_field(doc, *field, node, fmt::format("{}.{}", where, name), limits);
  }
  return doc;
}

void write_document(docarray::DocProto& out, const Document& doc) {
  auto& data = *out.mutable_data();
  for_each_document_field([&](DocumentField field, std::string_view, auto member) {
    const auto& value = doc.*member;
    if (field_is_empty(value) && !jina_always_written(field)) return;
    NodeProto& node = data[std::string(jina_name(field))];
    if (field_is_empty(value)) return;  // an empty node: None
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::string>) {
      node.set_text(value);
      if (field == DocumentField::id) node.set_type("id");
    } else if constexpr (std::is_same_v<T, Bytes>) {
      node.set_blob(value.data(), value.size());
    } else if constexpr (std::is_same_v<T, at::Tensor>) {
      write_ndarray(node, value, field == DocumentField::embedding);
    } else if constexpr (std::is_same_v<T, Tags>) {
      write_value(node, value);
    } else if constexpr (std::is_same_v<T, DocumentArray>) {
      write_documents(*node.mutable_doc_array(), value);
    } else {  // scores
      auto& dict = *node.mutable_dict()->mutable_data();
      for (const auto& [name, score] : value) dict[name].set_float_(score);
    }
  });
}

Document read_document(const docarray_v1::DocumentProto& in, const std::string& where, const ParseLimits& limits) {
  Document doc(Document::WithId{in.id().empty() ? generate_id() : in.id()});
  switch (in.content_case()) {
    case docarray_v1::DocumentProto::kText:
      doc.text = in.text();
      break;
    case docarray_v1::DocumentProto::kBlob:
      doc.blob.assign(in.blob().begin(), in.blob().end());
      break;
    case docarray_v1::DocumentProto::kTensor:
      doc.tensor = read_ndarray(in.tensor(), where + ".tensor");
      break;
    case docarray_v1::DocumentProto::CONTENT_NOT_SET:
      break;
  }
  doc.uri = in.uri();
  doc.mime_type = in.mime_type();
  doc.parent_id = in.parent_id();
  if (in.has_embedding()) doc.embedding = read_ndarray(in.embedding(), where + ".embedding");
  for (const auto& [key, value] : in.tags().fields())
    doc.tags[key] = struct_value(value, fmt::format("{}.tags.{}", where, key), 2, limits);
  for (const auto& [name, score] : in.scores()) doc.scores[name] = score.value();
  doc.chunks = read_documents(in.chunks(), where + ".chunks", limits);
  doc.matches = read_documents(in.matches(), where + ".matches", limits);
  return doc;
}

void write_document(docarray_v1::DocumentProto& out, const Document& doc) {
  out.set_id(doc.id);
  if (!doc.text.empty()) {
    out.set_text(doc.text);
  } else if (!doc.blob.empty()) {
    out.set_blob(doc.blob.data(), doc.blob.size());
  } else if (doc.tensor.defined()) {
    write_ndarray(*out.mutable_tensor(), doc.tensor, false);
  }
  if (!doc.uri.empty()) out.set_uri(doc.uri);
  if (!doc.mime_type.empty()) out.set_mime_type(doc.mime_type);
  if (!doc.parent_id.empty()) out.set_parent_id(doc.parent_id);
  if (doc.embedding.defined()) write_ndarray(*out.mutable_embedding(), doc.embedding, true);
  if (!doc.tags.empty()) {
    auto& fields = *out.mutable_tags()->mutable_fields();
    for (const auto& [key, value] : doc.tags) write_struct_value(fields[std::string(key)], value);
  }
  for (const auto& [name, score] : doc.scores) (*out.mutable_scores())[name].set_value(score);
  for (const Document& chunk : doc.chunks) write_document(*out.add_chunks(), chunk);
  for (const Document& match : doc.matches) write_document(*out.add_matches(), match);
}

Call call_from_proto(jina::DataRequestProto& request, const ParseLimits& limits) {
  Call call = call_of_header(request, limits);
  const auto& data = request.data();
  docarray::DocListProto decoded;
  const docarray::DocListProto* list = &data.docs();
  if (data.documents_case() == jina::DataRequestProto::DataContentProto::kDocsBytes) {
    if (!decoded.ParseFromString(data.docs_bytes())) bad("data.docs_bytes", "expected a serialized DocListProto");
    list = &decoded;
  }
  refuse_too_many(list->docs_size(), limits);
  call.docs = read_documents(*list, "docs", limits);
  request.clear_data();  // the request becomes its answer's template: header and parameters stay
  return call;
}

Call call_from_proto(jina_v1::DataRequestProto& request, const ParseLimits& limits) {
  Call call = call_of_header(request, limits);
  const auto& data = request.data();
  if (data.documents_case() == jina_v1::DataRequestProto::DataContentProto::kDocsBytes)
    bad("data.docs_bytes",
        "docarray < 0.30's document bytes are not read (not protobuf): send them as data.docs, "
        "as Jina's client does");
  refuse_too_many(data.docs().docs_size(), limits);
  call.docs = read_documents(data.docs().docs(), "docs", limits);
  request.clear_data();
  return call;
}

Call call_from_proto(JinaRequest& request, const ParseLimits& limits) {
  return request.docarray_v1 ? call_from_proto(request.v1, limits) : call_from_proto(request.v2, limits);
}

void write_answer(jina::DataRequestProto& answer, const DocumentArray& docs) { write_answer_of(answer, docs); }
void write_answer(jina_v1::DataRequestProto& answer, const DocumentArray& docs) { write_answer_of(answer, docs); }
void write_answer(JinaRequest& answer, const DocumentArray& docs) {
  answer.docarray_v1 ? write_answer(answer.v1, docs) : write_answer(answer.v2, docs);
}

void write_failure(jina::DataRequestProto& answer, const Response& response) { write_failure_of(answer, response); }
void write_failure(jina_v1::DataRequestProto& answer, const Response& response) { write_failure_of(answer, response); }
void write_failure(JinaRequest& answer, const Response& response) {
  answer.docarray_v1 ? write_failure(answer.v1, response) : write_failure(answer.v2, response);
}

}  // namespace flowline::gateway
