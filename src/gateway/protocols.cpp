// The gateway's request and response bodies shared by every API, and Jina's (protocols.hpp).
#include "protocols.hpp"

#include "flowline/images.hpp"
#include "flowline/io.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flowline::gateway {

namespace json = boost::json;

HttpError plain_error(int status, std::string_view type, const std::string& message) {
  json::object error{{"message", message}, {"type", type}, {"code", status}};
  return HttpError(status, json::serialize(json::object{{"error", std::move(error)}}), message);
}

HttpError jina_validation_error(std::string_view type, const json::array& loc, const std::string& message,
                                const json::value& input) {
  json::object item{{"type", type}, {"loc", loc}, {"msg", message}, {"input", input}};
  return HttpError(422, json::serialize(json::object{{"detail", json::array{std::move(item)}}}), message);
}

// Where `v` holds a number beyond a double's range (parsed as an infinity, which JSON cannot write back: an
// answer echoing it would not be JSON), as Jina's loc path (appended to `loc`); false when nowhere. Depth is
// bounded by max_json_depth.
static bool find_infinity(const json::value& v, json::array& loc) {
  if (v.is_double()) return !std::isfinite(v.get_double());
  if (v.is_array()) {
    const json::array& items = v.get_array();
    for (std::size_t i = 0; i < items.size(); ++i) {
      loc.emplace_back(i);
      if (find_infinity(items[i], loc)) return true;
      loc.pop_back();
    }
  } else if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      loc.emplace_back(kv.key());
      if (find_infinity(kv.value(), loc)) return true;
      loc.pop_back();
    }
  }
  return false;
}

// "data[0].embedding[1]" for the loc ["body", "data", 0, "embedding", 1].
static std::string loc_text(const json::array& loc) {
  std::string out;
  for (std::size_t i = 1; i < loc.size(); ++i) {
    if (loc[i].is_string()) {
      if (!out.empty()) out += '.';
      out += loc[i].get_string();
    } else {
      out += fmt::format("[{}]", json::serialize(loc[i]));
    }
  }
  return out;
}

json::value parse_body(std::string_view body, const ParseLimits& limits, bool jina) {
  json::parse_options options;
  options.max_depth = limits.max_json_depth;
  json::stream_parser parser({}, options);
  boost::system::error_code ec;
  const std::size_t used = parser.write_some(body.data(), body.size(), ec);
  if (!ec) parser.finish(ec);
  if (!ec) {
    json::value v = parser.release();
    json::array loc{"body"};
    if (!find_infinity(v, loc)) return v;
    const std::string message =
        fmt::format("{}: a number beyond the range of a double (JSON has no infinity)", loc_text(loc));
    if (jina) throw jina_validation_error("json_invalid", loc, message);
    throw plain_error(400, "invalid_request_error", message);
  }
  const std::size_t at = std::min(used, body.size());
  std::string message;
  if (ec == json::error::too_deep) {
    message = fmt::format("JSON nested deeper than {} levels at byte {}", limits.max_json_depth, at);
    throw plain_error(400, "invalid_request_error", message);
  }
  if (body.empty()) {
    message = "the request body is empty: expected a JSON object";
  } else {
    message = fmt::format("invalid JSON at byte {}: {}", at, ec.message());
  }
  if (jina) throw jina_validation_error("json_invalid", json::array{"body", at}, message);
  throw plain_error(400, "invalid_request_error", message);
}

const json::value* field(const json::object& object, std::string_view name) {
  const auto it = object.find(name);
  return it == object.end() || it->value().is_null() ? nullptr : &it->value();
}

void check_count(std::size_t n, const ParseLimits& limits, std::string_view what) {
  if (n > limits.max_documents) {
    throw plain_error(
        413, "request_too_large",
        fmt::format("{} {} in one request; the limit is {} (--max-documents)", n, what, limits.max_documents));
  }
}

