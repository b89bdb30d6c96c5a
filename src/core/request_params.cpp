// Request parameters: which declarations apply to an endpoint, and the check every request passes before an
// executor's handler sees it (flowline/params.hpp).
#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/params.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

namespace flowline {

namespace {
// What a request parameter must be, in a client's words: "an integer from 1", "true or false".
std::string expected_text(const ParamSpec& spec) {
  std::string range;
  const auto bound = [](double v) { return fmt::format("{}", v); };
  if (spec.minimum && spec.maximum) range = fmt::format(" from {} to {}", bound(*spec.minimum), bound(*spec.maximum));
  if (spec.minimum && !spec.maximum) range = fmt::format(" from {}", bound(*spec.minimum));
  if (!spec.minimum && spec.maximum) range = fmt::format(" up to {}", bound(*spec.maximum));
  switch (spec.type) {
    case ParamType::Bool:
      return "true or false";
    case ParamType::Int:
    case ParamType::IntOrAuto:
      return "an integer" + range;
    case ParamType::Double:
      return "a number" + range;
    case ParamType::String:
    case ParamType::Path:
      return "a string";
    case ParamType::StringList:
      return "a list of strings";
    case ParamType::Json:
      return "a JSON value";
  }
  return "?";
}

// A value as the client sent it: 5.5, "5", true, a list.
std::string sent_text(const boost::json::value& v) {
  if (v.is_double()) return fmt::format("{}", v.get_double());
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return boost::json::serialize(v);
}
}  // namespace

std::vector<const ParamSpec*> request_params_of(const std::vector<EndpointParams>& declared,
                                                std::string_view endpoint) {
  std::vector<const ParamSpec*> out;
  for (const bool own : {true, false}) {
    for (const EndpointParams& e : declared) {
      const bool matches =
          own ? e.endpoint == endpoint && e.endpoint != kDefaultEndpoint : e.endpoint == kDefaultEndpoint;
      if (!matches) continue;
      for (const ParamSpec& p : e.params) out.push_back(&p);
    }
  }
  return out;
}

std::string describe_request_param(const ParamSpec& spec) {
  std::string out = fmt::format("{} ({}", spec.name, describe_type(spec));
  if (spec.required) {
    out += ", required";
  } else if (!spec.default_value.is_null()) {
    const boost::json::value& d = spec.default_value;
    out += fmt::format(", default {}", d.is_string() ? std::string(d.get_string()) : boost::json::serialize(d));
  }
  out += ")";
  if (!spec.help.empty()) out += ": " + spec.help;
  return out;
}

CheckedRequestParams check_request_params(const std::vector<EndpointParams>& declared, std::string_view executor,
                                          std::string_view endpoint, const boost::json::object& parameters) {
  CheckedRequestParams out;
  out.parameters = parameters;
  const std::vector<const ParamSpec*> specs = request_params_of(declared, endpoint);
  boost::json::object typed;
  for (const ParamSpec* spec : specs) {
    auto it = out.parameters.find(spec->name);
    if (it == out.parameters.end() || it->value().is_null()) {
      if (spec->required) {
        throw RequestError(fmt::format("parameter '{}' is required: expected {} ({} on {})", spec->name,
                                       expected_text(*spec), executor, endpoint));
      }
      if (!spec->default_value.is_null()) typed[spec->name] = spec->default_value;
      continue;
    }
    const boost::json::value sent = it->value();
    if (auto problem = check_param_value(*spec, it->value())) {
      // A choice's own message names the choices (and the likely one); the others say what was expected.
      const std::string what =
          spec->choices.empty() ? fmt::format("expected {}, got {}", expected_text(*spec), sent_text(sent)) : *problem;
      throw RequestError(fmt::format("parameter '{}': {} ({} on {})", spec->name, what, executor, endpoint));
    }
    typed[spec->name] = it->value();
  }
  for (const auto& [name, value] : out.parameters) {
    bool known = false;
    for (const ParamSpec* spec : specs) known = known || spec->name == name;
    if (!known) out.unknown.emplace_back(name);
  }
  out.declared = Params(fmt::format("{} (request parameters of {})", executor, endpoint), std::move(typed));
  return out;
}

}  // namespace flowline
