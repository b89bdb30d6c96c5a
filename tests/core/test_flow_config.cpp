// Flow configuration: parsing, substitution, path resolution and validation, with the exact messages users see.
#include "test_support.hpp"

#include "flowline/device.hpp"

#include <cstdlib>
#include <limits>

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
#ifdef FLOWLINE_WITH_PGVECTOR
  const std::string pgvector = "PgVectorWriter, ";
#else
  const std::string pgvector;  // libpq missing: the PgVectorWriter is not built
#endif
  CHECK(errors_of("executors:\n"
                  "  - name: splitter\n"
                  "    uses: TextSpliter\n") ==
        "flow.yml:3:11: executor 'splitter': unknown executor type 'TextSpliter' (did you mean 'TextSplitter'?); "
        "known types: ClipEncoder, Delay, FailIf, JsonlWriter, LateSink, NoOp, " +
            pgvector +
            "Reranker, SentenceEncoder, SequenceClassifier, SetTags, TextSplitter, TextStats, TokenClassifier, "
            "TorchModule, TsvWriter, VectorIndex");
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
        "flow.yml:3:3: with: unknown key 'prefetch'; expected one of: request_size, endpoint, max_in_flight, "
        "queue_capacity, "
        "port, host, protocol, title, gateway\n"
        "flow.yml:8:7: executor 'a': unknown parameter 'unt' for TextSplitter (did you mean 'unit'?); its parameters: "
        "unit, output, min_chars\n"
        "flow.yml:9:7: executor 'a': parameter 'min_chars': expected int, got string \"many\"\n"
        "flow.yml:10:5: executor 'a': unknown key 'replica' (did you mean 'replicas'?); expected one of: name, uses, "
        "py_modules, python, shared_memory, with, replicas, shards, device, devices, needs, batching, hosts, host, "
        "port, external, remote\n"
        "flow.yml:11:5: executor 'b': missing required parameter 'path' (path: output file, written as PATH.partial "
        "and renamed when the run completes)\n"
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
    CHECK(std::string(e.what()) ==
          "--set s.min_chars=many: executor 's': parameter 'min_chars': expected int, got string \"many\"");
  }
  CHECK_THROWS_WITH(set_executor_parameter(config, "x.y=1"),
                    testing::contains("the flow has no executor 'x' (executors: s)"));
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
  FlowConfig config = parse_flow_config(
      "executors:\n  - name: s\n    uses: TextSplitter\n"
      "    with: {unit: '${{ ENV.FLOWLINE_TEST_UNIT }}'}\n",
      "flow.yml");
  CHECK(config.executors[0].with.at("unit").as_string() == "sentence");
  CHECK(
      errors_of("executors:\n  - name: s\n    uses: ${{ ENV.FLOWLINE_TEST_UNSET_VARIABLE }}\n") ==
      "flow.yml:3:11: environment variable 'FLOWLINE_TEST_UNSET_VARIABLE' is not set (used as "
      "${{ ENV.FLOWLINE_TEST_UNSET_VARIABLE }}; ${{ ENV.FLOWLINE_TEST_UNSET_VARIABLE:-default }} gives it a default)");
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
  const std::string result = errors_of(
      "executors:\n  - {name: a, uses: NoOp, device: 'cuda:7'}\n"
      "  - {name: b, uses: NoOp, device: gpu}\n");
  CHECK_THAT(result, testing::starts_with("flow.yml:2:35: executor 'a': " + testing::without_gpu("device 'cuda:7'")));
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

