// ExecutorRunner (executor_runner.hpp).
#include "executor_runner.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

namespace flowline::testing {

namespace {
// The executor's `with:` as a flow would make it: each given value checked against its declaration, the
// defaults of the others, and a refusal of names the spec does not declare or required ones not given.
Params params_for(const ExecutorSpec& spec, const std::string& owner, const boost::json::object& with) {
  boost::json::object values;
  for (const ParamSpec& p : spec.params) {
    const auto* given = with.if_contains(p.name);
    if (!given) {
      if (p.required) throw Error(fmt::format("{}: parameter '{}' is required", owner, p.name));
      values[p.name] = p.default_value;
      continue;
    }
    boost::json::value v = *given;
    if (auto problem = check_param_value(p, v)) {
      throw Error(fmt::format("{}: parameter '{}': {}", owner, p.name, *problem));
    }
    values[p.name] = std::move(v);
  }
  for (const auto& [name, value] : with) {
    if (!values.contains(name)) throw Error(fmt::format("{}: unknown parameter '{}'", owner, std::string(name)));
  }
  return Params(owner, std::move(values));
}
}  // namespace

ExecutorRunner::ExecutorRunner(const Registry& registry, std::string_view type, const boost::json::object& with,
                               RuntimeInfo runtime)
    : entry_(registry.get(type)), runtime_(std::move(runtime)) {
  runtime_.type = entry_.spec.name;
  if (runtime_.name.empty()) runtime_.name = entry_.spec.name;
  params_ = params_for(entry_.spec, runtime_.name, with);
  executor_ = entry_.factory(ExecutorContext{runtime_, params_});
  if (!executor_) throw Error(fmt::format("{}: the factory returned no executor", runtime_.name));
}

ExecutorRunner::~ExecutorRunner() {
  if (!executor_) return;
  try {
    executor_->close();
  } catch (...) {  // a destructor must not throw; the executor's own tests check close()
  }
}

DocumentArray ExecutorRunner::post(std::string_view endpoint, DocumentArray docs,
                                   const boost::json::object& parameters) {
  const CheckedRequestParams request = check_request_params(entry_.request_params, runtime_.name, endpoint, parameters);
  executor_->handle(endpoint, docs, request.parameters, &request.declared);
  return docs;
}

}  // namespace flowline::testing