namespace {

std::string string_field(const json::object& o, std::string_view name, const json::array& loc_prefix) {
  const json::value* v = field(o, name);
  if (!v) return {};
  if (!v->is_string()) {
    json::array loc = loc_prefix;
    loc.emplace_back(name);
    throw jina_validation_error("string_type", loc, fmt::format("{}: expected a string", name), *v);
  }
  return std::string(v->get_string());
}

void append_jina_header(std::string& out, const Call& call) {
  out += "\"header\":{\"request_id\":";
  append_json_text(out, call.request_id);
  out += ",\"target_executor\":\"\"";
}

}  // namespace

at::Tensor float_row(const at::Tensor& embedding) {
  at::Tensor row = embedding;
  if (!row.device().is_cpu()) row = row.to(at::kCPU);
  if (row.scalar_type() != at::kFloat) row = row.to(at::kFloat);
  return row.contiguous().reshape({-1});
}

void append_float_embedding(std::string& out, const at::Tensor& embedding) {
  const at::Tensor row = float_row(embedding);
  append_json_floats(out, row.data_ptr<float>(), static_cast<std::size_t>(row.numel()));
}

// Texts from OpenAI's "input" or TEI's "inputs": a string or a list of strings.
DocumentArray text_documents(const json::value* v, std::string_view name, const ParseLimits& limits) {
  DocumentArray docs;
  if (!v)
    throw plain_error(400, "invalid_request_error",
                      fmt::format("'{}' is missing: expected a string or a list of strings", name));
  if (v->is_string()) {
    docs.push_back(Document(std::string(v->get_string())));
    return docs;
  }
  if (!v->is_array()) {
    throw plain_error(400, "invalid_request_error", fmt::format("'{}': expected a string or a list of strings", name));
  }
  const json::array& items = v->get_array();
  check_count(items.size(), limits, "inputs");
  if (items.empty()) throw plain_error(400, "invalid_request_error", fmt::format("'{}' is an empty list", name));
  docs.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      throw plain_error(400, "invalid_request_error",
                        fmt::format("'{}[{}]': expected a string{}", name, i,
                                    items[i].is_number() || items[i].is_array()
                                        ? " (token ids are not accepted: send text, flowline tokenizes it)"
                                        : ""));
    }
    docs.push_back(Document(std::string(items[i].get_string())));
  }
  return docs;
}

std::vector<std::string> ids_of(const DocumentArray& docs) {
  std::vector<std::string> ids;
  ids.reserve(docs.size());
  for (const auto& doc : docs) ids.push_back(doc.id);
  return ids;
}

// The flow's answer in input order, matched by id; HttpError 500 naming the inputs without a document.
std::vector<const Document*> by_input(const std::vector<std::string>& ids, const DocumentArray& docs) {
  std::vector<const Document*> out(ids.size(), nullptr);
  bool in_order = docs.size() == ids.size();
  for (std::size_t i = 0; in_order && i < ids.size(); ++i) {
    in_order = docs[i].id == ids[i];
    out[i] = &docs[i];
  }
  if (in_order) return out;
  std::unordered_map<std::string_view, const Document*> answered;
  for (const auto& doc : docs) answered.emplace(doc.id, &doc);
  std::vector<std::size_t> missing;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto it = answered.find(ids[i]);
    out[i] = it == answered.end() ? nullptr : it->second;
    if (!out[i]) missing.push_back(i);
  }
  if (missing.empty()) return out;
  const std::size_t shown = std::min<std::size_t>(missing.size(), 20);
  throw plain_error(500, "server_error",
                    fmt::format("the flow answered {} of {} inputs: no document came back for input{} {}{} (an "
                                "executor dropped or replaced them); this route answers each input at its index, "
                                "so it cannot answer",
                                ids.size() - missing.size(), ids.size(), missing.size() == 1 ? "" : "s",
                                fmt::join(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                                missing.size() > shown ? fmt::format(" and {} more", missing.size() - shown) : ""));
}

const json::object& body_object(const json::value& body) {
  if (!body.is_object()) throw plain_error(400, "invalid_request_error", "the request body must be a JSON object");
  return body.get_object();
}

