// `flowline export compose|kubernetes`: what the launcher writes, read back with yaml-cpp, the gateway's
// flow validated by the launcher itself, and the Kubernetes manifests checked by kubernetes-validate
// (.venv-clients) against Kubernetes 1.30. The containers themselves run in scripts/compose-test.sh.
#include "ci.hpp"
#include "test_support.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

using namespace flowline;
namespace fs = std::filesystem;
using testing::running_in_ci;

namespace {

const fs::path kSource(FLOWLINE_SOURCE_DIR);
const fs::path kClientsPython = kSource / ".venv-clients/bin/python";

// A flow with an executor on the CPU, one on the host's second GPU, one spread over GPUs 2 and 3, and one
// that already runs elsewhere.
constexpr const char* kFlow = R"(with:
  request_size: 50
  port: 9090
executors:
  - name: prepare
    uses: NoOp
  - name: Encoder_A
    uses: NoOp
    device: cuda:1
    remote: {in_flight: 1024}
  - name: pair
    uses: NoOp
    devices: [cuda:2, cuda:3, cuda:2]
    replicas: 3
  - name: far
    uses: NoOp
    hosts: [far.example:9000]
)";

testing::ProcessResult flowline_cli(const std::string& args) {
  return testing::run_process(fmt::format("'{}' {}", FLOWLINE_LAUNCHER, args));
}

fs::path write_flow(const std::string& test, const std::string& text) {
  const fs::path dir = testing::scratch_dir(test);
  testing::write_text(dir / "flow.yml", text);
  return dir;
}

YAML::Node load(const fs::path& file) { return YAML::LoadFile(file.string()); }

std::string seq_text(const YAML::Node& seq) {
  std::string out;
  for (const auto& item : seq) out += (out.empty() ? "" : " ") + item.as<std::string>();
  return out;
}

}  // namespace

TEST_CASE(
    "export compose writes the gateway and one service per executor container, GPUs reserved as the flow "
    "names them") {
  const fs::path dir = write_flow("export_compose", kFlow);
  const auto r = flowline_cli(fmt::format("export compose {} -o {} --scale pair=2 --image localhost/flowline:cpu",
                                          (dir / "flow.yml").string(), (dir / "out").string()));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("executor 'far' already runs elsewhere (far.example:9000)") != std::string::npos);

  const YAML::Node services = load(dir / "out/compose.yaml")["services"];
  std::vector<std::string> names;
  for (const auto& s : services) names.push_back(s.first.as<std::string>());
  CHECK(names == std::vector<std::string>{"gateway", "prepare", "encoder-a", "pair-0", "pair-1"});

  const YAML::Node gateway = services["gateway"];
  CHECK(gateway["image"].as<std::string>() == "localhost/flowline:cpu");
  CHECK(seq_text(gateway["ports"]) == "127.0.0.1:9090:8080");  // the flow's port, on loopback
  CHECK(seq_text(gateway["command"]) == "serve /opt/flowline/flows/flow.gateway.yml --host 0.0.0.0 --port 8080");
  CHECK(seq_text(gateway["depends_on"]) == "prepare encoder-a pair-0 pair-1");
  const std::string probe = seq_text(gateway["healthcheck"]["test"]);
  CHECK(probe.find("/health") != std::string::npos);
  CHECK(probe.find("/ready") != std::string::npos);

  // Executors publish no port; each serves its executor over the wire protocol on 9000.
  const YAML::Node prepare = services["prepare"];
  CHECK_FALSE(prepare["ports"]);
  CHECK(seq_text(prepare["command"]) ==
        "serve /opt/flowline/flows/flow.yml --executor prepare --host 0.0.0.0 --port 9000 --http-port 8080");
  CHECK_FALSE(prepare["deploy"]);

  // cuda:1 is reserved by id and seen as cuda:0 inside its container: it serves a renumbered copy.
  const YAML::Node encoder = services["encoder-a"];
  const YAML::Node device = encoder["deploy"]["resources"]["reservations"]["devices"][0];
  CHECK(device["driver"].as<std::string>() == "nvidia");
  CHECK(seq_text(device["device_ids"]) == "1");
  CHECK(seq_text(device["capabilities"]) == "gpu");
  CHECK(seq_text(encoder["command"]).find("/opt/flowline/flows/flow.encoder-a.yml --executor Encoder_A") !=
        std::string::npos);
  const YAML::Node renumbered = load(dir / "out/flow.encoder-a.yml")["executors"][1];
  CHECK(renumbered["device"].as<std::string>() == "cuda:0");

  const YAML::Node pair = services["pair-1"]["deploy"]["resources"]["reservations"]["devices"][0];
  CHECK(seq_text(pair["device_ids"]) == "2 3");
  CHECK(seq_text(load(dir / "out/flow.pair.yml")["executors"][2]["devices"]) == "cuda:0 cuda:1 cuda:0");

  // The gateway's flow: exported executors name their containers; the external one keeps its host.
  const YAML::Node flow = load(dir / "out/flow.gateway.yml")["executors"];
  CHECK(seq_text(flow[0]["hosts"]) == "prepare:9000");
  CHECK(seq_text(flow[2]["hosts"]) == "pair-0:9000 pair-1:9000");
  CHECK(flow[2]["remote"]["start_degraded"].as<bool>());
  CHECK_FALSE(flow[2]["devices"]);
  CHECK(seq_text(flow[3]["hosts"]) == "far.example:9000");
  CHECK(flow[1]["uses"].as<std::string>() == "NoOp");  // kept: the gateway routes its endpoints
  const auto valid = flowline_cli(fmt::format("validate {}", (dir / "out/flow.gateway.yml").string()));
  INFO(valid.out << valid.err);
  CHECK(valid.exit_code == 0);
  CHECK(valid.out.find("pair (NoOp) remote, 4 in flight on each of pair-0:9000, pair-1:9000") != std::string::npos);
}

