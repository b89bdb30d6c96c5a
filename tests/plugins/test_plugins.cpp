// Plugins: loading and its errors, API versions, the search path and the executor folder.
#include "test_support.hpp"

#include <cstdlib>

using namespace flowline;

namespace {
std::filesystem::path plugin(const std::string& kind) {
  const auto dir = std::filesystem::path(FLOWLINE_TEST_PLUGIN_DIR);
  return (kind == "good" ? dir : dir / "broken") / ("libflowline_test_plugin_" + kind + ".so");
}
}  // namespace

TEST_CASE("a plugin built with the SDK is loaded and its executor runs in a flow", "[plugin]") {
  Registry registry;
  CHECK(load_plugin(plugin("good"), registry) == std::vector<std::string>{"Upper"});
  CHECK(load_plugin(plugin("good"), registry).empty());  // a second load is a no-op
  Flow flow(FlowOptions{}, registry);
  flow.add({.name = "up", .uses = "Upper", .with = {{"suffix", "!"}}});
  DocumentArray docs;
  docs.push_back(Document("hello"));
  CHECK(flow.post("/upper", std::move(docs))[0].text == "HELLO!");
}

TEST_CASE("a missing plugin file is an error naming it", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(load_plugin("/nonexistent/libx.so", registry), "plugin '/nonexistent/libx.so': file not found");
}

TEST_CASE("a file that is not a shared library is an error naming it", "[plugin]") {
  const auto dir = testing::scratch_dir("plugin not a library");
  testing::write_text(dir / "libfake.so", "not an ELF file");
  Registry registry;
  CHECK_THROWS_WITH(
      load_plugin(dir / "libfake.so", registry),
      testing::starts_with("plugin '" + (dir / "libfake.so").string() + "': cannot load it as a shared library: "));
}

TEST_CASE("a library without the entry point is an error naming the macro", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(load_plugin(plugin("no_entry"), registry),
                    "plugin '" + plugin("no_entry").string() +
                        "': no flowline entry point (flowline_plugin_api_version / flowline_plugin_register); define "
                        "one with FLOWLINE_PLUGIN(registry) { ... }");
}

TEST_CASE("a plugin built for another major API version is refused, naming both versions", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(load_plugin(plugin("bad_version"), registry),
                    fmt::format("plugin '{}': built for plugin API {}.0, but this flowline has plugin API {} (a "
                                "plugin needs the same major version and a minor version no higher); rebuild the "
                                "plugin against this flowline",
                                plugin("bad_version").string(), kPluginApiVersion.major + 1, kPluginApiVersion.str()));
}

TEST_CASE("a plugin built against a newer minor API version is refused", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(
      load_plugin(plugin("newer_minor"), registry),
      testing::starts_with(fmt::format("plugin '{}': built for plugin API {}.{}, but this flowline has "
                                       "plugin API {}.{}",
                                       plugin("newer_minor").string(), kPluginApiVersion.major,
                                       kPluginApiVersion.minor + 1, kPluginApiVersion.major, kPluginApiVersion.minor)));
}

TEST_CASE("a plugin built for an older minor API version (4.0) loads and runs, its parameters unchecked", "[plugin]") {
  Registry registry;
  REQUIRE(load_plugin(plugin("older_minor"), registry) == std::vector<std::string>{"OldStyle"});
  CHECK(registry.get("OldStyle").request_params.empty());
  Flow flow(FlowOptions{}, registry);
  flow.add({.name = "old", .uses = "OldStyle"});
  DocumentArray docs;
  docs.push_back(Document("a"));
  const DocumentArray out = flow.post("/tag", std::move(docs), PostOptions{.parameters = {{"value", 5.5}}});
  CHECK(out[0].tags.at("value") == boost::json::value(5.5));
}

TEST_CASE("plugin API compatibility: same major, minor no higher than the host's", "[plugin]") {
  STATIC_REQUIRE(plugin_api_compatible({2, 0}, {2, 3}));
  STATIC_REQUIRE(plugin_api_compatible({2, 3}, {2, 3}));
  STATIC_REQUIRE_FALSE(plugin_api_compatible({2, 4}, {2, 3}));
  STATIC_REQUIRE_FALSE(plugin_api_compatible({1, 0}, {2, 0}));
  STATIC_REQUIRE_FALSE(plugin_api_compatible({3, 0}, {2, 9}));
  CHECK(PluginApiVersion::decode(FLOWLINE_PLUGIN_API_VERSION).str() == kPluginApiVersion.str());
  CHECK(PluginApiVersion::decode(2001).str() == "2.1");
}