TEST_CASE("plain scalars are typed by YAML 1.2's core schema number forms", "[config]") {
  FlowConfig config = parse_flow_config(
      "executors:\n  - name: t\n    uses: SetTags\n    with:\n      tags: "
      "{i: -7, p: +3, f1: .5, f2: 1., f3: -2.5e3, f4: 1E-2, f5: 1e400, "
      "big: 99999999999999999999, s1: ., s2: 1e, s3: 1.2.3, s4: -, s5: 0x10, "
      "inf: -.inf}\n",
      "flow.yml");
  const auto& tags = config.executors[0].with.at("tags").as_object();
  CHECK(tags.at("i").as_int64() == -7);
  CHECK(tags.at("p").as_int64() == 3);
  CHECK(tags.at("f1").as_double() == 0.5);
  CHECK(tags.at("f2").as_double() == 1.0);
  CHECK(tags.at("f3").as_double() == -2500.0);
  CHECK(tags.at("f4").as_double() == 0.01);
  CHECK(tags.at("f5").as_double() == std::numeric_limits<double>::infinity());
  CHECK(tags.at("big").as_string() == "99999999999999999999");  // past int64: kept as written
  for (const char* text : {"s1", "s2", "s3", "s4", "s5"}) CHECK(tags.at(text).is_string());
  CHECK(tags.at("inf").as_double() == -std::numeric_limits<double>::infinity());
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
  const std::string listed =
      errors_of("executors:\n  - {name: a, uses: NoOp, replicas: 2, devices: [cpu, 'cuda:9']}\n");
  CHECK_THAT(listed, testing::starts_with("flow.yml:2:49: executor 'a': " + testing::without_gpu("device 'cuda:9'")));
  CHECK(errors_of("executors:\n  - {name: a, uses: NoOp, device: cpu, devices: [cpu]}\n") ==
        "flow.yml:2:49: executor 'a': give either device or devices, not both");
  if (cuda_device_count() == 0) {
    CHECK_THAT(errors_of("executors:\n  - {name: a, uses: NoOp, devices: all}\n"),
               testing::starts_with("flow.yml:2:36: executor 'a': " + testing::without_gpu("devices: all")));
  }
}

TEST_CASE("replicas auto gives the type's count per GPU, one per CPU device and at most the type's limit",
          "[config][device]") {
  Registry registry;
  ExecutorSpec gpu_hungry{"Hungry", "wants several replicas per GPU", {}};
  gpu_hungry.replicas_per_gpu = 3;
  registry.add(gpu_hungry, [](const ExecutorContext&) -> std::unique_ptr<Executor> { return nullptr; });
  ExecutorSpec single{"Single", "owns a file", {}};
  single.max_replicas = 1;
  single.replicas_per_gpu = 3;
  registry.add(single, [](const ExecutorContext&) -> std::unique_ptr<Executor> { return nullptr; });
  auto replicas_of = [&](const std::string& executor) {
    const FlowConfig config = load_flow_config_text("executors:\n  - " + executor + "\n", "flow.yml", registry);
    CHECK(config.executors.at(0).auto_replicas);
    return config.executors.at(0).replicas;
  };
  const int gpus = cuda_device_count();
  CHECK(replicas_of("{name: a, uses: Hungry, replicas: auto}") == 1);  // device: cpu by default
  CHECK(replicas_of("{name: a, uses: Hungry, replicas: auto, devices: [cpu, cpu]}") == 2);
  CHECK(replicas_of("{name: a, uses: Hungry, replicas: auto, device: auto}") == (gpus > 0 ? 3 : 1));
  CHECK(replicas_of("{name: a, uses: Single, replicas: auto, device: auto}") == 1);
  if (gpus > 0) {
    CHECK(replicas_of("{name: a, uses: Hungry, replicas: auto, devices: all}") == 3 * gpus);
    CHECK(replicas_of("{name: a, uses: Hungry, replicas: auto, devices: [cuda:0, cpu]}") == 4);
  }
  CHECK(errors_of("executors:\n  - {name: a, uses: NoOp, replicas: many}\n") ==
        "flow.yml:2:37: executor 'a': replicas: expected an integer >= 1 or auto, got 'many'");
  CHECK(errors_of("executors:\n  - {name: a, uses: NoOp, replicas: 0}\n") ==
        "flow.yml:2:37: executor 'a': replicas: expected an integer >= 1 or auto, got 0");
}