TEST_CASE("export keeps executors in the gateway when asked, and mounts the models folder") {
  const fs::path dir = write_flow("export_local", kFlow);
  const auto r =
      flowline_cli(fmt::format("export compose {} -o {} --local prepare --local pair --models /srv/models "
                               "--publish-host 0.0.0.0 --port 18080",
                               (dir / "flow.yml").string(), (dir / "out").string()));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const YAML::Node services = load(dir / "out/compose.yaml")["services"];
  CHECK(services.size() == 2);  // gateway and encoder-a
  CHECK(seq_text(services["gateway"]["ports"]) == "0.0.0.0:18080:8080");
  CHECK(seq_text(services["encoder-a"]["volumes"]).find("/srv/models:/opt/flowline/models:ro") != std::string::npos);
  const YAML::Node flow = load(dir / "out/flow.gateway.yml")["executors"];
  CHECK_FALSE(flow[0]["hosts"]);
  CHECK(flow[2]["devices"].size() == 3);  // still runs here, on its devices
}

TEST_CASE("export refuses what it cannot deploy, saying where and what was expected") {
  const fs::path dir = write_flow("export_refuses", kFlow);
  const std::string flow = (dir / "flow.yml").string();
  const std::string out = (dir / "out").string();
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"compose " + flow + " -o " + out + " --scale paer=2",
       "--scale names executor 'paer', which the flow does not have; did you mean 'pair'?"},
      {"compose " + flow + " -o " + out + " --scale pair=0", "--scale pair=0: at least one container"},
      {"compose " + flow + " -o " + out + " --gpus pair=two", "--gpus pair=two: 'two' is not a whole number"},
      {"compose " + flow + " -o " + out + " --gpus pair=1", "--gpus pair=1: the executor's devices name 2 GPUs"},
      {"compose " + flow + " -o " + out + " --scale pair", "--scale pair: expected EXECUTOR=VALUE"},
      {"compose " + flow + " -o " + out + " --local pair --scale pair=2",
       "--local pair: it stays in the gateway, so --scale, --gpus and --hpa do not apply"},
      {"kubernetes " + flow + " -o " + out + " --hpa pair=3:2", "--hpa pair=3:2: MIN >= 1 and MAX >= MIN"},
  };
  for (const auto& c : cases) {
    const auto r = flowline_cli("export " + c.args);
    INFO(c.args << "\n" << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
  }

  testing::write_text(dir / "all.yml", "executors:\n  - name: enc\n    uses: NoOp\n    devices: all\n");
  auto r = flowline_cli(fmt::format("export kubernetes {} -o {}", (dir / "all.yml").string(), out));
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("executor 'enc' uses `devices: all`: say how many GPUs each pod gets with --gpus enc=N") !=
        std::string::npos);

  // A sharded index is not split into a service per shard (yet): said, with the two ways that work.
  testing::write_text(dir / "shards.yml", "executors:\n  - name: index\n    uses: VectorIndex\n    shards: 2\n");
  r = flowline_cli(fmt::format("export compose {} -o {}", (dir / "shards.yml").string(), out));
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("executor 'index' has shards: 2: flowline export does not make a service per shard yet; keep it "
                   "in the gateway (--local index)") != std::string::npos);

  // A flow that is not valid is reported as validation does, line and column first.
  testing::write_text(dir / "bad.yml", "executors:\n  - name: enc\n    uses: NoOpp\n    device: cuda:x\n");
  r = flowline_cli(fmt::format("export compose {} -o {}", (dir / "bad.yml").string(), out));
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("bad.yml:3:11: executor 'enc': unknown executor type 'NoOpp'") != std::string::npos);
  CHECK(r.err.find("bad.yml:4:13: executor 'enc': invalid device 'cuda:x'") != std::string::npos);

  // A GPU that this machine does not have is fine: the devices are the deployment's.
  testing::write_text(dir / "gpu.yml", "executors:\n  - name: enc\n    uses: NoOp\n    device: cuda:7\n");
  r = flowline_cli(fmt::format("export compose {} -o {}", (dir / "gpu.yml").string(), out));
  INFO(r.err);
  CHECK(r.exit_code == 0);
}

