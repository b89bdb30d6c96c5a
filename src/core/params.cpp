#include "flowline/params.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <limits>

namespace flowline {

std::string_view to_string(ParamType type) noexcept {
  switch (type) {
    case ParamType::Bool: return "bool";
    case ParamType::Int: return "int";
    case ParamType::Double: return "double";
    case ParamType::String: return "string";
    case ParamType::StringList: return "list of strings";
    case ParamType::Json: return "any";
    case ParamType::IntOrAuto: return "int or auto";
  }
  return "?";
}

ParamSpec ParamSpec::optional(std::string name, ParamType type, boost::json::value default_value,
                              std::string help) {
  return ParamSpec{std::move(name), type, false, std::move(default_value), std::move(help)};
}

ParamSpec ParamSpec::required_param(std::string name, ParamType type, std::string help) {
  return ParamSpec{std::move(name), type, true, nullptr, std::move(help)};
}

namespace {
std::string describe(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null: return "null";
    case boost::json::kind::bool_: return fmt::format("bool {}", v.get_bool());
    case boost::json::kind::int64: return fmt::format("int {}", v.get_int64());
    case boost::json::kind::uint64: return fmt::format("int {}", v.get_uint64());
    case boost::json::kind::double_: return fmt::format("double {}", v.get_double());
    case boost::json::kind::string: return fmt::format("string \"{}\"", std::string_view(v.get_string()));
    case boost::json::kind::array: return "a list";
    case boost::json::kind::object: return "a map";
  }
  return "?";
}
}  // namespace

std::optional<std::string> check_param_value(ParamType type, boost::json::value& value) {
  auto mismatch = [&] { return fmt::format("expected {}, got {}", to_string(type), describe(value)); };
  switch (type) {
    case ParamType::Bool:
      if (!value.is_bool()) return mismatch();
      return std::nullopt;
    case ParamType::Int:
      if (value.is_uint64() && value.get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return fmt::format("expected int, got {} (too large)", value.get_uint64());
      }
      if (value.is_uint64()) value = static_cast<std::int64_t>(value.get_uint64());
      if (!value.is_int64()) return mismatch();
      return std::nullopt;
    case ParamType::Double:
      if (value.is_int64()) value = static_cast<double>(value.get_int64());
      if (value.is_uint64()) value = static_cast<double>(value.get_uint64());
      if (!value.is_double()) return mismatch();
      return std::nullopt;
    case ParamType::String:
      if (!value.is_string()) return mismatch();
      return std::nullopt;
    case ParamType::StringList:
      if (!value.is_array()) return mismatch();
      for (std::size_t i = 0; i < value.get_array().size(); ++i) {
        if (!value.get_array()[i].is_string()) {
          return fmt::format("expected list of strings, item {} is {}", i, describe(value.get_array()[i]));
        }
      }
      return std::nullopt;
    case ParamType::IntOrAuto:
      if (value.is_string() && value.get_string() == "auto") return std::nullopt;
      if (value.is_uint64() && value.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        value = static_cast<std::int64_t>(value.get_uint64());
      }
      if (!value.is_int64()) return mismatch();
      return std::nullopt;
    case ParamType::Json:
      return std::nullopt;
  }
  return mismatch();
}

Params::Params(std::string owner, boost::json::object values, std::map<std::string, SourceLocation> locations)
    : owner_(std::move(owner)), values_(std::move(values)), locations_(locations.begin(), locations.end()) {}

bool Params::contains(std::string_view name) const { return values_.contains(name); }

SourceLocation Params::location_of(std::string_view name) const {
  auto it = locations_.find(name);
  return it == locations_.end() ? SourceLocation{} : it->second;
}

const boost::json::value& Params::require(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw ExecutorError(owner_, fmt::format("parameter '{}' is not set and has no default (declare it in the "
                                            "executor's spec)", name));
  }
  return it->value();
}

void Params::type_error(std::string_view name, std::string_view expected) const {
  const std::string at = location_of(name).to_string();
  throw ExecutorError(owner_, fmt::format("parameter '{}': expected {}, got {}{}", name, expected,
                                          describe(values_.at(name)), at.empty() ? "" : " (" + at + ")"));
}

template <>
bool Params::get<bool>(std::string_view name) const {
  const auto& v = require(name);
  if (!v.is_bool()) type_error(name, "bool");
  return v.get_bool();
}

template <>
std::int64_t Params::get<std::int64_t>(std::string_view name) const {
  const auto& v = require(name);
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return static_cast<std::int64_t>(v.get_uint64());
  }
  type_error(name, "int");
}

template <>
int Params::get<int>(std::string_view name) const {
  const std::int64_t v = get<std::int64_t>(name);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) type_error(name, "a 32-bit int");
  return static_cast<int>(v);
}

template <>
std::size_t Params::get<std::size_t>(std::string_view name) const {
  const std::int64_t v = get<std::int64_t>(name);
  if (v < 0) type_error(name, "a non-negative int");
  return static_cast<std::size_t>(v);
}

template <>
double Params::get<double>(std::string_view name) const {
  const auto& v = require(name);
  if (v.is_double()) return v.get_double();
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  type_error(name, "double");
}

template <>
float Params::get<float>(std::string_view name) const {
  return static_cast<float>(get<double>(name));
}

template <>
std::string Params::get<std::string>(std::string_view name) const {
  const auto& v = require(name);
  if (!v.is_string()) type_error(name, "string");
  return std::string(v.get_string());
}

template <>
std::vector<std::string> Params::get<std::vector<std::string>>(std::string_view name) const {
  const auto& v = require(name);
  if (!v.is_array()) type_error(name, "list of strings");
  std::vector<std::string> out;
  for (const auto& item : v.get_array()) {
    if (!item.is_string()) type_error(name, "list of strings");
    out.emplace_back(item.get_string());
  }
  return out;
}

template <>
boost::json::value Params::get<boost::json::value>(std::string_view name) const {
  return require(name);
}

}  // namespace flowline