TEST_CASE("a parameter outside its declared choices fails validation with the allowed values", "[config][params]") {
  CHECK(errors_of("executors:\n"
                  "  - name: split\n"
                  "    uses: TextSplitter\n"
                  "    with:\n"
                  "      unit: word\n") ==
        "flow.yml:5:7: executor 'split': parameter 'unit': expected one of paragraph, sentence, got 'word'");
  CHECK(errors_of(
            "executors:\n  - name: t\n    uses: TsvWriter\n    with: {path: t.tsv, columns: [text], rows: lines}\n") ==
        "flow.yml:4:42: executor 't': parameter 'rows': expected one of documents, chunks, got 'lines'");
  CHECK(errors_of(
            "executors:\n  - name: w\n    uses: JsonlWriter\n    with: {path: w.jsonl, fields: [text, colour]}\n") ==
        "flow.yml:4:27: executor 'w': parameter 'fields': expected each item one of id, text, blob, tensor, embedding, "
        "tags, mime_type, uri, scores, chunks, matches, parent_id, got 'colour'");
  CHECK(errors_of("executors:\n  - name: split\n    uses: TextSplitter\n    with: {unit: sentense}\n") ==
        "flow.yml:4:12: executor 'split': parameter 'unit': expected one of paragraph, sentence, got 'sentense' "
        "(did you mean 'sentence'?)");
  CHECK(errors_of("executors:\n  - name: split\n    uses: TextSplitter\n    with: {unit: sentence, output: chunks}\n")
            .empty());
}

TEST_CASE("a number outside its declared bounds fails validation with the bound", "[config][params]") {
  CHECK(errors_of("executors:\n  - name: split\n    uses: TextSplitter\n    with: {min_chars: -1}\n") ==
        "flow.yml:4:12: executor 'split': parameter 'min_chars': expected an integer ≥ 0, got -1");
  ParamSpec batch = ParamSpec::optional("batch_size", ParamType::IntOrAuto, 64, "").min(1);
  boost::json::value zero = 0, one = 1, automatic = "auto";
  CHECK(check_param_value(batch, zero) == "expected an integer ≥ 1 or auto, got 0");
  CHECK_FALSE(check_param_value(batch, one));
  CHECK_FALSE(check_param_value(batch, automatic));
  ParamSpec fraction = ParamSpec::optional("memory_fraction", ParamType::Double, 0.9, "").min(0).max(1);
  boost::json::value big = 1.5, half = 0.5;
  CHECK(check_param_value(fraction, big) == "expected a number ≥ 0 and ≤ 1, got 1.5");
  CHECK_FALSE(check_param_value(fraction, half));
}

TEST_CASE("the reference type of a parameter shows its choices and bounds", "[config][params]") {
  CHECK(describe_type(ParamSpec::choice("unit", {"paragraph", "sentence"}, "paragraph", "")) ==
        "string: one of paragraph, sentence");
  CHECK(describe_type(ParamSpec::choice_list("fields", {"text", "id"}, {}, "")) == "list, each one of text, id");
  CHECK(describe_type(ParamSpec::optional("n", ParamType::Int, 1, "").min(1)) == "int ≥ 1");
  CHECK(describe_type(ParamSpec::optional("f", ParamType::Double, 1, "").min(0).max(1)) == "double ≥ 0 and ≤ 1");
  CHECK(describe_type(ParamSpec::required_param("model", ParamType::Path, "")) == "path");
  CHECK(describe_type(ParamSpec::optional("batch_size", ParamType::IntOrAuto, 64, "").min(1)) == "int ≥ 1 or auto");
}