TEST_CASE("export kubernetes writes manifests that Kubernetes 1.30's schemas accept") {
  const fs::path dir = write_flow("export_kubernetes", kFlow);
  const auto r =
      flowline_cli(fmt::format("export kubernetes {} -o {} --scale prepare=3 --hpa pair=2:6 --models "
                               "minilm-weights --image registry.example/flowline:0.1 --token-secret flowline-auth",
                               (dir / "flow.yml").string(), (dir / "out").string()));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* file :
       {"configmap.yaml", "gateway.yaml", "flow-prepare.yaml", "flow-encoder-a.yaml", "flow-pair.yaml"})
    CHECK(fs::exists(dir / "out" / file));

  const auto docs = YAML::LoadAllFromFile((dir / "out/flow-pair.yaml").string());
  REQUIRE(docs.size() == 3);  // Deployment, Service, HorizontalPodAutoscaler
  const YAML::Node deployment = docs[0];
  CHECK(deployment["kind"].as<std::string>() == "Deployment");
  CHECK(deployment["spec"]["replicas"].as<int>() == 2);
  const YAML::Node pod = deployment["spec"]["template"];
  CHECK(pod["metadata"]["annotations"]["prometheus.io/scrape"].as<std::string>() == "true");
  CHECK(pod["spec"]["securityContext"]["runAsNonRoot"].as<bool>());
  const YAML::Node container = pod["spec"]["containers"][0];
  CHECK(container["resources"]["limits"]["nvidia.com/gpu"].as<int>() == 2);
  CHECK(container["readinessProbe"]["httpGet"]["path"].as<std::string>() == "/ready");
  CHECK(container["livenessProbe"]["httpGet"]["path"].as<std::string>() == "/health");
  CHECK(pod["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"].as<std::string>() == "minilm-weights");
  CHECK(docs[2]["spec"]["maxReplicas"].as<int>() == 6);

  // The gateway's flow in the ConfigMap names each executor's Service.
  const YAML::Node config = load(dir / "out/configmap.yaml");
  const YAML::Node gateway_flow = YAML::Load(config["data"]["flow.gateway.yml"].as<std::string>());
  CHECK(seq_text(gateway_flow["executors"][2]["hosts"]) == "flow-pair:9000");
  // The executors' Services are headless: the gateway resolves each to its ready pods and spreads requests
  // over them, with room for twice the pods (or the autoscaler's maximum), at least 8.
  CHECK(docs[1]["kind"].as<std::string>() == "Service");
  CHECK(docs[1]["spec"]["clusterIP"].as<std::string>() == "None");
  CHECK_FALSE(YAML::LoadAllFromFile((dir / "out/gateway.yaml").string())[1]["spec"]["clusterIP"]);
  for (int i : {0, 1, 2}) {
    CHECK(gateway_flow["executors"][i]["remote"]["discovery"].as<std::string>() == "dns");
    CHECK_FALSE(gateway_flow["executors"][i]["remote"]["connections"]);
  }
  CHECK(gateway_flow["executors"][0]["remote"]["max_servers"].as<int>() == 8);
  CHECK(gateway_flow["executors"][1]["remote"]["max_servers"].as<int>() ==
        4);  // in_flight 1024: 4 x 1024 = 4,096 threads
  CHECK(gateway_flow["executors"][2]["remote"]["max_servers"].as<int>() == 12);
  CHECK(config["data"]["flow.yml"].as<std::string>() == kFlow);

  if (::access(kClientsPython.c_str(), X_OK) != 0) {
    const std::string missing = kClientsPython.string() + " does not exist (run scripts/setup-clients.sh)";
    if (running_in_ci()) FAIL(missing + "; CI=true is set, so this fails instead of skipping");
    FLOWLINE_SKIP(missing);
  }
  const auto check =
      testing::run_process(fmt::format("'{}' -m kubernetes_validate --kubernetes-version 1.30.0 --strict {}/*.yaml",
                                       kClientsPython.string(), (dir / "out").string()));
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
  CHECK(check.out.find("INFO") != std::string::npos);  // it printed a verdict per resource
  CHECK(check.out.find("ERROR") == std::string::npos);
}