TEST_CASE("a plugin that registers nothing is an error instead of a silent no-op", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(load_plugin(plugin("empty"), registry),
                    "plugin '" + plugin("empty").string() +
                        "': its entry point registered no executor (call registry.add<T>() in FLOWLINE_PLUGIN)");
}

TEST_CASE("a flow file loads plugins by path and by name from FLOWLINE_PLUGIN_PATH", "[plugin]") {
  const auto dir = testing::scratch_dir("plugin from yaml");
  Registry registry;
  ::setenv(kPluginPathVariable, FLOWLINE_TEST_PLUGIN_DIR, 1);
  const FlowConfig config = load_flow_config_text(
      "plugins: [flowline_test_plugin_good]\nexecutors:\n  - {name: up, uses: Upper}\n", dir / "flow.yml", registry);
  CHECK(config.executors[0].uses == "Upper");
  ::unsetenv(kPluginPathVariable);
  Registry fresh;
  try {
    load_flow_config_text("plugins: [libmissing.so]\nexecutors:\n  - {name: up, uses: Upper}\n", dir / "flow.yml",
                          fresh);
    FAIL("expected a config error");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 2);
    const auto executors = executor_dir();
    CHECK(e.diagnostics()[0].to_string() ==
          (dir / "flow.yml").string() + ":1:11: plugin 'libmissing.so' not found; looked for " +
              (dir / "libmissing.so").string() + ", " + (executors / "libmissing.so").string() + ", " +
              (executors / "liblibmissing.so.so").string() + ", " + (executors / "libmissing.so.so").string() +
              " (FLOWLINE_PLUGIN_PATH is not set)");
    CHECK_THAT(e.diagnostics()[1].message, testing::starts_with("executor 'up': unknown executor type 'Upper'"));
  }
}

TEST_CASE("executor libraries have one conventional file name", "[plugin]") {
  CHECK(executor_library_name("SentenceEncoder") == "libflowline_sentence_encoder.so");
  CHECK(executor_library_name("TorchModule") == "libflowline_torch_module.so");
  CHECK(executor_library_name("Bert2Vec") == "libflowline_bert2_vec.so");
  CHECK_FALSE(executor_library_name("sentenceEncoder"));
  CHECK_FALSE(executor_library_name("Sentence-Encoder"));
  CHECK_FALSE(executor_library_name("../Evil"));
  CHECK_FALSE(executor_library_name(""));
}

TEST_CASE("the executor folder sits beside libflowline.so and holds the first-party executors", "[plugin]") {
  CHECK(executor_dir() == std::filesystem::path(FLOWLINE_BINARY_DIR) / "lib" / "flowline" / "executors");
  CHECK(plugin_search_path().front() == executor_dir());
  const auto offered = available_executor_libraries();
  std::vector<std::string> first_party{"ClipEncoder",     "Reranker",    "SentenceEncoder", "SequenceClassifier",
                                       "TokenClassifier", "TorchModule", "VectorIndex"};
#ifdef FLOWLINE_WITH_PGVECTOR
  first_party.insert(first_party.begin() + 1, "PgVectorWriter");  // built where libpq is
#endif
  CHECK(offered == first_party);
}

TEST_CASE("a searching registry loads an unknown executor from the executor folder; a plain one does not", "[plugin]") {
  Registry plain;
  CHECK(plain.find("SentenceEncoder") == nullptr);
  CHECK_THROWS_WITH(plain.get("SentenceEncoder"), "unknown executor type 'SentenceEncoder'; known types: ");
  Registry searching(Registry::ExecutorSearch::on);
  CHECK(searching.find_registered("SentenceEncoder") == nullptr);
  const Registry::Entry* entry = searching.find("SentenceEncoder");
  REQUIRE(entry != nullptr);
  CHECK(entry->spec.name == "SentenceEncoder");
  CHECK(entry->origin == "flowline::sentence_encoder");
  CHECK(searching.find_registered("TorchModule") == nullptr);  // only what was asked for is loaded
  CHECK(searching.find("NoSuchThing") == nullptr);
  CHECK(searching.unknown_message("TorchModul") ==
        "unknown executor type 'TorchModul' (did you mean 'TorchModule'?); known types: Reranker, SentenceEncoder, "
        "SequenceClassifier, TorchModule, VectorIndex");
}

TEST_CASE("FLOWLINE_EXECUTOR_DIR replaces the executor folder", "[plugin]") {
  const auto dir = testing::scratch_dir("plugin executor dir");
  ::setenv(kExecutorDirVariable, dir.c_str(), 1);
  CHECK(executor_dir() == dir);
  CHECK(available_executor_libraries().empty());
  Registry searching(Registry::ExecutorSearch::on);
  CHECK(searching.find("TorchModule") == nullptr);
  ::unsetenv(kExecutorDirVariable);
}
