// Deployment planning: which executors become services, their containers and GPUs, and the flow files the
// gateway and each service read (plan.hpp).
#include "plan.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace flowline::deploy {

std::string dns_label(const std::string& name, const std::string& what) {
  std::string out;
  for (const char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u))
      out += static_cast<char>(std::tolower(u));
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.size() > 63) out.resize(63);
  while (!out.empty() && out.back() == '-') out.pop_back();
  if (out.empty() || !std::isalpha(static_cast<unsigned char>(out.front())))
    throw Error(
        fmt::format("{} '{}' makes no DNS name (lowercase letters, digits and '-', starting with a letter): "
                    "rename it, or give --name",
                    what, name));
  return out;
}

std::vector<std::string> ExecutorService::container_names(Target target) const {
  if (target == Target::Kubernetes || containers == 1) return {service};
  std::vector<std::string> names;
  for (int k = 0; k < containers; ++k) names.push_back(fmt::format("{}-{}", service, k));
  return names;
}

namespace {

// The executors that --scale, --gpus, --local and --hpa name must be in the flow.
void check_names(const FlowConfig& config, const std::vector<std::string>& given, const char* option) {
  std::vector<std::string> names;
  for (const auto& e : config.executors) names.push_back(e.name);
  for (const auto& name : given) {
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    const std::string hint = closest_match(name, names);
    throw Error(fmt::format("{} names executor '{}', which the flow does not have{} (it has: {})", option, name,
                            hint.empty() ? "" : fmt::format("; did you mean '{}'?", hint), fmt::join(names, ", ")));
  }
}

// The GPU indices `cuda:N` / `cuda` of an executor's devices, whether it asks for every GPU, and whether
// it leaves the choice to the machine (auto).
struct DeviceUse {
  std::vector<int> ids;  // sorted, distinct
  bool all = false;
  bool automatic = false;
};

DeviceUse device_use(const ExecutorConfig& e) {
  DeviceUse use;
  const std::vector<std::string> entries = e.devices.empty() ? std::vector<std::string>{e.device} : e.devices;
  for (const auto& d : entries) {
    if (d == "all") use.all = true;
    if (d == "auto") use.automatic = true;
    if (d == "cuda") use.ids.push_back(0);
    if (d.rfind("cuda:", 0) == 0) use.ids.push_back(std::stoi(d.substr(5)));
  }
  std::sort(use.ids.begin(), use.ids.end());
  use.ids.erase(std::unique(use.ids.begin(), use.ids.end()), use.ids.end());
  return use;
}

GpuRequest gpu_request(Target target, const ExecutorConfig& e, const DeviceUse& use, const ExportOptions& o,
                       std::vector<std::string>& notes) {
  GpuRequest g;
  if (const auto it = o.gpus.find(e.name); it != o.gpus.end()) {
    if (it->second > 0 && static_cast<int>(use.ids.size()) > it->second)
      throw Error(fmt::format("--gpus {}={}: the executor's devices name {} GPUs", e.name, it->second, use.ids.size()));
    g.kind = it->second > 0 ? GpuRequest::Kind::Count : GpuRequest::Kind::None;
    g.count = it->second;
    return g;
  }
  if (use.all) {
    if (target == Target::Kubernetes)
      throw Error(fmt::format("executor '{}' uses `devices: all`: say how many GPUs each pod gets with --gpus {}=N",
                              e.name, e.name));
    g.kind = GpuRequest::Kind::All;
    return g;
  }
  if (!use.ids.empty()) {
    g.kind = GpuRequest::Kind::Ids;
    g.ids = use.ids;
    g.count = static_cast<int>(use.ids.size());
    return g;
  }
  if (use.automatic)
    notes.push_back(
        fmt::format("executor '{}': device auto: no GPU reserved, so it runs on the CPU in a container "
                    "(pass --gpus {}=1 to reserve one)",
                    e.name, e.name));
  return g;
}

YAML::Node executor_node(YAML::Node& root, const std::string& name) {
  for (auto entry : root["executors"])
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
  throw Error(fmt::format("executor '{}' not found in the flow's YAML text", name));
}

std::string emit(const YAML::Node& root, const std::string& header) {
  YAML::Emitter out;
  out << root;
  return header + out.c_str() + "\n";
}

// The copy of the flow an executor's container serves: the GPUs it was given renumbered from cuda:0 (in
// the order of their host indices), and a Python executor's py_modules named where its container has them
// (kPyDir/<label>/), its `python:` (a path on this machine) dropped for the image's interpreter.
std::string service_flow(const std::string& yaml_text, const ExecutorConfig& e, const std::vector<int>& ids,
                         bool renumber, const ExecutorService& s, const std::string& source) {
  YAML::Node root = YAML::Load(yaml_text);
  YAML::Node entry = executor_node(root, e.name);
  auto inside = [&](const std::string& d) {
    int host = -1;
    if (d == "cuda") host = 0;
    if (d.rfind("cuda:", 0) == 0) host = std::stoi(d.substr(5));
    if (host < 0) return d;
    const auto at = std::lower_bound(ids.begin(), ids.end(), host) - ids.begin();
    return fmt::format("cuda:{}", at);
  };
  if (renumber && !e.devices.empty()) {
    YAML::Node list(YAML::NodeType::Sequence);
    for (const auto& d : e.devices) list.push_back(inside(d));
    entry["devices"] = list;
  } else if (renumber) {
    entry["device"] = inside(e.device);
  }
  if (!s.py_label.empty()) {
    YAML::Node modules(YAML::NodeType::Sequence);
    for (const auto& m : e.py_modules) {
      const bool shipped = m.rfind("flowline:", 0) == 0;  // beside the image's worker script
      modules.push_back(
          shipped ? m : fmt::format("{}/{}/{}", kPyDir, s.py_label, std::filesystem::path(m).filename().string()));
    }
    entry["py_modules"] = modules;
    entry.remove("python");
  }
  std::vector<std::string> what;
  if (renumber) what.push_back("its GPUs renumbered from 0");
  if (!s.py_label.empty()) what.push_back(fmt::format("its py_modules in {}/{}/", kPyDir, s.py_label));
  return emit(root, fmt::format("# {} as executor '{}' sees it in its container: {} (generated by flowline export)\n",
                                source, e.name, fmt::join(what, ", ")));
}

// A Python executor's files: each py_modules file (relative to the flow's folder) by its file name, which
// must be one a ConfigMap key may be and unique within the executor (one folder in the container).
void plan_python(DeployPlan& plan, ExecutorService& s, const ExecutorConfig& e, const std::string& flow_path,
                 const std::string& label) {
  s.py_label = label;
  s.py_folder = "python/" + label;
  s.py_config_map = dns_label(s.service + "-py", "executor");
  const std::filesystem::path folder = std::filesystem::path(flow_path).parent_path();
  for (const auto& m : e.py_modules) {
    if (m.rfind("flowline:", 0) == 0) continue;
    const std::filesystem::path path(m);
    const std::string name = path.filename().string();
    const bool key_ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    });
    if (!key_ok)
      throw Error(
          fmt::format("executor '{}': py_modules '{}': its file name must be letters, digits, '-', '_' and "
                      "'.' to be carried into a container",
                      e.name, m));
    if (s.py_files.count(name))
      throw Error(
          fmt::format("executor '{}': py_modules '{}' and '{}' share the file name {}, and a container "
                      "gets them in one folder: rename one",
                      e.name, s.py_files.at(name).source, m, name));
    s.py_files[name].source = (path.is_absolute() ? path : folder / path).lexically_normal().string();
  }
  plan.notes.push_back(fmt::format(
      "executor '{}' runs Python: its image needs python3 (docker/Dockerfile built with --build-arg PYTHON=1), "
      "and {} carries its py_modules files ({}) into {}/{}/ — only those listed: a module they import must be "
      "listed too or be installed in the image{}",
      e.name, plan.target == Target::Kubernetes ? fmt::format("ConfigMap {}", s.py_config_map) : s.py_folder + "/",
      s.py_files.size(), kPyDir, label,
      e.python.empty() ? "" : fmt::format("; its python: {} is not used there (the image's python3 is)", e.python)));
}