TEST_CASE("export keeps replicas: auto, device: auto and batch_size: auto for the machines that run the flow") {
  // Resolved on the exporting machine, auto would carry this machine's GPU count into every container.
  const std::string model = (kSource / "tests/data/tiny-models/bert-prompt-excluded").string();
  const fs::path dir = write_flow("export_auto", fmt::format(R"(executors:
  - name: encoder
    uses: SentenceEncoder
    replicas: auto
    device: auto
    with: {{model: {}, batch_size: auto, max_batch_tokens: auto}}
  - name: pass
    uses: NoOp
    replicas: auto
)",
                                                             model));
  for (const char* target : {"compose", "kubernetes"}) {
    INFO(target);
    const fs::path out = dir / target;
    const auto r = flowline_cli(
        fmt::format("export {} {} -o {} --gpus encoder=2", target, (dir / "flow.yml").string(), out.string()));
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    YAML::Node flow;
    if (std::string(target) == "compose") {
      flow = load(out / "flow.yml");
    } else {
      for (const auto& doc : YAML::LoadAllFromFile((out / "configmap.yaml").string())) {
        if (doc["data"] && doc["data"]["flow.yml"]) flow = YAML::Load(doc["data"]["flow.yml"].as<std::string>());
      }
    }
    REQUIRE(flow["executors"]);
    for (const auto& e : flow["executors"]) CHECK(e["replicas"].as<std::string>() == "auto");
    CHECK(flow["executors"][0]["device"].as<std::string>() == "auto");
    CHECK(flow["executors"][0]["with"]["batch_size"].as<std::string>() == "auto");
    CHECK(flow["executors"][0]["with"]["max_batch_tokens"].as<std::string>() == "auto");
  }
}

TEST_CASE("export wires the gateway's bearer token by reference, never its value") {
  const fs::path dir = write_flow("export_token", kFlow);
  const std::string secret_value = "s3cr3t-token-value-never-in-files";
  ::setenv("FLOWLINE_TOKEN", secret_value.c_str(), 1);  // what a careless export could copy
  const auto compose = flowline_cli(
      fmt::format("export compose {} -o {} --token", (dir / "flow.yml").string(), (dir / "compose").string()));
  const auto k8s = flowline_cli(
      fmt::format("export kubernetes {} -o {} --token", (dir / "flow.yml").string(), (dir / "k8s").string()));
  const auto named = flowline_cli(fmt::format("export kubernetes {} -o {} --token-secret api-auth",
                                              (dir / "flow.yml").string(), (dir / "named").string()));
  const auto bad = flowline_cli(fmt::format("export kubernetes {} -o {} --token-secret Bad_Name",
                                            (dir / "flow.yml").string(), (dir / "bad").string()));
  ::unsetenv("FLOWLINE_TOKEN");
  INFO(compose.out << compose.err << k8s.out << k8s.err);
  REQUIRE(compose.exit_code == 0);
  REQUIRE(k8s.exit_code == 0);
  REQUIRE(named.exit_code == 0);
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--token-secret 'Bad_Name': expected a Secret name") != std::string::npos);
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) CHECK(testing::read_text(entry.path()).find(secret_value) == std::string::npos);
  }
  // Compose: the gateway's environment names the variable, which compose substitutes at `up`.
  const YAML::Node gateway = load(dir / "compose/compose.yaml")["services"]["gateway"];
  CHECK(seq_text(gateway["environment"])
            .find("FLOWLINE_TOKEN=${FLOWLINE_TOKEN:?set FLOWLINE_TOKEN to the gateway's bearer token}") !=
        std::string::npos);
  // Kubernetes: a secretKeyRef, to the default Secret NAME-token or the one named.
  auto token_ref = [&](const fs::path& file) {
    const YAML::Node env = YAML::LoadAllFromFile(file.string())[0]["spec"]["template"]["spec"]["containers"][0]["env"];
    REQUIRE(env.size() == 1);
    CHECK(env[0]["name"].as<std::string>() == "FLOWLINE_TOKEN");
    CHECK(env[0]["valueFrom"]["secretKeyRef"]["key"].as<std::string>() == "token");
    return env[0]["valueFrom"]["secretKeyRef"]["name"].as<std::string>();
  };
  CHECK(token_ref(dir / "k8s/gateway.yaml") == "flow-token");
  CHECK(token_ref(dir / "named/gateway.yaml") == "api-auth");
  // Executors' pods serve no client: no token there.
  CHECK_FALSE(YAML::LoadAllFromFile(
      (dir / "k8s/flow-pair.yaml").string())[0]["spec"]["template"]["spec"]["containers"][0]["env"]);
}