TEST_CASE("an environment variable may have a default for when it is unset or empty", "[config][env]") {
  auto unit_of = [](const std::string& value) {
    FlowConfig config = parse_flow_config(
        "executors:\n  - name: s\n    uses: TextSplitter\n"
        "    with:\n      unit: " +
            value + "\n",
        "flow.yml");
    return std::string(config.executors[0].with.at("unit").as_string());
  };
  ::unsetenv("FLOWLINE_TEST_DEFAULTED");
  CHECK(unit_of("${{ ENV.FLOWLINE_TEST_DEFAULTED:-sentence }}") == "sentence");
  CHECK(unit_of("${{ENV.FLOWLINE_TEST_DEFAULTED:-}}x") == "x");
  CHECK(unit_of("${{ ENV.FLOWLINE_TEST_DEFAULTED:-a }}/b") == "a/b");
  CHECK(unit_of("${{ ENV.FLOWLINE_TEST_DEFAULTED:-../models }}/m-${{ ENV.FLOWLINE_TEST_DEFAULTED:-1 }}") ==
        "../models/m-1");
  ::setenv("FLOWLINE_TEST_DEFAULTED", "", 1);
  CHECK(unit_of("${{ ENV.FLOWLINE_TEST_DEFAULTED:-a }}/b") == "a/b");
  CHECK(unit_of("'${{ ENV.FLOWLINE_TEST_DEFAULTED }}/b'") == "/b");  // empty without a default stays empty
  ::setenv("FLOWLINE_TEST_DEFAULTED", "set", 1);
  CHECK(unit_of("${{ ENV.FLOWLINE_TEST_DEFAULTED:-a }}/b") == "set/b");
  ::unsetenv("FLOWLINE_TEST_DEFAULTED");
  // A default is typed like any plain scalar once substituted: an int for an int parameter.
  FlowConfig config = parse_flow_config(
      "with:\n  request_size: ${{ ENV.FLOWLINE_TEST_DEFAULTED:-7 }}\n"
      "executors:\n  - {name: s, uses: NoOp}\n",
      "flow.yml");
  CHECK(config.options.request_size == 7);
  CHECK(errors_of("executors:\n  - name: s\n    uses: JsonlWriter\n    with:\n"
                  "      path: ${{ ENV.FLOWLINE_TEST_DEFAULTED }}/b\n") ==
        "flow.yml:5:13: environment variable 'FLOWLINE_TEST_DEFAULTED' is not set (used as "
        "${{ ENV.FLOWLINE_TEST_DEFAULTED }}; ${{ ENV.FLOWLINE_TEST_DEFAULTED:-default }} gives it a default)");
}

TEST_CASE("relative path parameters are relative to the flow file's folder, whatever the current directory",
          "[config][paths]") {
  const auto dir = testing::scratch_dir("config relative paths");
  const std::string yaml =
      "executors:\n  - name: w\n    uses: JsonlWriter\n    with: {path: ../out/w.jsonl}\n"
      "  - name: t\n    uses: TsvWriter\n    with: {path: /abs/t.tsv, columns: [text]}\n";
  std::filesystem::create_directories(dir / "flows");
  testing::write_text(dir / "flows" / "flow.yml", yaml);
  const auto here = std::filesystem::current_path();
  std::filesystem::create_directories(dir / "elsewhere");
  std::filesystem::current_path(dir / "elsewhere");
  FlowConfig config;
  try {
    config = load_flow_config("../flows/flow.yml");
  } catch (...) {
    std::filesystem::current_path(here);
    throw;
  }
  std::filesystem::current_path(here);
  const auto path = std::filesystem::path(std::string(config.executors[0].with.at("path").as_string()));
  CHECK(path == (dir / "out" / "w.jsonl").lexically_normal());
  CHECK(config.executors[1].with.at("path").as_string() == "/abs/t.tsv");
  // Validating again (as Flow does) changes nothing.
  validate_flow_config(config);
  CHECK(std::filesystem::path(std::string(config.executors[0].with.at("path").as_string())) == path);
  // A value set on the command line is relative to the current directory, as is a flow built in code.
  set_executor_parameter(config, "w.path=mine.jsonl");
  validate_flow_config(config);
  CHECK(config.executors[0].with.at("path").as_string() == "mine.jsonl");
  FlowConfig in_code;
  in_code.executors.push_back(ExecutorConfig{.name = "w", .uses = "JsonlWriter", .with = {{"path", "x/w.jsonl"}}});
  validate_flow_config(in_code);
  CHECK(in_code.executors[0].with.at("path").as_string() == "x/w.jsonl");
}

