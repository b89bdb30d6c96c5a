#include "test_support.hpp"

#include "flowline/device.hpp"

#include <cstdlib>

using namespace flowline;

namespace {
// Parses and validates YAML text; returns every diagnostic as one string per line ("" when valid).
std::string errors_of(const std::string& yaml) {
  try {
    load_flow_config_text(yaml, "flow.yml");
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}
}  // namespace

TEST_CASE("a misspelt executor type is reported at its line and column with a suggestion", "[config]") {
  CHECK(errors_of("executors:\n"
                  "  - name: splitter\n"
                  "    uses: TextSpliter\n") ==
        "flow.yml:3:11: executor 'splitter': unknown executor type 'TextSpliter' (did you mean 'TextSplitter'?); "
        "known types: Delay, FailIf, JsonlWriter, NoOp, SetTags, TextSplitter, TextStats, TsvWriter");
}

TEST_CASE("every config error is reported at once in file order", "[config]") {
  CHECK(errors_of("with:\n"
                  "  request_size: 0\n"
                  "  prefetch: 3\n"
                  "executors:\n"
                  "  - name: a\n"
                  "    uses: TextSplitter\n"
                  "    with:\n"
                  "      unt: sentence\n"
                  "      min_chars: many\n"
                  "    replica: 2\n"
                  "  - name: b\n"
                  "    uses: JsonlWriter\n"
                  "    needs: [aa]\n"
                  "    batching: {max_batch_size: -1}\n") ==
        "flow.yml:2:17: with.request_size: expected an integer >= 1, got 0\n"
        "flow.yml:3:3: with: unknown key 'prefetch'; expected one of: request_size, max_in_flight, queue_capacity\n"
        "flow.yml:8:7: executor 'a': unknown parameter 'unt' for TextSplitter (did you mean 'unit'?); its parameters: "
        "unit, output, min_chars\n"
        "flow.yml:9:7: executor 'a': parameter 'min_chars': expected int, got string \"many\"\n"
        "flow.yml:10:5: executor 'a': unknown key 'replica' (did you mean 'replicas'?); expected one of: name, uses, "
        "with, replicas, device, devices, needs, batching\n"
        "flow.yml:11:5: executor 'b': missing required parameter 'path' (string: output file, truncated at start)\n"
        "flow.yml:13:12: executor 'b': needs unknown executor 'aa' (did you mean 'a'?)\n"
        "flow.yml:14:32: executor 'b': batching.max_batch_size: expected an integer >= 0, got -1");
}

TEST_CASE("flowline::set_executor_parameter overrides a parameter and checks it like the file", "[config]") {
  FlowConfig config = parse_flow_config("executors:\n  - name: s\n    uses: TextSplitter\n", "flow.yml");
  set_executor_parameter(config, "s.min_chars=12");
  validate_flow_config(config);
  CHECK(config.executors[0].with.at("min_chars").as_int64() == 12);
  set_executor_parameter(config, "s.min_chars=many");
  try {
    validate_flow_config(config);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()) == "--set s.min_chars=many: executor 's': parameter 'min_chars': expected int, got string \"many\"");
  }
  CHECK_THROWS_WITH(set_executor_parameter(config, "x.y=1"), testing::contains("the flow has no executor 'x' (executors: s)"));
}

TEST_CASE("invalid YAML syntax is reported with its position", "[config]") {
  CHECK(errors_of("executors:\n  - name: [a\n") == "flow.yml:3:1: invalid YAML: end of sequence flow not found");
}

TEST_CASE("a flow without executors or of the wrong shape is rejected", "[config]") {
  CHECK(errors_of("with: {request_size: 3}\n") == "flow.yml: missing required key 'executors'");
  CHECK(errors_of("- a\n- b\n") == "flow.yml:1:1: a flow file must be a map with an 'executors' list");
  CHECK(errors_of("executors:\n  - uses: NoOp\n") == "flow.yml:2:5: executors[0]: missing required key 'name'");
}