namespace {

constexpr const char* kShout = R"(import flowline


class Shout(flowline.Executor):
    @flowline.requests
    def shout(self, docs, parameters, **kwargs):
        for d in docs:
            d.text = d.text.upper()
)";

// A flow with a Python executor whose file lies in a subfolder of the flow's, and a C++ one.
fs::path write_python_flow(const std::string& test) {
  const fs::path dir = testing::scratch_dir(test);
  fs::create_directories(dir / "executors");
  testing::write_text(dir / "executors/shout.py", kShout);
  testing::write_text(dir / "flow.yml",
                      "executors:\n  - name: prepare\n    uses: NoOp\n  - name: shout\n    uses: Shout\n"
                      "    py_modules: [executors/shout.py]\n    replicas: 2\n    shared_memory: 8MiB\n");
  return dir;
}

}  // namespace

TEST_CASE(
    "export compose mounts a Python executor's py_modules files where the flow its container serves names "
    "them") {
  const fs::path dir = write_python_flow("export_python_compose");
  const auto r =
      flowline_cli(fmt::format("export compose {} -o {}", (dir / "flow.yml").string(), (dir / "out").string()));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.find("executor 'shout' runs Python: its image needs python3 (docker/Dockerfile built with "
                   "--build-arg PYTHON=1), and python/shout/ carries its py_modules files (1)") != std::string::npos);
  CHECK(testing::read_text(dir / "out/python/shout/shout.py") == kShout);

  const YAML::Node shout = load(dir / "out/compose.yaml")["services"]["shout"];
  CHECK(seq_text(shout["command"]) ==
        "serve /opt/flowline/flows/flow.shout.yml --executor shout --host 0.0.0.0 --port 9000 --http-port 8080");
  CHECK(seq_text(shout["volumes"]) ==
        "./flow.shout.yml:/opt/flowline/flows/flow.shout.yml:ro ./python/shout:/opt/flowline/py/shout:ro");
  // The C++ executor's container serves the original flow and mounts no Python.
  CHECK(seq_text(load(dir / "out/compose.yaml")["services"]["prepare"]["volumes"]) ==
        "./flow.yml:/opt/flowline/flows/flow.yml:ro");

  const YAML::Node served = load(dir / "out/flow.shout.yml")["executors"][1];
  CHECK(seq_text(served["py_modules"]) == "/opt/flowline/py/shout/shout.py");
  CHECK(served["replicas"].as<int>() == 2);                    // two workers in the container
  CHECK(served["shared_memory"].as<std::string>() == "8MiB");  // their segments, made in the container
  const YAML::Node gateway = load(dir / "out/flow.gateway.yml")["executors"][1];
  CHECK(seq_text(gateway["hosts"]) == "shout:9000");
  CHECK_FALSE(gateway["shared_memory"]);  // the gateway starts no worker
  const auto valid = flowline_cli(fmt::format("validate {}", (dir / "out/flow.gateway.yml").string()));
  INFO(valid.out << valid.err);
  CHECK(valid.exit_code == 0);

  // What the container sees: the served flow, with the mount's target read as the export folder's copy,
  // loads the class from the copied file (the worker's --check runs it).
  std::string text = testing::read_text(dir / "out/flow.shout.yml");
  const std::string mount = "/opt/flowline/py/shout";
  for (auto at = text.find(mount); at != std::string::npos; at = text.find(mount, at))
    text.replace(at, mount.size(), (dir / "out/python/shout").string());
  testing::write_text(dir / "out/as-mounted.yml", text);
  const auto loads = flowline_cli(fmt::format("validate {}", (dir / "out/as-mounted.yml").string()));
  INFO(loads.out << loads.err);
  CHECK(loads.exit_code == 0);
  fs::remove(dir / "out/python/shout/shout.py");
  CHECK(flowline_cli(fmt::format("validate {}", (dir / "out/as-mounted.yml").string())).exit_code != 0);

  const auto local = flowline_cli(
      fmt::format("export compose {} -o {} --local shout", (dir / "flow.yml").string(), (dir / "out3").string()));
  CHECK(local.exit_code == 2);
  CHECK(local.err.find("--local shout: a Python executor (py_modules) runs in a service of its own") !=
        std::string::npos);

  // One folder per executor in the container: two files of one name are refused, naming both.
  fs::create_directories(dir / "other");
  testing::write_text(dir / "other/shout.py", kShout);
  testing::write_text(dir / "twice.yml",
                      "executors:\n  - name: shout\n    uses: Shout\n    py_modules: [executors/shout.py, "
                      "other/shout.py]\n");
  const auto twice =
      flowline_cli(fmt::format("export compose {} -o {}", (dir / "twice.yml").string(), (dir / "out2").string()));
  CHECK(twice.exit_code == 2);
  CHECK(twice.err.find("share the file name shout.py, and a container gets them in one folder: rename one") !=
        std::string::npos);
}

