// Reading tokenizer.json's fields with errors that name the file and the JSON path (pipeline.hpp): typed
// fields, and integers as Python tokenizers reads them (ids u32, counts usize), never a wrapped value.
#include "builders.hpp"

#include "../model_file.hpp"

#include <fmt/format.h>

#include <limits>

namespace flowline::models::tokenizers {

namespace json = boost::json;

const json::value* field(const json::object& o, std::string_view key) {
  const auto it = o.find(key);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

std::string type_of(const json::object& o, const Origin& origin) { return text_field(o, "type", origin); }

bool flag(const json::object& o, std::string_view key, bool fallback, const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr) return fallback;
  if (!v->is_bool()) refuse(origin, fmt::format("'{}' must be true or false", key));
  return v->as_bool();
}

std::string text_field(const json::object& o, std::string_view key, const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr || !v->is_string()) refuse(origin, fmt::format("'{}' must be a string", key));
  return std::string(v->as_string());
}

std::uint64_t count_value(const json::value& v, std::uint64_t max, const Origin& origin, std::string_view what) {
  if (v.is_uint64() && v.get_uint64() <= max) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0 && static_cast<std::uint64_t>(v.get_int64()) <= max)
    return static_cast<std::uint64_t>(v.get_int64());
  refuse(origin, fmt::format("expected {} in 0..{}, got {}", what, max, json_excerpt(v)));
}

std::int32_t id_value(const json::value& v, const Origin& origin, std::string_view what) {
  const std::uint64_t id = count_value(v, kMaxTokenizersId, origin, what);
  if (id > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()))
    refuse(origin,
           fmt::format("{} is larger than flowline runs (at most {})", id, std::numeric_limits<std::int32_t>::max()));
  return static_cast<std::int32_t>(id);
}

std::uint64_t count_field(const json::object& o, std::string_view key, std::uint64_t fallback, std::uint64_t max,
                          const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr) return fallback;
  return count_value(*v, max, {origin.file, origin.at(fmt::format(".{}", key))}, "an integer");
}

const json::object& object_of(const json::value& v, const Origin& origin) {
  if (!v.is_object()) refuse(origin, "expected an object");
  return v.as_object();
}

Vocabulary read_vocab_object(const json::object& o, const Origin& origin) {
  const json::value* v = field(o, "vocab");
  if (v == nullptr || !v->is_object()) refuse(origin, "'vocab' must be an object of token -> id");
  Vocabulary vocab;
  vocab.reserve(v->as_object().size());
  for (const auto& [token, id] : v->as_object()) {
    std::string key = json::serialize(json::value(token));
    if (key.size() > 40) key = key.substr(0, 37) + "...";
    vocab.insert_or_assign(std::string(token), id_value(id, {origin.file, origin.at(".vocab[" + key + "]")}));
  }
  return vocab;
}

}  // namespace flowline::models::tokenizers