// The gateway's flow: exported executors name their services as hosts and start degraded (containers
// start in any order; an executor joins when its service is up). Their devices, replicas and a Python
// executor's shared memory (its workers run in its service) are the services' business, so the gateway's
// copy drops them.
std::string gateway_flow(const std::string& yaml_text, const std::vector<ExecutorService>& services,
                         const std::string& source) {
  YAML::Node root = YAML::Load(yaml_text);
  for (const auto& s : services) {
    YAML::Node entry = executor_node(root, s.executor);
    for (const char* key : {"device", "devices", "replicas", "shared_memory", "host", "port", "external"})
      entry.remove(key);
    YAML::Node hosts(YAML::NodeType::Sequence);
    for (const auto& h : s.hosts) hosts.push_back(h);
    entry["hosts"] = hosts;
    if (!entry["remote"] || !entry["remote"].IsMap()) entry["remote"] = YAML::Node(YAML::NodeType::Map);
    entry["remote"]["start_degraded"] = true;
    if (s.max_servers > 0) {
      entry["remote"]["discovery"] = "dns";
      entry["remote"]["max_servers"] = s.max_servers;
    }
  }
  return emit(root, fmt::format("# {} as the gateway runs it: each executor below with `hosts:` runs in its own "
                                "service (generated by flowline export)\n",
                                source));
}

