// Request parameters: declared per endpoint beside an executor's spec, checked once by the core with one
// number reader before the handler runs, read typed by the handler; in a flow, in the executor harness, and
// in the registry's own checks of the declarations.
#include "executor_runner.hpp"
#include "test_support.hpp"

#include "flowline/flow.hpp"

using namespace flowline;
namespace json = boost::json;

namespace {
// Answers each document with the limit and mode its handler read, typed; counts its calls.
class Limited : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"Limited", "test executor", {}, {"/search"}}; }
  static std::vector<EndpointParams> request_params() {
    return {{"/search",
             {ParamSpec::optional("limit", ParamType::Int, nullptr, "matches per query").min(1).max(100),
              ParamSpec::optional("scale", ParamType::Double, 1.0, "a factor")}},
            {std::string(kDefaultEndpoint), {ParamSpec::choice("mode", {"fast", "exact"}, "fast", "how")}}};
  }
  explicit Limited(const ExecutorContext& c) : Executor(c) {
    bind("/search", [this](DocumentArray& docs, const RequestInfo& request) {
      ++calls;
      for (auto& d : docs) {
        d.tags["limit"] = static_cast<std::int64_t>(request.param_or<std::size_t>("limit", 10));
        d.tags["scale"] = request.param<double>("scale");
        d.tags["mode"] = request.param<std::string>("mode");
      }
    });
    bind_default([](DocumentArray&, const RequestInfo&) {});
  }
  static inline std::atomic<int> calls{0};
};

Registry& limited_registry() {
  static Registry registry;
  static const bool added = [] {
    registry.add<Limited>();
    return true;
  }();
  (void)added;
  return registry;
}

DocumentArray one_doc() {
  DocumentArray docs;
  docs.push_back(Document("q"));
  return docs;
}
}  // namespace

TEST_CASE("one number reader: 5 and 5.0 are the integer 5; 5.5, \"5\", true and 1e300 are not", "[params]") {
  for (const json::value& five : {json::value(5), json::value(5.0), json::value(std::uint64_t{5})}) {
    json::value v = five;
    CHECK_FALSE(check_param_value(ParamType::Int, v).has_value());
    REQUIRE(v.is_int64());
    CHECK(v.get_int64() == 5);
  }
  for (const json::value& bad : {json::value(5.5), json::value("5"), json::value(true), json::value(1e300),
                                 json::value(-1e300), json::value(9007199254740994.0)}) {
    json::value v = bad;
    INFO(json::serialize(bad));
    CHECK(check_param_value(ParamType::Int, v).has_value());
  }
  json::value whole = -7.0;
  CHECK_FALSE(check_param_value(ParamType::IntOrAuto, whole).has_value());
  CHECK(whole == json::value(-7));
}

