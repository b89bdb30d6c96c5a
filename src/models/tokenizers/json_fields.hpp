// Reading tokenizer.json's fields for the components built outside components.cpp (bpe.cpp,
// byte_level.cpp): each error names the file and the JSON path through refuse(). Called while a Tokenizer
// is built, on the building thread; the values returned point into the caller's JSON object.
#pragma once

#include "pipeline.hpp"

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace flowline::models::tokenizers::fields {

// The value of `key`, or null when it is absent or JSON null.
inline const boost::json::value* find(const boost::json::object& o, std::string_view key) {
  const auto it = o.find(key);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

inline bool flag(const boost::json::object& o, std::string_view key, bool fallback, const Origin& origin) {
  const boost::json::value* v = find(o, key);
  if (v == nullptr) return fallback;
  if (!v->is_bool()) refuse(origin, fmt::format("'{}' must be true or false", key));
  return v->as_bool();
}

inline std::string text(const boost::json::object& o, std::string_view key, const Origin& origin) {
  const boost::json::value* v = find(o, key);
  if (v == nullptr || !v->is_string()) refuse(origin, fmt::format("'{}' must be a string", key));
  return std::string(v->as_string());
}

// A string field that may be null or absent: empty then.
inline std::string optional_text(const boost::json::object& o, std::string_view key, const Origin& origin) {
  return find(o, key) == nullptr ? std::string() : text(o, key, origin);
}

}  // namespace flowline::models::tokenizers::fields
