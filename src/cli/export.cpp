// `flowline export compose|kubernetes`: a flow file to a compose file or Kubernetes manifests.
#include "export.hpp"

#include "launcher.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>

namespace flowline::cli {

namespace {

namespace fs = std::filesystem;

int parse_int(const std::string& text, const std::string& what) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    throw Error(fmt::format("{}: '{}' is not a whole number", what, text));
  return value;
}

// "EXECUTOR=VALUE" -> {EXECUTOR, VALUE}.
std::pair<std::string, std::string> split_assignment(const std::string& item, const char* option) {
  const auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
    throw Error(fmt::format("{} {}: expected EXECUTOR=VALUE", option, item));
  return {item.substr(0, eq), item.substr(eq + 1)};
}

void parse_assignments(ExportCommand& c) {
  for (const auto& item : c.scale) {
    const auto [name, value] = split_assignment(item, "--scale");
    c.options.scale[name] = parse_int(value, "--scale " + item);
  }
  for (const auto& item : c.gpus) {
    const auto [name, value] = split_assignment(item, "--gpus");
    c.options.gpus[name] = parse_int(value, "--gpus " + item);
  }
  for (const auto& item : c.hpa) {
    const auto [name, value] = split_assignment(item, "--hpa");
    const auto colon = value.find(':');
    if (colon == std::string::npos) throw Error(fmt::format("--hpa {}: expected EXECUTOR=MIN:MAX", item));
    c.options.hpa[name] = {parse_int(value.substr(0, colon), "--hpa " + item),
                           parse_int(value.substr(colon + 1), "--hpa " + item)};
  }
  const std::string& secret = c.options.token_secret;
  if (!secret.empty()) {
    const bool dns_name = secret.size() <= 253 && std::isalnum(static_cast<unsigned char>(secret.front())) &&
                          std::isalnum(static_cast<unsigned char>(secret.back())) &&
                          std::all_of(secret.begin(), secret.end(), [](char ch) {
                            return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
                          });
    if (!dns_name) {
      throw Error(
          fmt::format("--token-secret '{}': expected a Secret name (lowercase letters, digits, '-' and '.', "
                      "starting and ending with a letter or digit)",
                      secret));
    }
    c.options.token = true;
  }
}

void write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) throw Error(fmt::format("cannot write '{}'", file.string()));
}

// A Python executor's py_modules files, read for the plan's renderers. Kubernetes carries them in a
// ConfigMap, which holds at most 1 MiB: more is refused, naming the executor and what to do instead.
void read_python_files(deploy::DeployPlan& plan) {
  constexpr std::size_t kConfigMapBytes = 1000 * 1000;  // 1 MiB less room for the object's own fields
  for (auto& s : plan.executors) {
    std::size_t total = 0;
    for (auto& [name, py] : s.py_files) {
      if (!fs::is_regular_file(py.source))
        throw Error(fmt::format("executor '{}': py_modules file '{}' does not exist", s.executor, py.source));
      py.text = read_file(py.source);
      total += py.text.size();
    }
    if (plan.target == deploy::Target::Kubernetes && total > kConfigMapBytes)
      throw Error(
          fmt::format("executor '{}': its py_modules files hold {} bytes, more than a ConfigMap takes "
                      "(about 1 MB): py_modules is for code; put data and weights in the models volume (--models)",
                      s.executor, total));
  }
}