TEST_CASE("the flow schema lists every key the parser reads, with its type", "[config]") {
  for (const auto& key : flow_schema()) {
    INFO(key.path);
    CHECK_FALSE(key.type.empty());
    CHECK_FALSE(key.help.empty());
    if (key.value == SchemaValue::Int) CHECK(key.type == fmt::format("int >= {}", key.minimum));
    if (key.value == SchemaValue::IntOrAuto) CHECK(key.type == fmt::format("int >= {} or auto", key.minimum));
    const bool needs_assign = key.value != SchemaValue::Map && key.value != SchemaValue::Special;
    CHECK((key.assign != nullptr) == needs_assign);
  }
  FlowConfig config = parse_flow_config(
      "with: {request_size: 3, max_in_flight: 5, queue_capacity: 2}\n"
      "executors:\n  - name: a\n    uses: NoOp\n    replicas: 3\n"
      "    devices: cpu\n    needs: []\n"
      "    batching: {max_batch_size: 10, max_delay_ms: 1.5}\n",
      "flow.yml");
  CHECK(config.options.request_size == 3);
  CHECK(config.options.max_in_flight == 5);
  CHECK(config.options.queue_capacity == 2);
  const auto& e = config.executors.at(0);
  CHECK(e.replicas == 3);
  CHECK(e.devices == std::vector<std::string>{"cpu"});
  CHECK((e.needs && e.needs->empty()));
  CHECK(e.batching.max_batch_size == 10);
  CHECK(e.batching.max_delay == std::chrono::microseconds(1500));
  CHECK(e.location_of("batching.max_delay_ms").line == 8);
}

TEST_CASE("a remote executor names its hosts as HOST:PORT or Jina's host and port, and needs no uses",
          "[config][remote]") {
  const FlowConfig config = load_flow_config_text(
      "executors:\n"
      "  - name: enc\n"
      "    hosts: [gpu-a:9000, 10.0.0.2:9001]\n"
      "    devices: [cuda:7]\n"  // the servers' GPUs, not this machine's
      "    remote: {in_flight: 8, timeout_ms: 500, start_degraded: true}\n"
      "  - {name: jina, host: 10.0.0.5, port: 9002, external: true}\n",
      "flow.yml");
  REQUIRE(config.executors.size() == 2);
  CHECK(config.executors[0].hosts == std::vector<std::string>{"gpu-a:9000", "10.0.0.2:9001"});
  CHECK(config.executors[0].remote.in_flight == 8);
  CHECK(config.executors[0].remote.timeout == std::chrono::milliseconds(500));
  CHECK(config.executors[0].remote.start_degraded);
  CHECK(config.executors[1].hosts == std::vector<std::string>{"10.0.0.5:9002"});

  CHECK(errors_of("executors:\n  - {name: a, hosts: [gpu-a]}\n") ==
        "flow.yml:2:22: executor 'a': hosts: 'gpu-a': expected HOST:PORT with a port from 1 to 65535");
  CHECK(errors_of("executors:\n  - {name: a, hosts: ['h:70000']}\n") ==
        "flow.yml:2:22: executor 'a': hosts: 'h:70000': expected HOST:PORT with a port from 1 to 65535");
  CHECK(errors_of("executors:\n  - {name: a, host: h}\n") ==
        "flow.yml:2:21: executor 'a': host: needs a port (or write hosts: [HOST:PORT])");
  CHECK(errors_of("executors:\n  - {name: a, hosts: ['h:1'], with: {x: 1}}\n") ==
        "flow.yml:2:37: executor 'a': with: parameters need `uses` (the servers have their own)");
  CHECK(errors_of("executors:\n  - {name: a, hosts: ['h:1'], remote: {start_degraded: maybe}}\n") ==
        "flow.yml:2:56: executor 'a': remote.start_degraded: expected true or false, got 'maybe'");
  CHECK(errors_of("executors:\n  - {name: a}\n") ==
        "flow.yml:2:5: executor 'a': missing required key 'uses' (or 'hosts' for a remote executor)");
}

