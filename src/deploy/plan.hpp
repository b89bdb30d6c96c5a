// Deployment plans: how one flow file becomes containers — a gateway and one service per executor — for
// `flowline export compose|kubernetes` (src/cli/export.cpp). Private to the launcher.
//
// make_plan() reads a validated flow and its YAML text and decides, per executor: whether it becomes a
// service of its own (every executor does, but those that already name `hosts:`, which run elsewhere,
// and those kept in the gateway with ExportOptions::local), how many containers (pods) run it, which
// GPUs each container reserves, and the flow file it serves (the original, or a copy whose GPU indices are
// renumbered: a container given GPUs 2 and 3 sees them as cuda:0 and cuda:1). It also writes the
// gateway's flow: the original with every exported executor's `hosts:` pointing at its services.
// compose_file() and kubernetes_manifests() render a plan; they only format, all decisions are here.
//
// Everything is plain data; nothing here starts a process, opens a socket or touches the file system.
// Errors (a bad --scale, an executor name that makes no valid DNS name, `devices: all` on Kubernetes
// without --gpus) are flowline::Error with a message naming the executor and what was expected.
#pragma once

#include "flowline/flow_config.hpp"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace flowline::deploy {

enum class Target { Compose, Kubernetes };

// The image's fixed layout (docker/Dockerfile): flows are mounted beside the image's models folder, so
// that a flow's relative model path (../models/NAME, as in the repository's flows/) resolves the same
// inside a container as in a checkout.
inline constexpr const char* kFlowDir = "/opt/flowline/flows";
inline constexpr const char* kModelDir = "/opt/flowline/models";
// A Python executor's py_modules files (docs/python.md), one folder per executor: kPyDir/<its DNS label>/.
// Outside kFlowDir, whose Kubernetes ConfigMap mount is read-only and cannot hold another mount point.
inline constexpr const char* kPyDir = "/opt/flowline/py";
inline constexpr int kWirePort = 9000;  // executor servers: the binary protocol
inline constexpr int kHttpPort = 8080;  // the gateway; executor servers' /health, /ready, /metrics

struct ExportOptions {
  std::string image = "flowline:latest";
  std::string name;                        // resource prefix on Kubernetes; default: the flow file's stem
  std::map<std::string, int> scale;        // --scale EXECUTOR=N: containers (pods) running it
  std::map<std::string, int> gpus;         // --gpus EXECUTOR=N: GPUs per container, overriding the flow's devices
  std::set<std::string> local;             // --local EXECUTOR: stays inside the gateway
  std::string models;                      // --models DIR: mounted at kModelDir (compose: a host folder)
  std::string publish_host = "127.0.0.1";  // compose: where the gateway's port is published
  int gateway_port = 0;                    // published port; 0: the flow's with.port, else 8080
  std::map<std::string, std::pair<int, int>> hpa;  // --hpa EXECUTOR=MIN:MAX (Kubernetes)
  int hpa_cpu_percent = 70;
  // --token: the gateway requires a bearer token, never written into a file. Compose: FLOWLINE_TOKEN from
  // the environment compose runs in (it refuses to start without one). Kubernetes: FLOWLINE_TOKEN from the
  // Secret token_secret (default NAME-token), key "token".
  bool token = false;
  std::string token_secret;
};

// The GPUs one container of an executor asks for.
struct GpuRequest {
  enum class Kind { None, Ids, All, Count } kind = Kind::None;
  std::vector<int> ids;  // Ids: the host's GPU indices (compose device_ids)
  int count = 0;         // Ids and Count: how many; Kubernetes' nvidia.com/gpu
};

struct ExecutorService {
  std::string executor;   // the flow's name for it
  std::string service;    // DNS-safe: compose service name, or Kubernetes object name
  std::string flow_file;  // the file in the export folder it serves with --executor
  int containers = 1;
  GpuRequest gpu;
  std::vector<std::string> hosts;  // what the gateway's flow lists for it (host:port)
  // Kubernetes: the most pods the gateway spreads requests over (remote.max_servers of remote.discovery:
  // dns on the headless Service, whose name resolves to the ready pods); 0 elsewhere.
  int max_servers = 0;
  std::pair<int, int> hpa{0, 0};  // min and max pods; {0, 0}: none
  // A Python executor (py_modules): the files its container needs, by file name. make_plan fills `source`
  // (the file on this machine); the caller reads each into `text` before rendering (plans touch no files).
  // Compose mounts them from the export folder's `py_folder`; Kubernetes carries them in a ConfigMap
  // (`py_config_map`). Both appear in the container at kPyDir/<py_label>/, which the service's flow names.
  struct PyFile {
    std::string source;
    std::string text;
  };
  std::map<std::string, PyFile> py_files;
  std::string py_label;       // empty: not a Python executor
  std::string py_folder;      // compose: the export-folder folder holding py_files ("python/<py_label>")
  std::string py_config_map;  // Kubernetes: the ConfigMap holding py_files

  // The names its containers are reached by: compose names each (`service`, or `service-0`, `service-1`,
  // ... with --scale); on Kubernetes the pods share the Service's name.
  std::vector<std::string> container_names(Target target) const;
};

struct DeployPlan {
  Target target = Target::Compose;
  std::string name;          // the flow's name (file stem), DNS-safe
  std::string flow_file;     // the original flow, copied as it is
  std::string gateway_file;  // the gateway's flow
  int gateway_port = kHttpPort;
  std::map<std::string, std::string> files;  // export-folder file name -> content (flow files)
  std::vector<ExecutorService> executors;    // in flow order
  std::vector<std::string> notes;            // decisions worth telling the user (printed by the launcher)
  std::vector<std::string> env;              // ${{ ENV.NAME }} the flow reads: passed through by compose
  ExportOptions options;
};

// `config` is the validated flow loaded from `flow_path`, whose text is `yaml_text`.
DeployPlan make_plan(Target target, const FlowConfig& config, const std::string& yaml_text,
                     const std::string& flow_path, const ExportOptions& options);

// Renders the plan: a compose file (compose.yaml), or Kubernetes manifests (file name -> YAML documents).
std::string compose_file(const DeployPlan& plan);
std::map<std::string, std::string> kubernetes_manifests(const DeployPlan& plan);

// "Encoder_2" -> "encoder-2": lowercase letters, digits and '-', starting and ending alphanumeric, at most
// 63 characters (an RFC 1123 label). Throws flowline::Error when nothing valid is left.
std::string dns_label(const std::string& name, const std::string& what);

}  // namespace flowline::deploy