CLI::App* add_target(CLI::App& parent, ExportCommand& c, deploy::Target target, const char* name, const char* help) {
  auto* cmd = parent.add_subcommand(name, help);
  cmd->add_option("flow", c.flow, "flow file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--output,-o", c.out_dir, "folder to write into (created when missing)")->required();
  cmd->add_option("--image", c.options.image, "the flowline image (docker/Dockerfile)")->capture_default_str();
  cmd->add_option("--scale", c.scale,
                  target == deploy::Target::Compose
                      ? "EXECUTOR=N: N containers run it (failover between them); repeatable"
                      : "EXECUTOR=N: the Deployment's replicas (pods); repeatable");
  cmd->add_option("--gpus", c.gpus, "EXECUTOR=N: GPUs per container, instead of those its device(s) name; repeatable");
  cmd->add_option("--local", c.options.local, "EXECUTOR: keep it inside the gateway instead of a service; repeatable");
  if (target == deploy::Target::Compose) {
    cmd->add_option("--models", c.options.models, "host folder mounted read-only as /opt/flowline/models");
    cmd->add_option("--publish-host", c.options.publish_host, "address the gateway's port is published on")
        ->capture_default_str();
  } else {
    cmd->add_option("--models", c.options.models,
                    "PersistentVolumeClaim mounted read-only as /opt/flowline/models in every pod");
    cmd->add_option("--name", c.options.name, "prefix of every object's name (default: the flow file's name)");
    cmd->add_option("--hpa", c.hpa, "EXECUTOR=MIN:MAX: a HorizontalPodAutoscaler on CPU use; repeatable");
    cmd->add_option("--hpa-cpu", c.options.hpa_cpu_percent, "target CPU use of --hpa, percent of one core")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
  }
  cmd->add_option("--port", c.options.gateway_port, "the gateway's port (default: the flow's with.port, else 8080)")
      ->check(CLI::Range(1, 65535));
  if (target == deploy::Target::Compose) {
    cmd->add_flag("--token", c.options.token,
                  "the gateway requires a bearer token: FLOWLINE_TOKEN from the environment compose runs in "
                  "(never written into a file)");
  } else {
    cmd->add_flag("--token", c.options.token,
                  "the gateway requires a bearer token: FLOWLINE_TOKEN from a Secret's key `token` (never "
                  "written into a file)");
    cmd->add_option("--token-secret", c.options.token_secret,
                    "the Secret that holds the token (default: NAME-token); implies --token");
  }
  cmd->callback([&c, target] { c.target = target; });
  return cmd;
}

}  // namespace

CLI::App* add_export_command(CLI::App& app, ExportCommand& c) {
  auto* cmd =
      app.add_subcommand("export", "Write a compose file or Kubernetes manifests that run a flow in containers");
  cmd->require_subcommand(1);
  add_target(*cmd, c, deploy::Target::Compose, "compose",
             "compose.yaml: the gateway and a service per executor container (docker compose, podman-compose)");
  add_target(*cmd, c, deploy::Target::Kubernetes, "kubernetes",
             "Kubernetes manifests: a ConfigMap with the flow, a Deployment and Service per executor and the gateway")
      ->alias("k8s");
  return cmd;
}

int command_export(ExportCommand c) {
  deploy::DeployPlan plan;
  try {
    parse_assignments(c);
    const std::string text = read_file(c.flow);
    const FlowConfig config = load_flow_config(c.flow, Registry::global(), DeviceCheck::Elsewhere);
    plan = deploy::make_plan(c.target, config, text, c.flow, c.options);
    read_python_files(plan);
  } catch (const Error& e) {
    print_load_error(e);
    return kExitUsage;
  }
  // Compose mounts the flow files from the folder; Kubernetes carries them in its ConfigMap, and the folder
  // holds manifests only (so that `kubectl apply -f DIR` applies it whole).
  std::map<std::string, std::string> files;
  if (c.target == deploy::Target::Compose) {
    files = plan.files;
    files["compose.yaml"] = deploy::compose_file(plan);
    for (const auto& s : plan.executors)
      for (const auto& [name, py] : s.py_files) files[s.py_folder + "/" + name] = py.text;
  } else {
    files = deploy::kubernetes_manifests(plan);
  }
  std::error_code ec;
  fs::create_directories(c.out_dir, ec);
  if (ec) {
    fmt::print(stderr, "error: cannot create '{}': {}\n", c.out_dir, ec.message());
    return kExitFailure;
  }
  for (const auto& [name, text] : files) {
    fs::create_directories((fs::path(c.out_dir) / name).parent_path(), ec);
    write_text(fs::path(c.out_dir) / name, text);
  }
  for (const auto& note : plan.notes) fmt::print(stderr, "note: {}\n", note);
  fmt::print("{}: wrote {} files to {}:", c.flow, files.size(), c.out_dir);
  for (const auto& [name, text] : files) fmt::print(" {}", name);
  fmt::print("\n  gateway on port {}; ", plan.gateway_port);
  if (plan.executors.empty()) fmt::print("no executor runs in a service of its own\n");
  for (std::size_t i = 0; i < plan.executors.size(); ++i) {
    const auto& s = plan.executors[i];
    fmt::print("{}{} -> {} x{}{}", i ? ", " : "services: ", s.executor, s.service, s.containers,
               s.gpu.kind == deploy::GpuRequest::Kind::None ? ""
               : s.gpu.kind == deploy::GpuRequest::Kind::All
                   ? " (all GPUs)"
                   : fmt::format(" ({} GPU{})", s.gpu.count, s.gpu.count == 1 ? "" : "s"));
  }
  if (!plan.executors.empty()) fmt::print("\n");
  return kExitOk;
}

}  // namespace flowline::cli