TEST_CASE("shared_memory takes bytes, a binary size or off, and a bad one is named at its line", "[config][python]") {
  auto parsed = [](const std::string& value) {
    const std::string yaml = "executors:\n  - {name: py, uses: P, py_modules: [p.py], shared_memory: " + value + "}\n";
    return parse_flow_config(yaml, "flow.yml").executors.at(0).shared_memory;
  };
  CHECK(parsed("1048576") == std::size_t{1} << 20);
  CHECK(parsed("64MiB") == std::size_t{64} << 20);
  CHECK(parsed("'512 KiB'") == std::size_t{512} << 10);
  CHECK(parsed("16GiB") == std::size_t{16} << 30);
  CHECK(parsed("65536B") == std::size_t{64} << 10);
  CHECK(parsed("0") == std::size_t{0});
  CHECK(parsed("off") == std::size_t{0});
  CHECK_FALSE(parse_flow_config("executors:\n  - {name: py, uses: P, py_modules: [p.py]}\n", "flow.yml")
                  .executors.at(0)
                  .shared_memory);  // unset: FLOWLINE_SHARED_MEMORY_BYTES, else 64 MiB, when the workers start

  const std::vector<std::string> bad{"-1", "64MB", "lots", "1.5GiB", "16KiB", "17GiB", "99999999999999999999999"};
  std::string yaml = "executors:\n";
  for (std::size_t i = 0; i < bad.size(); ++i)
    yaml += fmt::format("  - name: p{}\n    uses: P\n    py_modules: [p.py]\n    shared_memory: {}\n", i, bad[i]);
  std::string errors;
  try {
    parse_flow_config(yaml, "flow.yml");
  } catch (const ConfigError& e) {
    errors = e.what();
  }
  const std::string expected = "expected bytes (67108864), a size with a binary unit (64MiB, 512KiB, 1GiB) or off";
  CHECK(errors ==
        "flow.yml:5:20: executor 'p0': shared_memory: a size cannot be negative: got '-1'\n"
        "flow.yml:9:20: executor 'p1': shared_memory: '64MB': write the unit as MiB (64MiB): sizes here are binary, "
        "and MB could mean either\n"
        "flow.yml:13:20: executor 'p2': shared_memory: " +
            expected +
            ", got 'lots'\n"
            "flow.yml:17:20: executor 'p3': shared_memory: " +
            expected +
            ", got '1.5GiB'\n"
            "flow.yml:21:20: executor 'p4': shared_memory: '16KiB' (16 KiB) is too small to share a tensor: 0 or off "
            "for none, else at least 64 KiB (tensors under 16 KiB cross in the frames anyway)\n"
            "flow.yml:25:20: executor 'p5': shared_memory: '17GiB' is more than 16 GiB per worker connection: a "
            "segment takes memory as tensors fill it, in each worker\n"
            "flow.yml:29:20: executor 'p6': shared_memory: '99999999999999999999999' is more than 16 GiB per worker "
            "connection: a segment takes memory as tensors fill it, in each worker");

  // Where no worker processes start, the key means nothing: refused at its line.
  CHECK(errors_of("executors:\n  - name: split\n    uses: TextSplitter\n    shared_memory: 1MiB\n") ==
        "flow.yml:4:20: executor 'split': shared_memory: only an executor with py_modules has worker processes to "
        "share memory with (TextSplitter runs in this process)");
  CHECK(errors_of("executors:\n  - {name: far, hosts: ['h:1'], shared_memory: off}\n") ==
        "flow.yml:2:48: executor 'far': shared_memory: only an executor with py_modules has worker processes to "
        "share memory with");
}

