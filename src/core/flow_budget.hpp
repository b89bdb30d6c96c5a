// Internal to the config room: the bounds a flow file is read within (issue 34). Before yaml-cpp builds a
// tree, check_flow_budget() streams the file's parse events once and refuses, with file:line:col, a file
// whose nodes — aliases counted each time they would be expanded, as the reader walks them — exceed the
// node budget, or whose nesting is deeper than the depth limit. The size limit is checked before that, on
// the bytes. Every reader of flow text (parse_flow_config, load_flow_config_text, load_flow_config) goes
// through check_flow_bounds(). Not installed.
#pragma once

#include "flowline/error.hpp"
#include "flowline/flow_file_limits.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace flowline::detail {

// The first bound `yaml_text` breaks, as a diagnostic at the place that breaks it (the alias whose expansion
// passes the node budget; the container where nesting passes the depth limit), or nullopt. A syntax error
// is left to the reader, which reports it.
std::optional<Diagnostic> check_flow_budget(std::string_view yaml_text, const std::string& file,
                                            const FlowFileLimits& limits);

// Throws ConfigError at 1:1 of `file` when `bytes` is over the size limit (before a file is read).
void check_flow_size(std::uintmax_t bytes, const std::filesystem::path& file, const FlowFileLimits& limits);

// The size limit, then the node budget and depth, with the limits in force (flow_file_limits()); throws
// ConfigError with the diagnostic.
void check_flow_bounds(std::string_view yaml_text, const std::filesystem::path& file);

}  // namespace flowline::detail
