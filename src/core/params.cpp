// Executor parameter declarations (types, choices, bounds), their checking, and typed reading.
#include "flowline/params.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace flowline {

std::string_view to_string(ParamType type) noexcept {
  switch (type) {
    case ParamType::Bool:
      return "bool";
    case ParamType::Int:
      return "int";
    case ParamType::Double:
      return "double";
    case ParamType::String:
      return "string";
    case ParamType::StringList:
      return "list of strings";
    case ParamType::Json:
      return "any";
    case ParamType::IntOrAuto:
      return "int or auto";
    case ParamType::Path:
      return "path";
  }
  return "?";
}

ParamSpec ParamSpec::optional(std::string name, ParamType type, boost::json::value default_value, std::string help) {
  return ParamSpec{std::move(name), type, false, std::move(default_value), std::move(help)};
}

ParamSpec ParamSpec::required_param(std::string name, ParamType type, std::string help) {
  return ParamSpec{std::move(name), type, true, nullptr, std::move(help)};
}

ParamSpec ParamSpec::choice(std::string name, std::vector<std::string> choices, std::string default_value,
                            std::string help) {
  ParamSpec spec = optional(std::move(name), ParamType::String, boost::json::value(default_value), std::move(help));
  for (auto& c : choices) spec.choices.emplace_back(c);
  return spec;
}

ParamSpec ParamSpec::choice_list(std::string name, std::vector<std::string> choices,
                                 std::vector<std::string> default_value, std::string help) {
  boost::json::array defaults;
  for (auto& d : default_value) defaults.emplace_back(d);
  ParamSpec spec = optional(std::move(name), ParamType::StringList, std::move(defaults), std::move(help));
  for (auto& c : choices) spec.choices.emplace_back(c);
  return spec;
}

namespace {
// A choice or a value as users write it: paragraph, true, 3 (no quotes around text).
std::string plain(const boost::json::value& v) {
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_double()) return fmt::format("{}", v.get_double());
  return boost::json::serialize(v);
}

std::string choice_list_text(const std::vector<boost::json::value>& choices) {
  std::string out;
  for (const auto& c : choices) out += (out.empty() ? "" : ", ") + plain(c);
  return out;
}

// " (did you mean 'text'?)" when a text value is a likely typo of a choice, else "".
std::string did_you_mean(const std::vector<boost::json::value>& choices, const boost::json::value& value) {
  if (!value.is_string()) return {};
  std::vector<std::string> names;
  for (const auto& c : choices) names.push_back(plain(c));
  const std::string match = closest_match(std::string(value.get_string()), names);
  return match.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", match);
}

// "≥ 1", "≥ 0 and ≤ 1", "" without bounds.
std::string bounds_text(const ParamSpec& spec) {
  std::string out;
  if (spec.minimum) out += fmt::format("≥ {}", *spec.minimum);
  if (spec.maximum) out += fmt::format("{}≤ {}", out.empty() ? "" : " and ", *spec.maximum);
  return out;
}

std::string describe(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null:
      return "null";
    case boost::json::kind::bool_:
      return fmt::format("bool {}", v.get_bool());
    case boost::json::kind::int64:
      return fmt::format("int {}", v.get_int64());
    case boost::json::kind::uint64:
      return fmt::format("int {}", v.get_uint64());
    case boost::json::kind::double_:
      return fmt::format("double {}", v.get_double());
    case boost::json::kind::string:
      return fmt::format("string \"{}\"", std::string_view(v.get_string()));
    case boost::json::kind::array:
      return "a list";
    case boost::json::kind::object:
      return "a map";
  }
  return "?";
}
// The one number reader of integers: an int64, a uint64 within int64, or a double that is a whole number
// within ±2^53 (where every integer is exact) becomes an int64 in place. Anything else is not an integer.
bool read_integer(boost::json::value& value) {
  if (value.is_int64()) return true;
  if (value.is_uint64()) {
    if (value.get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    value = static_cast<std::int64_t>(value.get_uint64());
    return true;
  }
  if (!value.is_double()) return false;
  const double d = value.get_double();
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (!std::isfinite(d) || std::trunc(d) != d || d > kExact || d < -kExact) return false;
  value = static_cast<std::int64_t>(d);
  return true;
}
}  // namespace

std::optional<std::string> check_param_value(ParamType type, boost::json::value& value) {
  auto mismatch = [&] { return fmt::format("expected {}, got {}", to_string(type), describe(value)); };
  switch (type) {
    case ParamType::Bool:
      if (!value.is_bool()) return mismatch();
      return std::nullopt;
    case ParamType::Int:
      if (value.is_uint64() &&
          value.get_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return fmt::format("expected int, got {} (too large)", value.get_uint64());
      }
      if (!read_integer(value)) return mismatch();
      return std::nullopt;
    case ParamType::Double:
      if (value.is_int64()) value = static_cast<double>(value.get_int64());
      if (value.is_uint64()) value = static_cast<double>(value.get_uint64());
      if (!value.is_double()) return mismatch();
      return std::nullopt;
    case ParamType::String:
    case ParamType::Path:
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
      if (!read_integer(value)) return mismatch();
      return std::nullopt;
    case ParamType::Json:
      return std::nullopt;
  }
  return mismatch();
}

std::string describe_type(const ParamSpec& spec) {
  const std::string bounds = bounds_text(spec);
  if (spec.type == ParamType::IntOrAuto && !bounds.empty()) return fmt::format("int {} or auto", bounds);
  std::string out(to_string(spec.type));
  if (!spec.choices.empty()) {
    const std::string choices = choice_list_text(spec.choices);
    if (spec.type == ParamType::StringList) return fmt::format("list, each one of {}", choices);
    return spec.type == ParamType::Json ? fmt::format("one of {}", choices)
                                        : fmt::format("{}: one of {}", out, choices);
  }
  return bounds.empty() ? out : out + " " + bounds;
}

std::optional<std::string> check_param_value(const ParamSpec& spec, boost::json::value& value) {
  if (auto problem = check_param_value(spec.type, value)) return problem;
  if (!spec.choices.empty()) {
    auto allowed = [&](const boost::json::value& v) {
      return std::find(spec.choices.begin(), spec.choices.end(), v) != spec.choices.end();
    };
    if (value.is_array()) {
      for (const auto& item : value.get_array()) {
        if (!allowed(item)) {
          return fmt::format("expected each item one of {}, got '{}'{}", choice_list_text(spec.choices), plain(item),
                             did_you_mean(spec.choices, item));
        }
      }
    } else if (!allowed(value)) {
      return fmt::format("expected one of {}, got '{}'{}", choice_list_text(spec.choices), plain(value),
                         did_you_mean(spec.choices, value));
    }
  }
  if ((spec.minimum || spec.maximum) && value.is_number()) {
    const double v = value.to_number<double>();
    if ((spec.minimum && v < *spec.minimum) || (spec.maximum && v > *spec.maximum)) {
      const bool integer = spec.type == ParamType::Int || spec.type == ParamType::IntOrAuto;
      return fmt::format("expected {} {}{}, got {}", integer ? "an integer" : "a number", bounds_text(spec),
                         spec.type == ParamType::IntOrAuto ? " or auto" : "", plain(value));
    }
  }
  return std::nullopt;
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
                                            "executor's spec)",
                                            name));
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