std::vector<std::string> env_names(const std::string& yaml_text) {
  // Every `${{ ENV.NAME` (spaces allowed after the braces), scanned linearly.
  auto is_name_char = [](char c, bool first) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (!first && c >= '0' && c <= '9');
  };
  std::vector<std::string> names;
  for (std::size_t at = yaml_text.find("${{"); at != std::string::npos; at = yaml_text.find("${{", at + 3)) {
    std::size_t i = at + 3;
    while (i < yaml_text.size() && std::isspace(static_cast<unsigned char>(yaml_text[i]))) ++i;
    if (yaml_text.compare(i, 4, "ENV.") != 0) continue;
    const std::size_t start = i + 4;
    std::size_t end = start;
    while (end < yaml_text.size() && is_name_char(yaml_text[end], end == start)) ++end;
    if (end > start) names.push_back(yaml_text.substr(start, end - start));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

void check_options(const FlowConfig& config, const ExportOptions& o) {
  auto keys = [](const auto& map) {
    std::vector<std::string> out;
    for (const auto& [name, value] : map) out.push_back(name);
    return out;
  };
  check_names(config, keys(o.scale), "--scale");
  check_names(config, keys(o.gpus), "--gpus");
  check_names(config, {o.local.begin(), o.local.end()}, "--local");
  check_names(config, keys(o.hpa), "--hpa");
  for (const auto& [name, n] : o.scale)
    if (n < 1) throw Error(fmt::format("--scale {}={}: at least one container", name, n));
  for (const auto& [name, n] : o.gpus)
    if (n < 0) throw Error(fmt::format("--gpus {}={}: a count of GPUs, 0 or more", name, n));
  for (const auto& [name, range] : o.hpa)
    if (range.first < 1 || range.second < range.first)
      throw Error(fmt::format("--hpa {}={}:{}: MIN >= 1 and MAX >= MIN", name, range.first, range.second));
  for (const auto& name : o.local)
    if (o.scale.count(name) || o.gpus.count(name) || o.hpa.count(name))
      throw Error(fmt::format("--local {}: it stays in the gateway, so --scale, --gpus and --hpa do not apply", name));
}

// Every exported executor's service, its containers and its hosts; names checked for collisions.
ExecutorService plan_service(Target target, DeployPlan& plan, const ExecutorConfig& e, const std::string& yaml_text,
                             const std::string& flow_path) {
  const ExportOptions& o = plan.options;
  ExecutorService s;
  s.executor = e.name;
  const std::string label = dns_label(e.name, "executor");
  s.service = target == Target::Kubernetes ? dns_label(plan.name + "-" + label, "executor") : label;
  s.containers = o.scale.count(e.name) ? o.scale.at(e.name) : 1;
  if (const auto it = o.hpa.find(e.name); it != o.hpa.end()) {
    if (target == Target::Compose) throw Error("--hpa is for Kubernetes (export kubernetes)");
    s.hpa = it->second;
    s.containers = std::max(s.containers, it->second.first);
  }
  const DeviceUse use = device_use(e);
  s.gpu = gpu_request(target, e, use, o, plan.notes);
  s.flow_file = plan.flow_file;
  const bool renumber = !use.ids.empty() && (use.ids.front() != 0 || use.ids.back() + 1 != int(use.ids.size()));
  if (e.is_python()) plan_python(plan, s, e, flow_path, label);
  if (renumber || e.is_python()) {
    s.flow_file = fmt::format("{}.{}.yml", std::filesystem::path(plan.flow_file).stem().string(), label);
    plan.files[s.flow_file] = service_flow(yaml_text, e, use.ids, renumber, s, plan.flow_file);
  }
  for (const auto& name : s.container_names(target)) s.hosts.push_back(fmt::format("{}:{}", name, kWirePort));
  const int pods = std::max(s.containers, s.hpa.second);
  // Room for twice the pods it starts with (or its autoscaler's maximum), for `kubectl scale` later, within
  // the replica threads validation allows the gateway (4,096 per executor: servers x connections x in_flight).
  if (target == Target::Kubernetes) {
    const int per_server = static_cast<int>(std::max<std::size_t>(e.remote.connections, 1) * e.remote.in_flight);
    s.max_servers = std::max(1, std::min({std::max(2 * pods, 8), 256, 4096 / std::max(per_server, 1)}));
  }
  return s;
}

void check_unique(const DeployPlan& plan) {
  std::map<std::string, std::string> taken{
      {plan.target == Target::Kubernetes ? plan.name + "-gateway" : "gateway", "the gateway"}};
  if (plan.target == Target::Kubernetes) taken.emplace(plan.name + "-flow", "the flow's ConfigMap");
  for (const auto& s : plan.executors) {
    std::vector<std::string> names = s.container_names(plan.target);
    if (plan.target == Target::Kubernetes && !s.py_config_map.empty()) names.push_back(s.py_config_map);
    for (const auto& n : names) {
      const auto [it, fresh] = taken.emplace(n, fmt::format("executor '{}'", s.executor));
      if (!fresh)
        throw Error(
            fmt::format("executor '{}' and {} would both be named '{}': rename one", s.executor, it->second, n));
    }
  }
}

}  // namespace

