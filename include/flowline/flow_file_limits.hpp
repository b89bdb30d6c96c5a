// flowline/flow_file_limits.hpp — the bounds any flow file is read within, however it is written.
//
// A flow file comes from users, exports, Kubernetes ConfigMaps and templating tools; reading one must never
// take the machine down. load_flow_config(), load_flow_config_text() and parse_flow_config() (flow_config.hpp)
// refuse, with a ConfigError at the file's place and exit 2 in the launcher:
//   - a file larger than max_bytes, before parsing (the size and the limit);
//   - a file with more than max_nodes nodes once its aliases are expanded (each alias counted every time it
//     would be expanded), at the alias that passes the budget: `alias '*h' would expand to more than N nodes`;
//   - nesting deeper than max_depth, naming the depth and where the nesting starts.
// The defaults suit real flows generously — a flow is a few kilobytes; a Kubernetes ConfigMap holds at most
// 1 MiB; parameters such as a BERT vocabulary (30,522 words) or label lists in YAML still load, up to about
// 75,000 items — while any file is read or refused within a second and 300 MB on a 2-core machine, launcher
// start (0.3 s) included: yaml-cpp reads about 250,000 mapping nodes or 7 MB a second there, and a flow is
// read twice (once as events to count, once into nodes), so the two limits are what bound the time
// (bench/flow_files.py).
//
// The limits are process-wide: the launcher sets them once from --max-flow-bytes (or FLOWLINE_MAX_FLOW_BYTES)
// before reading a flow. Both functions are thread-safe.
#pragma once

#include <cstddef>

namespace flowline {

struct FlowFileLimits {
  std::size_t max_bytes = std::size_t{2} << 20;  // 2 MiB
  std::size_t max_nodes = 75'000;
  std::size_t max_depth = 100;
};

FlowFileLimits flow_file_limits();
void set_flow_file_limits(const FlowFileLimits& limits);

}  // namespace flowline
