// `flowline executors` and `flowline schema`: what the registry's executors declare (their `with:`
// parameters, endpoints and request parameters), printed for people and as docs/yaml-reference.md.
// Called by the launcher on its own thread; both load the executor folder into Registry::global() first.
#pragma once

namespace flowline::cli {

// Lists every executor type with its parameters, endpoints and each endpoint's request parameters.
// `flowline executors` also loads FLOWLINE_PLUGIN_PATH. Returns an exit code.
int command_executors();
// Prints the YAML reference in Markdown: the flow keys (flow_schema()) and every first-party executor's
// parameters and request parameters. docs/yaml-reference.md is this output (a test compares them).
int command_schema();

}  // namespace flowline::cli
