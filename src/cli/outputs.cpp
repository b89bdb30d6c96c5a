// The launcher's check of what a command would replace, and profile's redirection of outputs (outputs.hpp).
#include "outputs.hpp"

#include <fmt/format.h>

#include <system_error>

namespace flowline::cli {

bool outputs_are_free(const FlowConfig& config, const std::string& output, bool overwrite) {
  if (overwrite) return true;
  bool free = true;
  std::error_code ec;
  for (const FlowOutput& o : flow_outputs(config)) {
    if (!std::filesystem::exists(o.path, ec)) continue;
    const std::string where = o.location.to_string();
    fmt::print(stderr,
               "error: {}executor '{}' writes '{}' ({}), which exists: this run would replace it. Move it away, "
               "write elsewhere (--set {}.{}=FILE), or pass --overwrite\n",
               where.empty() ? "" : where + ": ", o.executor, o.path.string(), o.parameter, o.executor, o.parameter);
    free = false;
  }
  if (!output.empty() && output != "-" && std::filesystem::exists(output, ec)) {
    fmt::print(stderr,
               "error: --output '{}' exists: this run would replace it. Move it away, write elsewhere, or pass "
               "--overwrite\n",
               output);
    free = false;
  }
  return free;
}

std::vector<std::string> redirect_outputs(const FlowConfig& config, const std::filesystem::path& folder) {
  std::vector<std::string> sets;
  for (const FlowOutput& o : flow_outputs(config)) {
    const std::filesystem::path to = folder / fmt::format("{}-{}", o.executor, o.path.filename().string());
    sets.push_back(fmt::format("{}.{}={}", o.executor, o.parameter, to.string()));
  }
  return sets;
}

}  // namespace flowline::cli
