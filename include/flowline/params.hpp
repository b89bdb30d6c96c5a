// flowline/params.hpp — declared, typed executor parameters (the YAML `with:` block).
//
// An executor declares its parameters in its ExecutorSpec (flowline/executor.hpp) as ParamSpecs. A flow is
// checked against those declarations before any executor is constructed: unknown names, missing required
// parameters, wrong types, values outside a declared choice list or outside numeric bounds are config
// errors with file:line:column, reported by `flowline validate`; the executor need not re-check them. A
// `Path` parameter written in a flow file is resolved against the flow file's folder at load time (a flow
// built in code keeps it relative to the current directory). The executor then reads its values
// with Params::get<T>(name), which can only fail for a parameter the executor did not declare or reads as
// another type — a programming error, reported as flowline::ExecutorError naming executor and parameter.
//
// Request parameters (what a client sends with one request: Jina's `parameters`, or what a gateway route makes
// of its body) are declared the same way, per endpoint (EndpointParams, given to the Registry beside the
// spec), and checked by the core before the handler runs (check_request_params): the handler reads typed
// values through RequestInfo::param<T>() (flowline/executor.hpp).
//
// Params is immutable once built and safe to read from several threads.
#pragma once

#include "flowline/error.hpp"

#include <boost/json/value.hpp>
#include <boost/json/object.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

enum class ParamType {
  Bool,        // true / false
  Int,         // 64-bit signed integer
  Double,      // number; an integer is accepted
  String,      // text
  StringList,  // list of text; a single text is not accepted
  Json,        // anything (null, scalars, lists, maps)
  IntOrAuto,   // an integer, or the text "auto" (the executor decides; read it as boost::json::value)
  Path,        // a file or folder name, read as a string; relative ones are relative to the flow file
};

// "bool", "int", "double", "string", "list of strings", "any", "int or auto", "path".
std::string_view to_string(ParamType type) noexcept;

// Declaration of one parameter.
struct ParamSpec {
  std::string name;
  ParamType type = ParamType::String;
  bool required = false;
  boost::json::value default_value;  // used when the parameter is not given (and not required)
  std::string help;
  // The allowed values, when not empty: the value (for StringList: each item) must equal one of them.
  std::vector<boost::json::value> choices;
  // Inclusive bounds of an Int, Double or IntOrAuto (the number) value.
  std::optional<double> minimum, maximum;

  // A check of the value's content that needs this machine, e.g. that a model folder holds a checkpoint
  // flowline runs. Validation calls it after the type, choices and bounds held (a Path already made
  // absolute), when the executor is to run on this machine: not for `flowline export`, nor for the
  // parameters of an executor whose replicas all run on remote hosts. Returns what is wrong, or nullopt.
  std::function<std::optional<std::string>(const boost::json::value& value)> check_here;
  // A Path that may also be a Hugging Face model name, ORG/NAME: where the executor runs here and no
  // folder of that name exists, validation replaces it with the model's folder in the local Hugging Face
  // cache, or reports where it looked (flowline/model_folder.hpp), before check_here runs.
  bool hub_model = false;
  // A Path the executor writes (a file it creates, or replaces when its run completes), e.g. JsonlWriter's
  // `path`. `flowline run`, `serve` and `profile` find these through flow_outputs() (flow_config.hpp): run
  // and serve refuse to start when one exists unless told --overwrite, profile sends them to a scratch
  // folder, and a served flow bounds what they hold (RuntimeInfo::max_output_bytes).
  bool output = false;

  static ParamSpec optional(std::string name, ParamType type, boost::json::value default_value, std::string help);
  static ParamSpec required_param(std::string name, ParamType type, std::string help);
  // A string that is one of `choices` (text), e.g. choice("unit", {"paragraph", "sentence"}, "paragraph", ...).
  static ParamSpec choice(std::string name, std::vector<std::string> choices, std::string default_value,
                          std::string help);
  // A list of strings, each one of `choices`.
  static ParamSpec choice_list(std::string name, std::vector<std::string> choices,
                               std::vector<std::string> default_value, std::string help);
  // Bounds, chained on a declaration: ParamSpec::optional("batch_size", ParamType::Int, 64, "...").min(1).
  ParamSpec& min(double value) {
    minimum = value;
    return *this;
  }
  ParamSpec& max(double value) {
    maximum = value;
    return *this;
  }
  ParamSpec& check(std::function<std::optional<std::string>(const boost::json::value&)> f) {
    check_here = std::move(f);
    return *this;
  }
  ParamSpec& hub_model_name() {
    hub_model = true;
    return *this;
  }
  ParamSpec& output_file() {
    output = true;
    return *this;
  }
};