Call parse_jina(const json::value& body, std::string endpoint, const ParseLimits& limits) {
  if (!body.is_object()) {
    throw jina_validation_error("model_attributes_type", json::array{"body"}, "the request body must be a JSON object",
                                body);
  }
  const json::object& o = body.get_object();
  Call call;
  const bool named_in_body = endpoint.empty();  // /post
  if (named_in_body) {
    endpoint = string_field(o, "execEndpoint", json::array{"body"});
    if (endpoint.empty()) endpoint = string_field(o, "exec_endpoint", json::array{"body"});
    if (endpoint.empty()) endpoint = "/";
    if (endpoint.front() != '/') endpoint.insert(endpoint.begin(), '/');
  }
  call.endpoint = std::move(endpoint);
  const json::value* data = field(o, "data");
  if (!data) {
    throw jina_validation_error("missing", json::array{"body", "data"},
                                "'data' is missing: expected a list of documents", body);
  }
  call.names = jina_names_of(*data);
  if (data->is_array()) {
    const json::array& items = data->get_array();
    check_count(items.size(), limits, "documents");
    call.docs.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) call.docs.push_back(jina_document(items[i], i));
  } else if (data->is_object()) {
    call.docs.push_back(jina_document(*data, 0));
  } else {
    throw jina_validation_error("list_type", json::array{"body", "data"},
                                "'data': expected a list of documents or one document", *data);
  }
  if (const json::value* parameters = field(o, "parameters")) {
    if (!parameters->is_object()) {
      throw jina_validation_error("dict_type", json::array{"body", "parameters"}, "'parameters': expected an object",
                                  *parameters);
    }
    call.parameters = parameters->get_object();
  }
  call.target = string_field(o, "targetExecutor", json::array{"body"});
  if (call.target.empty()) call.target = string_field(o, "target_executor", json::array{"body"});
  if (const json::value* header = field(o, "header")) {
    if (!header->is_object()) {
      throw jina_validation_error("model_attributes_type", json::array{"body", "header"},
                                  "'header': expected an object", *header);
    }
    const json::array loc{"body", "header"};
    call.request_id = string_field(header->get_object(), "request_id", loc);
    // Jina's client names the endpoint in the header too (and never as execEndpoint).
    if (named_in_body && call.endpoint == "/") {
      std::string named = string_field(header->get_object(), "exec_endpoint", loc);
      if (!named.empty() && named.front() != '/') named.insert(named.begin(), '/');
      if (!named.empty()) call.endpoint = std::move(named);
    }
    const std::string target = string_field(header->get_object(), "target_executor", loc);
    if (!target.empty()) call.target = target;
  }
  if (call.request_id.empty()) call.request_id = generate_id();
  return call;
}

std::string jina_response(const Call& call, const DocumentArray& docs) {
  std::string out;
  std::size_t expected = 256;  // room for the answer at once: no regrowth (and copy) of a large string
  for (const Document& doc : docs) expected += jina_size_hint(doc);
  out.reserve(expected);
  out += "{\"data\":[";
  bool first = true;
  for (const Document& doc : docs) {
    if (!first) out += ',';
    first = false;
    append_jina_document(out, doc, call.names);
  }
  out += "],\"parameters\":";
  out += json::serialize(call.parameters);
  out += ',';
  append_jina_header(out, call);
  out += "}}";
  return out;
}

std::string jina_failure(const Call& call, const Response& response) {
  json::object exception{{"name", "ExecutorError"},
                         {"args", json::array{response.error}},
                         {"stacks", json::array{}},
                         {"executor", response.error_executor}};
  json::object status{{"code", 1}, {"description", response.error}, {"exception", std::move(exception)}};
  json::object header{{"request_id", call.request_id}, {"target_executor", ""}, {"status", std::move(status)}};
  return json::serialize(
      json::object{{"detail", fmt::format("executor '{}' failed: {}", response.error_executor, response.error)},
                   {"header", std::move(header)}});
}

}  // namespace flowline::gateway