TEST_CASE("remote.discovery takes none or dns, and bounds the replica threads it makes for the servers it may find",
          "[config][remote]") {
  const FlowConfig config = load_flow_config_text(
      "executors:\n  - name: enc\n    hosts: [enc-pods:9000]\n"
      "    remote: {discovery: dns, discovery_interval_ms: 2000, max_servers: 32}\n",
      "flow.yml");
  CHECK(config.executors[0].remote.discovery == RemoteOptions::Discovery::Dns);
  CHECK(config.executors[0].remote.discovery_interval == std::chrono::milliseconds(2000));
  CHECK(config.executors[0].remote.max_servers == 32);
  CHECK(errors_of("executors:\n  - {name: a, hosts: ['h:1'], remote: {discovery: consul}}\n") ==
        "flow.yml:2:51: executor 'a': remote.discovery: expected none or dns, got 'consul'");
  CHECK(errors_of("executors:\n  - {name: a, hosts: ['h:1'], remote: {max_servers: 1000}}\n") ==
        "flow.yml:2:53: executor 'a': remote.max_servers: expected at most 256, got 1000");
  CHECK(errors_of("executors:\n  - {name: a, hosts: ['h:1'], remote: {discovery: dns, max_servers: 256, "
                  "in_flight: 32}}\n") ==
        "flow.yml:2:39: executor 'a': remote.discovery: dns with 1 host name x max_servers 256 x connections 1 x "
        "in_flight 32 needs 8192 replica threads; at most 4096: lower max_servers or in_flight");
}

TEST_CASE("every reader of flow text refuses an alias bomb by the node budget, before building a tree",
          "[config][limits]") {
  std::string yaml = "executors:\n  - name: t\n    uses: SetTags\n    with:\n      tags:\n        a: &a [x, x, x, x]\n";
  for (char name = 'b'; name <= 'p'; ++name) {
    const char before = static_cast<char>(name - 1);
    yaml += fmt::format("        {0}: &{0} [*{1}, *{1}, *{1}, *{1}]\n", name, before);
  }
  // 4^16 = 4.3 billion nodes once expanded: parse_flow_config (the fuzz target's entry) and
  // load_flow_config_text both refuse it at the alias that passes the budget.
  const auto over = [](auto&& read) {
    try {
      read();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(over([&] { parse_flow_config(yaml, "flow.yml"); }),
             testing::contains("would expand to more than 75000 nodes"));
  CHECK_THAT(errors_of(yaml), testing::contains("would expand to more than 75000 nodes"));
}

TEST_CASE("Jina's protocol and port lists pair each protocol with its port, http and grpc", "[config]") {
  auto serve_of = [](const std::string& with) {
    return load_flow_config_text("with:\n" + with + "executors:\n  - name: s\n    uses: TextSplitter\n", "flow.yml")
        .serve;
  };
  const ServeSettings both = serve_of("  protocol: [http, grpc]\n  port: [8080, 12345]\n");
  CHECK(both.http == true);
  CHECK(both.port == 8080);
  CHECK(both.grpc_port == 12345);
  const ServeSettings reversed = serve_of("  protocol: [GRPC, http]\n  port: [12345, 8080]\n");
  CHECK(reversed.port == 8080);
  CHECK(reversed.grpc_port == 12345);
  const ServeSettings grpc_only = serve_of("  protocol: grpc\n  port: 12345\n");
  CHECK(grpc_only.http == false);
  CHECK(grpc_only.grpc_port == 12345);
  CHECK_FALSE(grpc_only.port.has_value());
  const ServeSettings http_only = serve_of("  port: 9000\n");
  CHECK(http_only.port == 9000);
  CHECK_FALSE(http_only.grpc_port.has_value());

  const std::string tail = "executors:\n  - name: s\n    uses: TextSplitter\n";
  CHECK(errors_of("with:\n  protocol: [http, grpc]\n  port: 8080\n" + tail) ==
        "flow.yml:2:13: with.protocol: grpc needs its port: with.port lists one port per protocol, in the same order");
  CHECK(errors_of("with:\n  protocol: [http, grpc]\n  port: [1, 2, 3]\n" + tail) ==
        "flow.yml:3:9: with.port: expected at most 2 ports (http and grpc), got 3");
  CHECK(errors_of("with:\n  protocol: [http, websocket]\n  port: [1, 2]\n" + tail) ==
        "flow.yml:2:13: with.protocol: 'websocket' is not served: flowline speaks http and grpc (no websocket)");
  CHECK(errors_of("with:\n  port: [8080, 99999]\n" + tail) ==
        "flow.yml:2:9: with.port: expected a port from 0 to 65535, got '99999'");
}
