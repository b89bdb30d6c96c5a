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
  CHECK_THROWS_WITH(load_plugin(dir / "libfake.so", registry),
                    testing::starts_with("plugin '" + (dir / "libfake.so").string() + "': cannot load it as a shared library: "));
}

TEST_CASE("a library without the entry point is an error naming the macro", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(load_plugin(plugin("no_entry"), registry),
                    "plugin '" + plugin("no_entry").string() +
                        "': no flowline entry point (flowline_plugin_api_version / flowline_plugin_register); define "
                        "one with FLOWLINE_PLUGIN(registry) { ... }");
}

TEST_CASE("a plugin built for another API version is refused", "[plugin]") {
  Registry registry;
  CHECK_THROWS_WITH(load_plugin(plugin("bad_version"), registry),
                    "plugin '" + plugin("bad_version").string() +
                        "': built for plugin API version 999, but this flowline has version 1; rebuild the plugin "
                        "against this flowline");
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
    load_flow_config_text("plugins: [libmissing.so]\nexecutors:\n  - {name: up, uses: Upper}\n", dir / "flow.yml", fresh);
    FAIL("expected a config error");
  } catch (const ConfigError& e) {
    REQUIRE(e.diagnostics().size() == 2);
    CHECK(e.diagnostics()[0].to_string() ==
          (dir / "flow.yml").string() + ":1:11: plugin 'libmissing.so' not found; looked for " +
              (dir / "libmissing.so").string() + " (FLOWLINE_PLUGIN_PATH is not set)");
    CHECK_THAT(e.diagnostics()[1].message, testing::starts_with("executor 'up': unknown executor type 'Upper'"));
  }
}