TEST_CASE("export kubernetes carries a Python executor's py_modules files in a ConfigMap mounted in its pods") {
  const fs::path dir = write_python_flow("export_python_kubernetes");
  const auto r =
      flowline_cli(fmt::format("export kubernetes {} -o {}", (dir / "flow.yml").string(), (dir / "out").string()));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto docs = YAML::LoadAllFromFile((dir / "out/flow-shout.yaml").string());
  REQUIRE(docs.size() == 3);  // ConfigMap, Deployment, Service
  CHECK(docs[0]["kind"].as<std::string>() == "ConfigMap");
  CHECK(docs[0]["metadata"]["name"].as<std::string>() == "flow-shout-py");
  CHECK(docs[0]["data"]["shout.py"].as<std::string>() == kShout);
  const YAML::Node pod = docs[1]["spec"]["template"]["spec"];
  CHECK(pod["volumes"][1]["name"].as<std::string>() == "py-modules");
  CHECK(pod["volumes"][1]["configMap"]["name"].as<std::string>() == "flow-shout-py");
  const YAML::Node mount = pod["containers"][0]["volumeMounts"][1];
  CHECK(mount["name"].as<std::string>() == "py-modules");
  CHECK(mount["mountPath"].as<std::string>() == "/opt/flowline/py/shout");
  CHECK(seq_text(pod["containers"][0]["args"]).find("/opt/flowline/flows/flow.shout.yml --executor shout") !=
        std::string::npos);
  const YAML::Node flows = load(dir / "out/configmap.yaml")["data"];
  const YAML::Node served = YAML::Load(flows["flow.shout.yml"].as<std::string>())["executors"][1];
  CHECK(seq_text(served["py_modules"]) == "/opt/flowline/py/shout/shout.py");
  CHECK(served["shared_memory"].as<std::string>() == "8MiB");
  // The C++ executor's pods mount no Python.
  CHECK(YAML::LoadAllFromFile((dir / "out/flow-prepare.yaml").string())[0]["spec"]["template"]["spec"]["volumes"]
            .size() == 1);

  if (::access(kClientsPython.c_str(), X_OK) != 0) {
    const std::string missing = kClientsPython.string() + " does not exist (run scripts/setup-clients.sh)";
    if (running_in_ci()) FAIL(missing + "; CI=true is set, so this fails instead of skipping");
    FLOWLINE_SKIP(missing);
  }
  const auto check =
      testing::run_process(fmt::format("'{}' -m kubernetes_validate --kubernetes-version 1.30.0 --strict {}/*.yaml",
                                       kClientsPython.string(), (dir / "out").string()));
  INFO(check.out << check.err);
  CHECK(check.exit_code == 0);
  CHECK(check.out.find("ERROR") == std::string::npos);
}
