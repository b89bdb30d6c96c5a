// CUDA only where a flow uses it: flowline's libraries link no CUDA library, a flow on the CPU maps none
// (read from the running launcher's /proc/PID/maps), and a flow that names a GPU where LibTorch's CUDA
// library is missing stops at start with exit 2, naming the library and the folder searched.
#include "test_support.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <set>

using namespace flowline;

namespace {

testing::ProcessResult launch(const std::string& args, const std::string& env = "") {
  return testing::run_process(fmt::format("{} '{}' {}", env, FLOWLINE_LAUNCHER, args));
}

// The PyPI wheel's libtorch_cpu.so itself needs these two (its profiler is built with CUPTI), so every
// process that links LibTorch maps them; no other GPU library may appear.
const std::set<std::string> kNeededByTorchCpu{"libcudart.so.13", "libcupti.so.13"};

boost::json::object maps_of_cpu_run(const std::string& name, const std::string& flow_text) {
  const auto dir = testing::scratch_dir(name);
  testing::write_text(dir / "flow.yml", flow_text);
  const auto r = testing::run_process(fmt::format("'{}' '{}/tests/launcher/cpu_run_maps.py' '{}' '{}' '{}'",
                                                  FLOWLINE_TEST_PYTHON, FLOWLINE_SOURCE_DIR, FLOWLINE_LAUNCHER,
                                                  (dir / "flow.yml").string(), dir.string()));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return boost::json::parse(r.out).as_object();
}

std::vector<std::string> strings(const boost::json::value& list) {
  std::vector<std::string> out;
  for (const auto& v : list.as_array()) out.emplace_back(v.as_string());
  return out;
}

}  // namespace

TEST_CASE("flowline's libraries and launcher need no CUDA library, only LibTorch's CPU part", "[launcher][light]") {
  const std::vector<std::string> binaries{FLOWLINE_LAUNCHER, FLOWLINE_CORE_LIBRARY, FLOWLINE_ENCODER_LIBRARY,
                                          FLOWLINE_TORCH_MODULE_LIBRARY};
  for (const auto& binary : binaries) {
    const auto needed = testing::run_process(fmt::format("readelf -d '{}'", binary));
    INFO(binary);
    REQUIRE(needed.exit_code == 0);
    for (const char* cuda : {"libtorch_cuda", "libc10_cuda", "libcudart", "libtorch.so", "libnccl", "libcublas"}) {
      CHECK_THAT(needed.out, !testing::contains(cuda));
    }
  }
}

TEST_CASE("a flow on the CPU maps no CUDA library, with NoOp executors, the SentenceEncoder or device auto",
          "[launcher][light]") {
  const std::string noop =
      "executors:\n  - {name: a, uses: NoOp}\n  - {name: b, uses: NoOp}\n  - {name: c, uses: NoOp}\n";
  const std::string encoder = fmt::format(
      "executors:\n  - name: enc\n    uses: SentenceEncoder\n    device: cpu\n    with: {{model: "
      "'{}/tests/data/tiny-bert'}}\n",
      FLOWLINE_SOURCE_DIR);
  std::vector<std::pair<std::string, std::string>> flows{{"light noop", noop}, {"light encoder", encoder}};
  // Without an NVIDIA driver, device auto is the CPU, found without loading CUDA.
  if (!std::filesystem::exists("/dev/nvidiactl") && !std::filesystem::exists("/dev/dxg")) {
    flows.emplace_back("light auto", "executors:\n  - {name: a, uses: NoOp, device: auto}\n");
  }
  for (const auto& [name, flow] : flows) {
    const auto report = maps_of_cpu_run(name, flow);
    INFO(name << ": " << boost::json::serialize(report));
    CHECK(report.at("exit_code").as_int64() == 0);
    CHECK(report.at("mapped").as_int64() > 0);  // the maps were read while the flow was up
    for (const auto& library : strings(report.at("gpu_libraries"))) {
      INFO(library);
      CHECK(kNeededByTorchCpu.count(library) == 1);
    }
    const auto ours = strings(report.at("flowline_libraries"));
    if (name == "light encoder") {
      // The encoder ran from its plugin and its CPU library; its GPU part stayed on disk.
      CHECK(std::count(ours.begin(), ours.end(), "libflowline_sentence_encoder.so.0.1.0") == 1);
      CHECK(std::none_of(ours.begin(), ours.end(),
                         [](const std::string& l) { return l.find("cuda") != std::string::npos; }));
    }
  }
}

TEST_CASE("a flow naming a GPU where LibTorch's CUDA library is absent stops with exit 2 naming it and the folder",
          "[launcher][light]") {
  const auto dir = testing::scratch_dir("light no cuda");
  const auto empty = dir / "no-cuda-here";
  std::filesystem::create_directories(empty);
  const std::string env = fmt::format("FLOWLINE_CUDA_LIBRARY_DIR='{}'", empty.string());
  const std::string expected =
      fmt::format("device 'cuda:0' needs LibTorch's CUDA library; none in {}: set up with GPU support", empty.string());
  testing::write_text(dir / "gpu.yml", "executors:\n  - {name: a, uses: NoOp, device: 'cuda:0'}\n");
  const auto validated = launch(fmt::format("validate '{}/gpu.yml'", dir.string()), env);
  CHECK(validated.exit_code == 2);
  CHECK_THAT(validated.err, testing::contains("gpu.yml:2:"));
  CHECK_THAT(validated.err, testing::contains(expected));
  testing::write_text(dir / "one.txt", "one line\n");
  const auto ran = launch(fmt::format("run '{}/gpu.yml' --input '{}/one.txt' --input-format lines --progress never",
                                      dir.string(), dir.string()),
                          env);
  CHECK(ran.exit_code == 2);
  CHECK_THAT(ran.err, testing::contains(expected));
  // devices: all says the same; auto falls back to the CPU.
  testing::write_text(dir / "all.yml", "executors:\n  - {name: a, uses: NoOp, devices: all}\n");
  const auto all = launch(fmt::format("validate '{}/all.yml'", dir.string()), env);
  CHECK(all.exit_code == 2);
  CHECK_THAT(all.err, testing::contains("devices: all needs LibTorch's CUDA library; none in " + empty.string()));
  testing::write_text(dir / "auto.yml", "executors:\n  - {name: a, uses: NoOp, device: auto}\n");
  const auto fallback =
      launch(fmt::format("run '{}/auto.yml' --input '{}/one.txt' --input-format lines --progress never", dir.string(),
                         dir.string()),
             env);
  INFO(fallback.err);
  CHECK(fallback.exit_code == 0);
}