DeployPlan make_plan(Target target, const FlowConfig& config, const std::string& yaml_text,
                     const std::string& flow_path, const ExportOptions& options) {
  check_options(config, options);
  DeployPlan plan;
  plan.target = target;
  plan.options = options;
  const std::filesystem::path path(flow_path);
  plan.name = dns_label(options.name.empty() ? path.stem().string() : options.name, "flow name");
  plan.flow_file = path.filename().string();
  plan.gateway_file = path.stem().string() + ".gateway.yml";
  if (plan.gateway_file == plan.flow_file) plan.gateway_file = path.stem().string() + ".gateway-flow.yml";
  plan.gateway_port = options.gateway_port > 0 ? options.gateway_port : config.serve.port.value_or(kHttpPort);
  if (plan.gateway_port <= 0) plan.gateway_port = kHttpPort;
  plan.env = env_names(yaml_text);
  plan.files[plan.flow_file] = yaml_text;

  for (const auto& e : config.executors) {
    if (e.is_remote()) {
      plan.notes.push_back(fmt::format("executor '{}' already runs elsewhere ({}): the gateway reaches it there",
                                       e.name, fmt::join(e.hosts, ", ")));
      continue;
    }
    if (options.local.count(e.name)) {
      // The gateway's container mounts no Python file and its flow names them relative to the original.
      if (e.is_python())
        throw Error(
            fmt::format("--local {}: a Python executor (py_modules) runs in a service of its own, where its "
                        "files are mounted; --local keeps C++ executors in the gateway",
                        e.name));
      continue;
    }
    if (e.shards > 1) {
      throw Error(fmt::format(
          "executor '{}' has shards: {}: flowline export does not make a service per shard yet; keep it in the "
          "gateway (--local {}), or run each shard as an executor server and name them in its hosts:",
          e.name, e.shards, e.name));
    }
    plan.executors.push_back(plan_service(target, plan, e, yaml_text, flow_path));
  }
  check_unique(plan);
  plan.files[plan.gateway_file] = gateway_flow(yaml_text, plan.executors, plan.flow_file);
  return plan;
}

}  // namespace flowline::deploy
