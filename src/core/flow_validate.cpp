// Validating a parsed FlowConfig against a Registry, as named checks that each append diagnostics, and
// loading a flow file (parse, plugins, validation) into one ConfigError with every problem in file order.
#include "flow_budget.hpp"
#include "flow_config_internal.hpp"
#include "python_workers.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/flow_file_limits.hpp"
#include "flowline/io.hpp"
#include "flowline/model_folder.hpp"
#include "flowline/plugin.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <set>
#include <tuple>

namespace flowline {
namespace {

using Diagnostics = std::vector<Diagnostic>;

void report(Diagnostics& out, SourceLocation where, std::string message) {
  out.push_back(Diagnostic{std::move(where), std::move(message)});
}

std::string context_of(const ExecutorConfig& e) { return fmt::format("executor '{}': ", e.name); }

void check_options(const FlowConfig& config, Diagnostics& out) {
  if (config.options.request_size == 0)
    report(out, config.location_of("with.request_size"), "with.request_size: must be at least 1");
  if (config.options.max_in_flight == 0)
    report(out, config.location_of("with.max_in_flight"), "with.max_in_flight: must be at least 1");
}

// Names: none empty, none twice, none reserved. Returns the set of names seen.
std::set<std::string> check_names(const FlowConfig& config, Diagnostics& out) {
  std::set<std::string> seen;
  for (const auto& e : config.executors) {
    if (e.name.empty()) {
      if (!e.locations.count("")) report(out, e.location_of("name"), "an executor has an empty name");
    } else if (!seen.insert(e.name).second) {
      report(out, e.location_of("name"), fmt::format("executor '{}': the name is used twice", e.name));
    } else if (e.name == "gateway") {
      report(out, e.location_of("name"), "executor 'gateway': the name is reserved");
    }
  }
  return seen;
}

// An executor's devices: their names always; with DeviceCheck::Here also that they exist on this machine
// (Elsewhere: on the machines a deployment runs the executor on).
void check_devices(const ExecutorConfig& e, DeviceCheck where, Diagnostics& out) {
  const std::string context = context_of(e);
  const auto check = where == DeviceCheck::Here ? check_device : check_device_syntax;
  if (e.replicas < 1) report(out, e.location_of("replicas"), context + "replicas must be at least 1");
  if (e.devices.empty()) {
    if (auto problem = check(e.device)) report(out, e.location_of("device"), context + *problem);
  } else if (e.devices.size() == 1 && e.devices[0] == "all") {
    if (where == DeviceCheck::Elsewhere) return;
    if (auto missing = load_cuda()) {
      report(out, e.location_of("devices"),
             fmt::format("{}devices: all needs {}: set up with GPU support (scripts/setup.sh --gpu), or use cpu",
                         context, *missing));
    } else if (cuda_device_count() == 0) {
      report(out, e.location_of("devices"),
             fmt::format("{}devices: all, but no GPU is visible; available: {}", context,
                         fmt::join(available_devices(), ", ")));
    }
  } else {
    for (const auto& d : e.devices) {
      if (auto problem = check(d)) report(out, e.location_of("devices"), context + *problem);
    }
  }
}

void check_needs(const ExecutorConfig& e, const std::set<std::string>& seen, const std::vector<std::string>& names,
                 Diagnostics& out) {
  if (!e.needs) return;
  for (const auto& need : *e.needs) {
    if (need == e.name) {
      report(out, e.location_of("needs"), context_of(e) + "an executor cannot need itself");
    } else if (!seen.count(need)) {
      const std::string hint = closest_match(need, names);
      report(out, e.location_of("needs"),
             fmt::format("{}needs unknown executor '{}'{}", context_of(e), need,
                         hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
  }
}

// A relative Path parameter written in the flow file becomes absolute against the file's folder. Values
// set elsewhere (--set, code) and absolute paths are left alone, so running this twice changes nothing.
void resolve_path(const FlowConfig& config, const ExecutorConfig& e, const std::string& name,
                  boost::json::value& value) {
  if (config.source.empty() || !value.is_string() || value.get_string().empty()) return;
  if (e.location_of("with." + name).file != config.source.string()) return;
  const std::filesystem::path path(std::string(value.get_string()));
  if (path.is_absolute()) return;
  const std::filesystem::path folder = config.source.parent_path();
  value = std::filesystem::absolute(folder / path).lexically_normal().string();
}

// A model parameter that names no folder but is written as a Hugging Face name (ORG/NAME): its folder in the
// local Hugging Face cache, or what is wrong. `value` is the path resolve_path() made of `written`.
std::optional<std::string> resolve_hub_model(const boost::json::value& written, boost::json::value& value) {
  if (!written.is_string() || !value.is_string()) return std::nullopt;
  const ModelLocation location = locate_model(written.get_string(), std::string(value.get_string()));
  if (!location.problem.empty()) return location.problem;
  value = location.folder.string();
  return std::nullopt;
}

// Parameters: declared, of their type, choice and bounds; paths resolved; required ones present;
// defaults filled in.
void check_parameters(const FlowConfig& config, ExecutorConfig& e, const ExecutorSpec& spec, DeviceCheck where,
                      Diagnostics& out) {
  // Content checks (a model folder's checkpoint) where the executor runs here.
  const bool here = where == DeviceCheck::Here && (!e.is_remote() || e.remote.local_replicas > 0);
  const std::string context = context_of(e);
  std::vector<std::string> declared;
  for (const auto& p : spec.params) declared.push_back(p.name);
  for (auto& [key, value] : e.with) {
    const std::string name(key);
    auto p = std::find_if(spec.params.begin(), spec.params.end(), [&](const ParamSpec& s) { return s.name == name; });
    if (p == spec.params.end()) {
      const std::string hint = closest_match(name, declared);
      report(out, e.location_of("with." + name),
             fmt::format("{}unknown parameter '{}' for {}{}; its parameters: {}", context, name, spec.name,
                         hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                         declared.empty() ? std::string("none") : fmt::format("{}", fmt::join(declared, ", "))));
      continue;
    }
    if (auto problem = check_param_value(*p, value)) {
      report(out, e.location_of("with." + name), fmt::format("{}parameter '{}': {}", context, name, *problem));
    } else {
      const boost::json::value written = value;
      if (p->type == ParamType::Path) resolve_path(config, e, name, value);
      if (here && p->hub_model) {
        if (auto problem = resolve_hub_model(written, value)) {
          report(out, e.location_of("with." + name), fmt::format("{}parameter '{}': {}", context, name, *problem));
          continue;
        }
      }
      if (here && p->check_here) {
        if (auto problem = p->check_here(value)) {
          report(out, e.location_of("with." + name), fmt::format("{}parameter '{}': {}", context, name, *problem));
        }
      }
    }
  }
  for (const auto& p : spec.params) {
    if (e.with.contains(p.name)) continue;
    if (p.required) {
      report(out, e.location_of(e.locations.count("with") ? "with" : ""),
             fmt::format("{}missing required parameter '{}' ({}: {})", context, p.name, describe_type(p), p.help));
    } else {
      e.with[p.name] = p.default_value;
    }
  }
}

// replicas: auto, from the devices: the type's replicas_per_gpu on each GPU of the pool, one on each CPU
// entry, at most the type's max_replicas. A device that is not there counts as a CPU (check_devices says so).
int auto_replica_count(const ExecutorConfig& e, const ExecutorSpec& spec) {
  std::vector<std::string> pool = e.devices;
  if (pool.size() == 1 && pool[0] == "all") pool.assign(static_cast<std::size_t>(cuda_device_count()), "cuda");
  if (pool.empty()) pool.push_back(e.device);
  int count = 0;
  for (const auto& name : pool) {
    const bool gpu = name == "auto" ? auto_gpu_count() > 0 : name.starts_with("cuda") && cuda_device_count() > 0;
    count += gpu ? std::max(1, spec.replicas_per_gpu) : 1;
  }
  return spec.max_replicas > 0 ? std::clamp(count, 1, spec.max_replicas) : std::max(count, 1);
}

// shards: N needs a type with a shard plan; remote shards are one host each, found by their address.
void check_shards(const ExecutorConfig& e, const ExecutorSpec& spec, Diagnostics& out) {
  if (e.shards <= 1) return;
  const SourceLocation where = e.location_of("shards");
  if (!spec.shards) {
    report(out, where,
           fmt::format("{}{} cannot be sharded: it does not say how its requests spread over shards (VectorIndex "
                       "can); use replicas",
                       context_of(e), spec.name));
    return;
  }
  if (!e.is_remote()) return;
  if (e.hosts.size() != static_cast<std::size_t>(e.shards)) {
    report(out, e.location_of("hosts"),
           fmt::format("{}shards: {} with hosts: host i serves shard i, so give {} hosts (got {})", context_of(e),
                       e.shards, e.shards, e.hosts.size()));
  }
  if (e.remote.discovery != RemoteOptions::Discovery::None)
    report(out, e.location_of("remote.discovery"),
           context_of(e) + "remote shards are one server each: remote.discovery must be none");
  if (e.remote.local_replicas > 0)
    report(out, e.location_of("remote.local_replicas"),
           context_of(e) + "remote shards run on their hosts: remote.local_replicas must be 0");
}

// shared_memory: sizes the segment of the worker processes only py_modules start; anywhere else it means nothing.
void check_shared_memory(const ExecutorConfig& e, Diagnostics& out) {
  if (!e.shared_memory || e.is_python()) return;
  const std::string runs =
      e.uses.empty() ? "" : fmt::format(" ({} runs {})", e.uses, e.is_remote() ? "on its hosts" : "in this process");
  report(out, e.location_of("shared_memory"),
         fmt::format("{}shared_memory: only an executor with py_modules has worker processes to share memory with{}",
                     context_of(e), runs));
}

void check_executor_type(const FlowConfig& config, ExecutorConfig& e, const Registry& registry, DeviceCheck where,
                         Diagnostics& out) {
  check_shared_memory(e, out);
  if (e.is_python()) {  // a class in Python files: the worker's check mode looks at it
    if (e.auto_replicas) e.replicas = 1;
    detail::check_python_executor(config, e, out);
    return;
  }
  if (e.is_remote() && e.uses.empty()) {  // the servers validate their own settings
    if (!e.with.empty())
      report(out, e.location_of("with"), context_of(e) + "with: parameters need `uses` (the servers have their own)");
    if (e.remote.local_replicas > 0)
      report(out, e.location_of("remote.local_replicas"), context_of(e) + "remote.local_replicas needs `uses`");
    if (e.shards > 1)
      report(out, e.location_of("shards"), context_of(e) + "shards needs `uses` (its type says how requests spread)");
    return;
  }
  const Registry::Entry* entry = e.uses.empty() ? nullptr : registry.find(e.uses);
  if (!entry) {
    if (!e.uses.empty()) report(out, e.location_of("uses"), context_of(e) + registry.unknown_message(e.uses));
    return;
  }
  const ExecutorSpec& spec = entry->spec;
  if (e.auto_replicas && (!e.is_remote() || e.remote.local_replicas > 0)) e.replicas = auto_replica_count(e, spec);
  if (spec.max_replicas > 0 && e.replicas > spec.max_replicas) {
    report(out, e.location_of("replicas"),
           fmt::format("{}{} runs with at most {} replica{} (it owns its output), got {}", context_of(e), spec.name,
                       spec.max_replicas, spec.max_replicas == 1 ? "" : "s", e.replicas));
  }
  check_shards(e, spec, out);
  check_parameters(config, e, spec, where, out);
}

// The DAG of needs (default: the executor before) must have no cycle; reports the first one found.
void check_cycles(const FlowConfig& config, const std::set<std::string>& seen, Diagnostics& out) {
  std::map<std::string, std::vector<std::string>> edges;
  for (std::size_t i = 0; i < config.executors.size(); ++i) {
    const auto& e = config.executors[i];
    if (e.needs) {
      edges[e.name] = *e.needs;
    } else if (i > 0) {
      edges[e.name] = {config.executors[i - 1].name};
    }
  }
  std::map<std::string, int> state;  // 0 new, 1 on stack, 2 done
  std::vector<std::string> stack;
  std::function<bool(const std::string&)> visit = [&](const std::string& node) -> bool {
    state[node] = 1;
    stack.push_back(node);
    for (const auto& next : edges[node]) {
      if (!seen.count(next) || next == node) continue;  // unknown names and self-needs are reported elsewhere
      if (state[next] == 1) {
        std::vector<std::string> cycle(std::find(stack.begin(), stack.end(), next), stack.end());
        cycle.push_back(next);
        const auto where = std::find_if(config.executors.begin(), config.executors.end(),
                                        [&](const ExecutorConfig& c) { return c.name == node; });
        report(out, where->location_of("needs"), fmt::format("executors form a cycle: {}", fmt::join(cycle, " -> ")));
        return true;
      }
      if (state[next] == 0 && visit(next)) return true;
    }
    stack.pop_back();
    state[node] = 2;
    return false;
  };
  for (const auto& e : config.executors) {
    if (state[e.name] == 0 && visit(e.name)) break;
  }
}

// remote.discovery: dns makes its replica threads up front, for the most servers it may find.
void check_remote(const ExecutorConfig& e, Diagnostics& out) {
  if (!e.is_remote() || e.remote.discovery != RemoteOptions::Discovery::Dns) return;
  constexpr std::size_t kMaxThreads = 4096;
  const std::size_t threads =
      e.hosts.size() * e.remote.max_servers * std::max<std::size_t>(e.remote.connections, 1) * e.remote.in_flight;
  if (threads > kMaxThreads) {
    report(out, e.location_of("remote"),
           fmt::format("{}remote.discovery: dns with {} host name{} x max_servers {} x connections {} x in_flight {} "
                       "needs {} replica threads; at most {}: lower max_servers or in_flight",
                       context_of(e), e.hosts.size(), e.hosts.size() == 1 ? "" : "s", e.remote.max_servers,
                       e.remote.connections, e.remote.in_flight, threads, kMaxThreads));
  }
}

}  // namespace

namespace detail {

void validate_collect(FlowConfig& config, const Registry& registry, Diagnostics& out, DeviceCheck devices) {
  check_options(config, out);
  const std::set<std::string> seen = check_names(config, out);
  std::vector<std::string> names;
  for (const auto& e : config.executors) names.push_back(e.name);
  for (auto& e : config.executors) {
    // A remote executor's devices are its servers' (this machine may have no GPU), unless it runs some here.
    if (devices == DeviceCheck::Elsewhere || !e.is_remote() || e.remote.local_replicas > 0)
      check_devices(e, devices, out);
    check_needs(e, seen, names, out);
    check_executor_type(config, e, registry, devices, out);
    check_remote(e, out);
  }
  check_cycles(config, seen, out);
}

void sort_diagnostics(Diagnostics& diagnostics) {
  std::stable_sort(diagnostics.begin(), diagnostics.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::tie(a.where.line, a.where.column) < std::tie(b.where.line, b.where.column);
  });
}

}  // namespace detail

std::vector<std::string> replica_devices(const ExecutorConfig& executor) {
  std::vector<std::string> pool = executor.devices;
  if (pool.size() == 1 && pool[0] == "all") {
    pool.clear();
    for (int i = 0; i < cuda_device_count(); ++i) pool.push_back(fmt::format("cuda:{}", i));
    if (pool.empty()) throw Error(fmt::format("executor '{}': devices: all, but no GPU is visible", executor.name));
  }
  if (pool.empty()) pool.push_back(executor.device);
  std::vector<std::string> out;
  for (int r = 0; r < executor.replicas; ++r) out.push_back(pool[static_cast<std::size_t>(r) % pool.size()]);
  return out;
}

void validate_flow_config(FlowConfig& config, const Registry& registry) {
  Diagnostics diagnostics;
  detail::validate_collect(config, registry, diagnostics);
  if (!diagnostics.empty()) {
    detail::sort_diagnostics(diagnostics);
    throw ConfigError(std::move(diagnostics));
  }
}

namespace {

std::mutex limits_mutex;
FlowFileLimits limits_in_force;

}  // namespace

FlowFileLimits flow_file_limits() {
  std::lock_guard lock(limits_mutex);
  return limits_in_force;
}

void set_flow_file_limits(const FlowFileLimits& limits) {
  std::lock_guard lock(limits_mutex);
  limits_in_force = limits;
}

namespace {

FlowConfig load_with_sets(std::string_view yaml_text, const std::filesystem::path& file,
                          const std::vector<std::string>& sets, Registry& registry, DeviceCheck devices) {
  FlowConfig config;
  Diagnostics diagnostics;
  if (!detail::parse_collect(yaml_text, file, config, diagnostics)) throw ConfigError(std::move(diagnostics));
  for (const std::string& assignment : sets) {
    try {
      set_executor_parameter(config, assignment);
    } catch (const ConfigError& e) {
      diagnostics.insert(diagnostics.end(), e.diagnostics().begin(), e.diagnostics().end());
    }
  }
  const auto base_dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  for (std::size_t i = 0; i < config.plugins.size(); ++i) {
    try {
      load_plugin(resolve_plugin(config.plugins[i], base_dir), registry);
    } catch (const Error& e) {
      diagnostics.push_back(Diagnostic{config.location_of(fmt::format("plugins.{}", i)), e.what()});
    }
  }
  try {
    load_plugins_from_environment(registry);
  } catch (const Error& e) {
    diagnostics.push_back(Diagnostic{SourceLocation{}, e.what()});
  }
  detail::validate_collect(config, registry, diagnostics, devices);
  if (!diagnostics.empty()) {
    detail::sort_diagnostics(diagnostics);
    throw ConfigError(std::move(diagnostics));
  }
  return config;
}

std::string read_flow_file(const std::filesystem::path& file) {
  try {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(file, ec);
    if (!ec) detail::check_flow_size(bytes, file, flow_file_limits());
    return read_file(file);
  } catch (const InputError& e) {
    throw ConfigError({Diagnostic{SourceLocation{}, e.what()}});
  }
}

}  // namespace

FlowConfig load_flow_config_text(std::string_view yaml_text, const std::filesystem::path& file, Registry& registry,
                                 DeviceCheck devices) {
  return load_with_sets(yaml_text, file, {}, registry, devices);
}

FlowConfig load_flow_config(const std::filesystem::path& file, const std::vector<std::string>& sets, Registry& registry,
                            DeviceCheck devices) {
  return load_with_sets(read_flow_file(file), file, sets, registry, devices);
}

FlowConfig load_flow_config(const std::filesystem::path& file, Registry& registry, DeviceCheck devices) {
  return load_with_sets(read_flow_file(file), file, {}, registry, devices);
}

std::vector<FlowOutput> flow_outputs(const FlowConfig& config, const Registry& registry) {
  std::vector<FlowOutput> out;
  for (const ExecutorConfig& e : config.executors) {
    if (e.is_remote() && e.remote.local_replicas == 0) continue;  // written on the hosts
    const Registry::Entry* entry = e.uses.empty() ? nullptr : registry.find(e.uses);
    if (!entry) continue;
    for (const ParamSpec& p : entry->spec.params) {
      if (!p.output) continue;
      const auto* value = e.with.if_contains(p.name);
      if (!value || !value->is_string() || value->get_string().empty()) continue;
      out.push_back(FlowOutput{e.name, p.name, std::string(value->get_string()), e.location_of("with." + p.name)});
    }
  }
  return out;
}

}  // namespace flowline