// The type as the reference shows it, with choices and bounds: "string: one of paragraph, sentence",
// "int ≥ 1", "double ≥ 0 and ≤ 1".
std::string describe_type(const ParamSpec& spec);

// Checks `value` against `type`, converting where the reading is unambiguous: an integer where a double is
// declared, and a whole number written as a double where an integer is (5.0 is the int 5: Jina's clients
// send every number through protobuf's Struct, as a double). 5.5, "5", true and numbers beyond ±2^53 are
// not ints. Returns an error description ("expected int, got string \"abc\"") or nullopt.
std::optional<std::string> check_param_value(ParamType type, boost::json::value& value);
// The same, then the choices and bounds of `spec`: "expected one of paragraph, sentence, got 'word'",
// "expected an integer ≥ 1, got 0".
std::optional<std::string> check_param_value(const ParamSpec& spec, boost::json::value& value);

// The request parameters one endpoint of an executor reads. `endpoint` is an endpoint of its spec ("/search"),
// or kDefaultEndpoint ("*") for parameters every endpoint reads. ParamSpec's `required`, `default_value`,
// `choices`, `minimum`, `maximum` and `help` apply; `check_here`, `hub_model` and `output` do not. A null
// default means "the executor's own setting" (e.g. VectorIndex's `limit` defaults to its `with:` limit):
// the handler reads it with RequestInfo::param_or().
struct EndpointParams {
  std::string endpoint;
  std::vector<ParamSpec> params;
};

// The declarations among `declared` that apply to `endpoint`: its own, then those of "*". The pointers point
// into `declared`, valid while it is unchanged.
std::vector<const ParamSpec*> request_params_of(const std::vector<EndpointParams>& declared, std::string_view endpoint);

// Describes one endpoint's request parameters for listings: "limit (int ≥ 1): matches per query".
std::string describe_request_param(const ParamSpec& spec);

// The parameter values of one executor, after validation against its ParamSpecs.
class Params {
 public:
  Params() = default;
  // `owner` names the executor in error messages; `locations` (optional) says where each value was written.
  Params(std::string owner, boost::json::object values, std::map<std::string, SourceLocation> locations = {});

  bool contains(std::string_view name) const;
  // The value, converted to T. T is one of bool, int, std::int64_t, std::size_t, double, float,
  // std::string, std::vector<std::string>, boost::json::value. Throws ExecutorError when the parameter is
  // absent or has another type; size_t rejects negative values.
  template <class T>
  T get(std::string_view name) const;
  // The value, or `fallback` when the parameter is absent or null.
  template <class T>
  T get_or(std::string_view name, T fallback) const {
    return contains(name) && !values_.at(name).is_null() ? get<T>(name) : fallback;
  }

  const boost::json::object& values() const noexcept { return values_; }
  // Where the parameter was written, or an empty location.
  SourceLocation location_of(std::string_view name) const;
  const std::string& owner() const noexcept { return owner_; }

 private:
  const boost::json::value& require(std::string_view name) const;
  [[noreturn]] void type_error(std::string_view name, std::string_view expected) const;

  std::string owner_;
  boost::json::object values_;
  std::map<std::string, SourceLocation, std::less<>> locations_;
};

// A request's parameters after check_request_params().
struct CheckedRequestParams {
  boost::json::object parameters;    // as sent, the declared ones in their checked form (5.0 -> 5)
  Params declared;                   // the declared ones: as given, or their default when it is not null
  std::vector<std::string> unknown;  // names sent that this endpoint does not declare (kept in `parameters`:
                                     // Jina sends one dict to every executor of a flow)
};

// Checks a request's `parameters` against the declarations of `endpoint` (request_params_of). Unknown names
// pass (listed in `unknown`). Throws RequestError — the client's mistake: 422 over HTTP, an error status in
// a gRPC answer — naming the parameter, what was expected, and where: "parameter 'limit': expected an
// integer from 1, got 5.5 (index on /search)". `executor` is the executor's name in the flow.
// Thread-safe (reads only its arguments).
CheckedRequestParams check_request_params(const std::vector<EndpointParams>& declared, std::string_view executor,
                                          std::string_view endpoint, const boost::json::object& parameters);

// The supported conversions (defined in the library).
template <>
bool Params::get<bool>(std::string_view) const;
template <>
std::int64_t Params::get<std::int64_t>(std::string_view) const;
template <>
int Params::get<int>(std::string_view) const;
template <>
std::size_t Params::get<std::size_t>(std::string_view) const;
template <>
double Params::get<double>(std::string_view) const;
template <>
float Params::get<float>(std::string_view) const;
template <>
std::string Params::get<std::string>(std::string_view) const;
template <>
std::vector<std::string> Params::get<std::vector<std::string>>(std::string_view) const;
template <>
boost::json::value Params::get<boost::json::value>(std::string_view) const;

}  // namespace flowline