TEST_CASE("environment variables are substituted in values", "[config]") {
  ::setenv("FLOWLINE_TEST_UNIT", "sentence", 1);
  FlowConfig config = parse_flow_config("executors:\n  - name: s\n    uses: TextSplitter\n"
                                        "    with: {unit: '${{ ENV.FLOWLINE_TEST_UNIT }}'}\n",
                                        "flow.yml");
  CHECK(config.executors[0].with.at("unit").as_string() == "sentence");
  CHECK(errors_of("executors:\n  - name: s\n    uses: ${{ ENV.FLOWLINE_TEST_UNSET_VARIABLE }}\n") ==
        "flow.yml:3:11: environment variable 'FLOWLINE_TEST_UNSET_VARIABLE' is not set (used as "
        "${{ ENV.FLOWLINE_TEST_UNSET_VARIABLE }})");
}

TEST_CASE("duplicate names, cycles and self-dependencies are config errors", "[config]") {
  CHECK(errors_of("executors:\n"
                  "  - {name: a, uses: NoOp, needs: [c]}\n"
                  "  - {name: b, uses: NoOp, needs: a}\n"
                  "  - {name: c, uses: NoOp, needs: b}\n"
                  "  - {name: d, uses: NoOp, needs: d}\n"
                  "  - {name: d, uses: NoOp}\n") ==
        "flow.yml:3:34: executors form a cycle: a -> c -> b -> a\n"
        "flow.yml:5:34: executor 'd': an executor cannot need itself\n"
        "flow.yml:6:12: executor 'd': the name is used twice");
}

TEST_CASE("a device that does not exist is named with the available ones", "[config][device]") {
  const std::string result = errors_of("executors:\n  - {name: a, uses: NoOp, device: 'cuda:7'}\n"
                                       "  - {name: b, uses: NoOp, device: gpu}\n");
  CHECK_THAT(result, testing::starts_with("flow.yml:2:35: executor 'a': device 'cuda:7' does not exist; available: cpu"));
  CHECK_THAT(result, testing::ends_with(
                         "flow.yml:3:35: executor 'b': invalid device 'gpu': expected cpu, cuda, cuda:N or auto"));
}

TEST_CASE("parameter defaults are filled in and typed values are converted", "[config]") {
  FlowConfig config = parse_flow_config(
      "executors:\n  - name: d\n    uses: Delay\n    with: {batch_ms: 2, record_replica: true}\n", "flow.yml");
  validate_flow_config(config);
  const auto& with = config.executors[0].with;
  CHECK(with.at("batch_ms").is_double());
  CHECK(with.at("doc_ms").as_double() == 0.0);
  CHECK(with.at("slow_replica").as_int64() == -1);
  CHECK(with.at("record_replica").as_bool());
}

TEST_CASE("quoted scalars stay strings while plain ones are typed", "[config]") {
  FlowConfig config = parse_flow_config(
      "executors:\n  - name: t\n    uses: SetTags\n    with:\n      tags: {a: '12', b: 12, c: 1.5, d: null, e: yes}\n",
      "flow.yml");
  const auto& tags = config.executors[0].with.at("tags").as_object();
  CHECK(tags.at("a").is_string());
  CHECK(tags.at("b").is_int64());
  CHECK(tags.at("c").is_double());
  CHECK(tags.at("d").is_null());
  CHECK(tags.at("e").is_string());  // YAML 1.2: only true/false are booleans
}

TEST_CASE("replicas are spread over a device list round-robin", "[config][device]") {
  ExecutorConfig e{.name = "enc", .uses = "NoOp", .replicas = 5};
  e.devices = {"cuda:0", "cuda:1"};
  CHECK(replica_devices(e) == std::vector<std::string>{"cuda:0", "cuda:1", "cuda:0", "cuda:1", "cuda:0"});
  e.devices.clear();
  e.device = "cpu";
  CHECK(replica_devices(e) == std::vector<std::string>(5, "cpu"));
}

TEST_CASE("a device list is checked device by device, and all needs a GPU", "[config][device]") {
  const std::string listed = errors_of("executors:\n  - {name: a, uses: NoOp, replicas: 2, devices: [cpu, 'cuda:9']}\n");
  CHECK_THAT(listed, testing::starts_with("flow.yml:2:49: executor 'a': device 'cuda:9' does not exist; available: cpu"));
  CHECK(errors_of("executors:\n  - {name: a, uses: NoOp, device: cpu, devices: [cpu]}\n") ==
        "flow.yml:2:49: executor 'a': give either device or devices, not both");
  if (cuda_device_count() == 0) {
    CHECK(errors_of("executors:\n  - {name: a, uses: NoOp, devices: all}\n") ==
          "flow.yml:2:36: executor 'a': devices: all, but no GPU is visible; available: cpu");
  }
}
