// Tests of the executor registry and typed parameters: duplicates, unknown names, defaults, endpoint dispatch.
#include "test_support.hpp"

using namespace flowline;

namespace {
class Echo : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{"Echo",
                        "test executor",
                        {ParamSpec::required_param("size", ParamType::Int, "a size"),
                         ParamSpec::optional("label", ParamType::String, "x", "a label")},
                        {"/echo"}};
  }
  explicit Echo(const ExecutorContext& c) : Executor(c) {
    bind("/echo", &Echo::echo);
    bind_default(&Echo::echo);
  }
  void echo(DocumentArray&) {}
};
}  // namespace

TEST_CASE("registry rejects a duplicate name with an error instead of exiting", "[registry]") {
  Registry registry;
  registry.add<Echo>();
  CHECK_THROWS_WITH(registry.add<Echo>(),
                    "executor type 'Echo' is registered twice (first by program, again by program)");
  CHECK(registry.size() == 1);
}

TEST_CASE("unknown executor names list the known names and suggest the closest", "[registry]") {
  Registry registry;
  register_builtin_executors(registry);
  CHECK_THROWS_WITH(registry.get("TextSpliter"),
                    "unknown executor type 'TextSpliter' (did you mean 'TextSplitter'?); known types: JsonlWriter, "
                    "NoOp, TextSplitter, TextStats, TsvWriter");
  CHECK_THROWS_WITH(registry.get("Zzz"), testing::starts_with("unknown executor type 'Zzz'; known types: JsonlWriter"));
}

TEST_CASE("registry rejects a default value of the wrong type", "[registry]") {
  Registry registry;
  ExecutorSpec spec{"Bad", "bad", {ParamSpec::optional("n", ParamType::Int, "three", "")}, {}};
  CHECK_THROWS_WITH(registry.add(spec, [](const ExecutorContext&) { return std::unique_ptr<Executor>(); }),
                    "executor type 'Bad': default of parameter 'n': expected int, got string \"three\"");
}

TEST_CASE("typed parameter access names executor, parameter and expected type", "[params]") {
  Params params("encoder", boost::json::object{{"batch", "big"}, {"n", -1}},
                {{"batch", SourceLocation{"flow.yml", 7, 14}}});
  CHECK_THROWS_WITH(params.get<int>("batch"),
                    "executor 'encoder': parameter 'batch': expected int, got string \"big\" (flow.yml:7:14)");
  CHECK_THROWS_WITH(params.get<std::size_t>("n"),
                    "executor 'encoder': parameter 'n': expected a non-negative int, got int -1");
  CHECK_THROWS_WITH(params.get<std::string>("missing"),
                    testing::starts_with("executor 'encoder': parameter 'missing' is not set"));
  CHECK(params.get<double>("n") == -1.0);
  CHECK(params.get_or<std::string>("missing", "fallback") == "fallback");
}

TEST_CASE("an executor dispatches by endpoint and falls back to its default handler", "[executor]") {
  struct Two : Executor {
    static ExecutorSpec spec() { return ExecutorSpec{"Two", "", {}, {"/a"}, false}; }
    explicit Two(const ExecutorContext& c) : Executor(c) {
      bind("/a", [](DocumentArray& d, const RequestInfo& r) { d[0].text = std::string(r.endpoint); });
    }
  };
  RuntimeInfo runtime{"two", "Two"};
  Params params;
  Two two(ExecutorContext{runtime, params});
  DocumentArray docs = testing::numbered_docs(1);
  two.handle("/a", docs, {});
  CHECK(docs[0].text == "/a");
  two.handle("/other", docs, {});  // no handler, no default: passes through
  CHECK(docs[0].text == "/a");
  CHECK(two.bound_endpoints() == std::vector<std::string>{"/a"});
}
