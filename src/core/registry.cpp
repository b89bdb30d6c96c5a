// The executor table: adding with spec checks, lookup (loading first-party executors on demand) and the
// "unknown executor" message.
#include "flowline/registry.hpp"
#include "flowline/error.hpp"
#include "flowline/plugin.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace flowline {

Registry& Registry::global() {
  static Registry* registry = [] {
    auto* r = new Registry(ExecutorSearch::on);  // never destroyed: plugins may still reference it at exit
    register_builtin_executors(*r);
    return r;
  }();
  return *registry;
}

void Registry::add(ExecutorSpec spec, ExecutorFactory factory, std::string origin) {
  add(std::move(spec), {}, std::move(factory), std::move(origin));
}

namespace {
// A default must pass its own declaration; a name appears once per endpoint; an endpoint is "*" or the spec's.
void check_request_params_declared(const ExecutorSpec& spec, const std::vector<EndpointParams>& declared) {
  for (const EndpointParams& e : declared) {
    const bool known = e.endpoint == kDefaultEndpoint ||
                       std::find(spec.endpoints.begin(), spec.endpoints.end(), e.endpoint) != spec.endpoints.end();
    if (!known) {
      throw Error(
          fmt::format("executor type '{}': request parameters for endpoint '{}', which its spec does not "
                      "declare",
                      spec.name, e.endpoint));
    }
    std::set<std::string> seen;
    for (const ParamSpec* p : request_params_of(declared, e.endpoint)) {
      if (p->name.empty() || !seen.insert(p->name).second) {
        throw Error(fmt::format("executor type '{}': request parameter '{}' of {} is declared twice or has no name",
                                spec.name, p->name, e.endpoint));
      }
      boost::json::value v = p->default_value;
      if (v.is_null()) continue;
      if (auto problem = check_param_value(*p, v)) {
        throw Error(
            fmt::format("executor type '{}': default of request parameter '{}': {}", spec.name, p->name, *problem));
      }
    }
  }
}
}  // namespace

void Registry::add(ExecutorSpec spec, std::vector<EndpointParams> request_params, ExecutorFactory factory,
                   std::string origin) {
  check_request_params_declared(spec, request_params);
  if (spec.name.empty()) throw Error("cannot register an executor with an empty name");
  if (!factory) throw Error(fmt::format("executor type '{}': empty factory", spec.name));
  std::set<std::string> seen;
  for (const auto& p : spec.params) {
    if (p.name.empty() || !seen.insert(p.name).second) {
      throw Error(
          fmt::format("executor type '{}': parameter '{}' is declared twice or has no name", spec.name, p.name));
    }
    if (!p.required && !p.default_value.is_null()) {
      boost::json::value v = p.default_value;
      if (auto problem = check_param_value(p.type, v)) {
        throw Error(fmt::format("executor type '{}': default of parameter '{}': {}", spec.name, p.name, *problem));
      }
    }
  }
  for (const auto& e : spec.endpoints) {
    if (e.empty() || e.front() != '/') {
      throw Error(fmt::format("executor type '{}': endpoint '{}' must start with '/'", spec.name, e));
    }
  }
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry->spec.name == spec.name) {
      throw Error(fmt::format("executor type '{}' is registered twice (first by {}, again by {})", spec.name,
                              entry->origin, origin));
    }
  }
  entries_.push_back(std::make_unique<Entry>(
      Entry{std::move(spec), std::move(factory), std::move(origin), std::move(request_params)}));
}

const Registry::Entry* Registry::find_registered(std::string_view name) const {
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_) {
    if (entry->spec.name == name) return entry.get();
  }
  return nullptr;
}

const Registry::Entry* Registry::find(std::string_view name) const {
  if (const Entry* entry = find_registered(name)) return entry;
  if (search_ == ExecutorSearch::off) return nullptr;
  // Registries are never created const (global() and tests make them with new or on the stack), so
  // completing this one from the executor folder is a change of a non-const object behind a const view.
  if (!load_executor_library(name, const_cast<Registry&>(*this))) return nullptr;
  return find_registered(name);
}

std::string Registry::unknown_message(std::string_view name) const {
  auto known = names();
  if (search_ == ExecutorSearch::on) {
    for (auto& offered : available_executor_libraries()) {
      if (std::find(known.begin(), known.end(), offered) == known.end()) known.push_back(std::move(offered));
    }
    std::sort(known.begin(), known.end());
  }
  const std::string hint = closest_match(std::string(name), known);
  return fmt::format("unknown executor type '{}'{}; known types: {}", name,
                     hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), fmt::join(known, ", "));
}

const Registry::Entry& Registry::get(std::string_view name) const {
  if (const Entry* entry = find(name)) return *entry;
  throw Error(unknown_message(name));
}

std::vector<std::string> Registry::names() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> out;
  for (const auto& entry : entries_) out.push_back(entry->spec.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::size_t Registry::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace flowline
