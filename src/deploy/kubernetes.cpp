// A deployment plan as Kubernetes manifests: a ConfigMap with the flow files, a Deployment and a Service
// per executor and for the gateway, and HorizontalPodAutoscalers where asked (plan.hpp).
#include "plan.hpp"
#include "yaml_tree.hpp"

#include <fmt/format.h>

namespace flowline::deploy {

namespace {

constexpr int kUid = 10001;  // the image's non-root user (docker/Dockerfile)

Yaml labels(const DeployPlan& plan, const std::string& name, const char* component) {
  return Yaml::map({{"app.kubernetes.io/name", name},
                    {"app.kubernetes.io/part-of", plan.name},
                    {"app.kubernetes.io/component", component},
                    {"app.kubernetes.io/managed-by", "flowline-export"}});
}

Yaml http_probe(const char* path, int period, int failures) {
  return Yaml::map({{"httpGet", Yaml::map({{"path", path}, {"port", "http"}})},
                    {"periodSeconds", period},
                    {"timeoutSeconds", 3},
                    {"failureThreshold", failures}});
}

// One container of flowline with its probes: started (model loaded: up to 10 minutes), alive, ready.
Yaml container(const DeployPlan& plan, const char* name, Yaml args, Yaml ports) {
  Yaml c = Yaml::map({{"name", name}, {"image", plan.options.image}, {"args", std::move(args)}});
  c["ports"] = std::move(ports);
  c["startupProbe"] = http_probe("/health", 5, 120);
  c["livenessProbe"] = http_probe("/health", 10, 3);
  c["readinessProbe"] = http_probe("/ready", 5, 2);
  c["securityContext"] =
      Yaml::map({{"allowPrivilegeEscalation", false}, {"capabilities", Yaml::map({{"drop", Yaml::list({"ALL"})}})}});
  Yaml mounts = Yaml::list({Yaml::map({{"name", "flow"}, {"mountPath", kFlowDir}, {"readOnly", true}})});
  if (!plan.options.models.empty())
    mounts.push(Yaml::map({{"name", "models"}, {"mountPath", kModelDir}, {"readOnly", true}}));
  c["volumeMounts"] = mounts;
  return c;
}

Yaml pod_volumes(const DeployPlan& plan) {
  Yaml volumes = Yaml::list({Yaml::map({{"name", "flow"}, {"configMap", Yaml::map({{"name", plan.name + "-flow"}})}})});
  if (!plan.options.models.empty())
    volumes.push(
        Yaml::map({{"name", "models"},
                   {"persistentVolumeClaim", Yaml::map({{"claimName", plan.options.models}, {"readOnly", true}})}}));
  return volumes;
}

Yaml deployment(const DeployPlan& plan, const std::string& name, const char* component, int replicas, Yaml c,
                Yaml volumes) {
  Yaml pod_labels = labels(plan, name, component);
  Yaml pod = Yaml::map({{"labels", pod_labels},
                        {"annotations", Yaml::map({{"prometheus.io/scrape", "true"},
                                                   {"prometheus.io/port", std::to_string(kHttpPort)},
                                                   {"prometheus.io/path", "/metrics"}})}});
  Yaml spec =
      Yaml::map({{"securityContext",
                  Yaml::map({{"runAsNonRoot", true}, {"runAsUser", kUid}, {"runAsGroup", kUid}, {"fsGroup", kUid}})},
                 // SIGTERM drains: what is in flight is answered (up to 30 s) before exit
                 {"terminationGracePeriodSeconds", 40},
                 {"containers", Yaml::list({std::move(c)})},
                 {"volumes", std::move(volumes)}});
  return Yaml::map(
      {{"apiVersion", "apps/v1"},
       {"kind", "Deployment"},
       {"metadata", Yaml::map({{"name", name}, {"labels", pod_labels}})},
       {"spec", Yaml::map({{"replicas", replicas},
                           {"selector", Yaml::map({{"matchLabels", Yaml::map({{"app.kubernetes.io/name", name}})}})},
                           {"template", Yaml::map({{"metadata", pod}, {"spec", spec}})}})}});
}

// A headless Service (clusterIP: None) resolves to its ready pods' addresses instead of one virtual IP.
Yaml service(const DeployPlan& plan, const std::string& name, const char* component, Yaml ports,
             bool headless = false) {
  Yaml spec = Yaml::map({{"selector", Yaml::map({{"app.kubernetes.io/name", name}})}});
  if (headless) spec["clusterIP"] = "None";
  spec["ports"] = std::move(ports);
  return Yaml::map({{"apiVersion", "v1"},
                    {"kind", "Service"},
                    {"metadata", Yaml::map({{"name", name}, {"labels", labels(plan, name, component)}})},
                    {"spec", spec}});
}

Yaml port(const char* name, int number) {
  return Yaml::map({{"name", name}, {"containerPort", number}, {"protocol", "TCP"}});
}

Yaml service_port(const char* name, int number, int target) {
  return Yaml::map({{"name", name}, {"port", number}, {"targetPort", target}, {"protocol", "TCP"}});
}

// Scales an executor's Deployment on its pods' CPU use (the one metric every cluster has without an
// adapter; docs/deploy.md shows the queue-depth metric for GPU executors).
Yaml autoscaler(const DeployPlan& plan, const ExecutorService& s) {
  Yaml target = Yaml::map({{"type", "Utilization"}, {"averageUtilization", plan.options.hpa_cpu_percent}});
  return Yaml::map(
      {{"apiVersion", "autoscaling/v2"},
       {"kind", "HorizontalPodAutoscaler"},
       {"metadata", Yaml::map({{"name", s.service}, {"labels", labels(plan, s.service, "executor")}})},
       {"spec",
        Yaml::map(
            {{"scaleTargetRef", Yaml::map({{"apiVersion", "apps/v1"}, {"kind", "Deployment"}, {"name", s.service}})},
             {"minReplicas", s.hpa.first},
             {"maxReplicas", s.hpa.second},
             {"metrics",
              Yaml::list({Yaml::map(
                  {{"type", "Resource"}, {"resource", Yaml::map({{"name", "cpu"}, {"target", target}})}})})}})}});
}

std::string executor_manifests(const DeployPlan& plan, const ExecutorService& s) {
  Yaml c =
      container(plan, "executor",
                Yaml::list({"serve", fmt::format("{}/{}", kFlowDir, s.flow_file), "--executor", s.executor, "--host",
                            "0.0.0.0", "--port", std::to_string(kWirePort), "--http-port", std::to_string(kHttpPort)}),
                Yaml::list({port("wire", kWirePort), port("http", kHttpPort)}));
  Yaml resources;
  if (s.gpu.kind != GpuRequest::Kind::None) resources["limits"] = Yaml::map({{"nvidia.com/gpu", s.gpu.count}});
  if (s.hpa.second > 0) resources["requests"] = Yaml::map({{"cpu", "1"}});  // utilization is relative to it
  if (!resources.empty()) c["resources"] = resources;
  Yaml volumes = pod_volumes(plan);
  std::string text;
  if (!s.py_files.empty()) {
    // A Python executor's py_modules files in a ConfigMap of their own, beside the flow's: source code that
    // changes with the flow, so one image serves every flow and `kubectl apply` updates them.
    Yaml files;
    for (const auto& [file, py] : s.py_files) files[file] = py.text;
    text = Yaml::map({{"apiVersion", "v1"},
                      {"kind", "ConfigMap"},
                      {"metadata", Yaml::map({{"name", s.py_config_map},
                                              {"labels", labels(plan, s.py_config_map, "python-modules")}})},
                      {"data", files}})
               .to_text(fmt::format("Executor '{}''s py_modules files, mounted at {}/{} in its pods.", s.executor,
                                    kPyDir, s.py_label)) +
           "---\n";
    c["volumeMounts"].push(Yaml::map(
        {{"name", "py-modules"}, {"mountPath", fmt::format("{}/{}", kPyDir, s.py_label)}, {"readOnly", true}}));
    volumes.push(Yaml::map({{"name", "py-modules"}, {"configMap", Yaml::map({{"name", s.py_config_map}})}}));
  }
  text += deployment(plan, s.service, "executor", s.containers, c, std::move(volumes))
              .to_text(fmt::format("Executor '{}' of {}: its server (flowline serve --executor), "
                                   "reached by the gateway on port {}.",
                                   s.executor, plan.flow_file, kWirePort));
  // Headless: the gateway looks its name up (remote.discovery: dns) and spreads requests over the ready
  // pods itself, re-resolving as they come and go; a virtual IP would balance connections, not requests.
  text += "---\n" +
          service(plan, s.service, "executor",
                  Yaml::list({service_port("wire", kWirePort, kWirePort), service_port("http", kHttpPort, kHttpPort)}),
                  true)
              .to_text("Headless: its name resolves to the ready pods, which the gateway spreads requests over.");
  if (s.hpa.second > 0) text += "---\n" + autoscaler(plan, s).to_text();
  return text;
}

std::string gateway_manifests(const DeployPlan& plan) {
  const std::string name = plan.name + "-gateway";
  Yaml c = container(plan, "gateway",
                     Yaml::list({"serve", fmt::format("{}/{}", kFlowDir, plan.gateway_file), "--host", "0.0.0.0",
                                 "--port", std::to_string(kHttpPort)}),
                     Yaml::list({port("http", kHttpPort)}));
  std::string about = fmt::format("The gateway of {}: Jina's, OpenAI's and TEI's HTTP APIs on port {} of Service {}.",
                                  plan.flow_file, plan.gateway_port, name);
  if (plan.options.token) {
    const std::string secret = plan.options.token_secret.empty() ? plan.name + "-token" : plan.options.token_secret;
    c["env"] = Yaml::list(
        {Yaml::map({{"name", "FLOWLINE_TOKEN"},
                    {"valueFrom", Yaml::map({{"secretKeyRef", Yaml::map({{"name", secret}, {"key", "token"}})}})}})});
    about += fmt::format(
        "\nRequests need its bearer token, from Secret {0} (key token): kubectl create secret generic {0} "
        "--from-literal=token=...\n(Prometheus then scrapes /metrics with that token: set it in the scrape config.)",
        secret);
  }
  return deployment(plan, name, "gateway", 1, c, pod_volumes(plan)).to_text(about) + "---\n" +
         service(plan, name, "gateway", Yaml::list({service_port("http", plan.gateway_port, kHttpPort)})).to_text();
}

}  // namespace

std::map<std::string, std::string> kubernetes_manifests(const DeployPlan& plan) {
  std::map<std::string, std::string> files;
  Yaml data;
  for (const auto& [file, text] : plan.files) data[file] = text;
  files["configmap.yaml"] =
      Yaml::map({{"apiVersion", "v1"},
                 {"kind", "ConfigMap"},
                 {"metadata",
                  Yaml::map({{"name", plan.name + "-flow"}, {"labels", labels(plan, plan.name + "-flow", "flow")}})},
                 {"data", data}})
          .to_text(fmt::format("The flow files of {}, mounted at {} in every pod (generated by `flowline export "
                               "kubernetes`).",
                               plan.flow_file, kFlowDir));
  files["gateway.yaml"] = gateway_manifests(plan);
  for (const auto& s : plan.executors) files[s.service + ".yaml"] = executor_manifests(plan, s);
  return files;
}

}  // namespace flowline::deploy
