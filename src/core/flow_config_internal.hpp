// Shared between the flow parser (flow_parse.cpp) and validator (flow_validate.cpp); not installed.
#pragma once

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::detail {

// Parses into `config`, appending problems to `diagnostics`. Returns false when the text is not YAML at
// all (nothing more can be checked then). Throws ConfigError first when the text breaks the bounds of
// flow_file_limits() (check_flow_bounds).
bool parse_collect(std::string_view yaml_text, const std::filesystem::path& file_name, FlowConfig& config,
                   std::vector<Diagnostic>& diagnostics);

// Validates `config`, appending problems to `diagnostics` (flow_validate.cpp).
void validate_collect(FlowConfig& config, const Registry& registry, std::vector<Diagnostic>& diagnostics,
                      DeviceCheck devices = DeviceCheck::Here);

// File order: by line, then column; problems without a line first.
void sort_diagnostics(std::vector<Diagnostic>& diagnostics);

}  // namespace flowline::detail
