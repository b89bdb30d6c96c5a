// Fuzz target: the YAML flow loader. Any text is parsed and, when it parses, validated against the
// built-in executors. Property: a bad flow file is a ConfigError with at least one diagnostic that names
// a place in the file; nothing else escapes, nothing crashes or hangs. Plugins listed in the text are not
// loaded (parse + validate is exactly what load_flow_config does after loading them).
#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/registry.hpp"

#include "fuzz_support.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace {

flowline::Registry& builtins() {
  static flowline::Registry registry;  // no executor search: nothing is loaded from disk
  static const bool filled = (flowline::register_builtin_executors(registry), true);
  (void)filled;
  return registry;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    flowline::FlowConfig config = flowline::parse_flow_config(text, "fuzz.yml");
    flowline::validate_flow_config(config, builtins());
  } catch (const flowline::ConfigError& e) {
    if (e.diagnostics().empty()) flowline::fuzz::broken("a ConfigError without diagnostics");
    for (const auto& d : e.diagnostics()) {
      if (d.message.empty()) flowline::fuzz::broken("a diagnostic without a message");
      if (d.where.file != "fuzz.yml" && !d.where.file.empty()) flowline::fuzz::broken(e.what());
    }
  }
  return 0;
}