TEST_CASE("a request's parameters are checked against the endpoint's declarations and read typed", "[params]") {
  const auto& declared = limited_registry().get("Limited").request_params;
  const auto checked =
      check_request_params(declared, "idx", "/search", json::object{{"limit", 5.0}, {"mode", "exact"}, {"other", "x"}});
  CHECK(checked.parameters.at("limit") == json::value(5));  // in the checked form
  CHECK(checked.declared.get<std::size_t>("limit") == 5);
  CHECK(checked.declared.get<double>("scale") == 1.0);  // its default
  CHECK(checked.declared.get<std::string>("mode") == "exact");
  CHECK(checked.unknown == std::vector<std::string>{"other"});
  CHECK(checked.parameters.at("other") == json::value("x"));  // kept: meant for another executor

  const auto refusal = [&](const json::object& parameters) -> std::string {
    try {
      check_request_params(declared, "idx", "/search", parameters);
    } catch (const RequestError& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(refusal({{"limit", 5.5}}) == "parameter 'limit': expected an integer from 1 to 100, got 5.5 (idx on /search)");
  CHECK(refusal({{"limit", "3"}}) ==
        "parameter 'limit': expected an integer from 1 to 100, got \"3\" (idx on /search)");
  CHECK(refusal({{"limit", true}}) ==
        "parameter 'limit': expected an integer from 1 to 100, got true (idx on /search)");
  CHECK(refusal({{"limit", 1e300}}) ==
        "parameter 'limit': expected an integer from 1 to 100, got 1e+300 (idx on /search)");
  CHECK(refusal({{"limit", 0}}) == "parameter 'limit': expected an integer from 1 to 100, got 0 (idx on /search)");
  CHECK(refusal({{"scale", "big"}}) == "parameter 'scale': expected a number, got \"big\" (idx on /search)");
  CHECK_THAT(
      refusal({{"mode", "exakt"}}),
      testing::starts_with("parameter 'mode': expected one of fast, exact, got 'exakt' (did you mean 'exact'?)"));
  CHECK(refusal({{"limit", nullptr}}) == "accepted");  // null: not given
  // Another endpoint reads only the declarations of every endpoint: limit is not checked there.
  CHECK_NOTHROW(check_request_params(declared, "idx", "/index", json::object{{"limit", "any"}}));
}

TEST_CASE("the registry refuses request parameters of an endpoint the spec lacks, twice a name, or a bad default",
          "[params][registry]") {
  const ExecutorSpec spec{"Declares", "test", {}, {"/a"}};
  const ExecutorFactory factory = [](const ExecutorContext&) -> std::unique_ptr<Executor> { return nullptr; };
  Registry registry;
  CHECK_THROWS_WITH(registry.add(spec, {{"/b", {ParamSpec::optional("x", ParamType::Int, 1, "")}}}, factory),
                    "executor type 'Declares': request parameters for endpoint '/b', which its spec does not declare");
  CHECK_THROWS_WITH(registry.add(spec,
                                 {{"/a", {ParamSpec::optional("x", ParamType::Int, 1, "")}},
                                  {"*", {ParamSpec::optional("x", ParamType::Bool, false, "")}}},
                                 factory),
                    "executor type 'Declares': request parameter 'x' of /a is declared twice or has no name");
  CHECK_THROWS_WITH(registry.add(spec, {{"/a", {ParamSpec::optional("x", ParamType::Int, 0, "").min(1)}}}, factory),
                    testing::starts_with("executor type 'Declares': default of request parameter 'x':"));
  CHECK(registry.size() == 0);
}

TEST_CASE("in a flow, a request whose parameter breaks its declaration fails as the request's own, unrun",
          "[params][flow]") {
  Flow flow(FlowOptions{}, limited_registry());
  flow.add({.name = "idx", .uses = "Limited"});
  flow.start();
  const int before = Limited::calls;
  const DocumentArray out = flow.post("/search", one_doc(), PostOptions{.parameters = {{"limit", 5.0}}});
  CHECK(out[0].tags.at("limit") == json::value(5));
  CHECK(out[0].tags.at("mode") == json::value("fast"));
  CHECK(Limited::calls == before + 1);

  ArraySource source(one_doc());
  std::vector<Response> answers;
  flow.post(
      "/search", source, [&](Response&& r) { answers.push_back(std::move(r)); },
      PostOptions{.parameters = {{"limit", 5.5}}});
  REQUIRE(answers.size() == 1);
  CHECK(answers[0].request_error);
  CHECK(answers[0].error == "parameter 'limit': expected an integer from 1 to 100, got 5.5 (idx on /search)");
  CHECK(answers[0].error_executor == "idx");
  CHECK(Limited::calls == before + 1);  // the handler never saw it
}

TEST_CASE("the executor harness runs one executor with its request parameters checked as a flow does",
          "[params][harness]") {
  testing::ExecutorRunner runner(limited_registry(), "Limited", {}, RuntimeInfo{"idx"});
  const DocumentArray out = runner.post("/search", one_doc(), {{"limit", 7.0}, {"scale", 2}});
  CHECK(out[0].tags.at("limit") == json::value(7));
  CHECK(out[0].tags.at("scale") == json::value(2.0));
  CHECK_THROWS_AS(runner.post("/search", one_doc(), {{"limit", 5.5}}), RequestError);
  CHECK_THROWS_WITH(testing::ExecutorRunner(limited_registry(), "Limited", {{"size", 1}}),
                    "Limited: unknown parameter 'size'");
}
