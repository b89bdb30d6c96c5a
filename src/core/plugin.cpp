#include "flowline/plugin.hpp"
#include "flowline/error.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>

namespace flowline {

namespace {
std::mutex& plugins_mutex() {
  static std::mutex m;
  return m;
}
// (plugin file, registry) pairs already loaded: a plugin registers once per registry.
std::set<std::pair<std::filesystem::path, const Registry*>>& loaded_plugins() {
  static std::set<std::pair<std::filesystem::path, const Registry*>> loaded;
  return loaded;
}

std::vector<std::filesystem::path> plugin_path_folders() {
  std::vector<std::filesystem::path> folders;
  const char* value = std::getenv(kPluginPathVariable);
  if (!value) return folders;
  std::stringstream stream(value);
  std::string item;
  while (std::getline(stream, item, ':')) {
    if (!item.empty()) folders.emplace_back(item);
  }
  return folders;
}
}  // namespace

std::vector<std::string> load_plugin(const std::filesystem::path& path, Registry& registry) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw Error(fmt::format("plugin '{}': file not found", path.string()));
  }
  const auto canonical = std::filesystem::canonical(path, ec);
  std::lock_guard lock(plugins_mutex());
  if (loaded_plugins().count({canonical, &registry})) return {};

  void* handle = dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw Error(fmt::format("plugin '{}': cannot load it as a shared library: {}", path.string(),
                            why ? why : "unknown error"));
  }
  using VersionFn = int (*)();
  using RegisterFn = void (*)(Registry&);
  auto version_fn = reinterpret_cast<VersionFn>(dlsym(handle, "flowline_plugin_api_version"));
  auto register_fn = reinterpret_cast<RegisterFn>(dlsym(handle, "flowline_plugin_register"));
  if (!version_fn || !register_fn) {
    dlclose(handle);
    throw Error(fmt::format("plugin '{}': no flowline entry point (flowline_plugin_api_version / "
                            "flowline_plugin_register); define one with FLOWLINE_PLUGIN(registry) {{ ... }}",
                            path.string()));
  }
  const int version = version_fn();
  if (version != FLOWLINE_PLUGIN_API_VERSION) {
    dlclose(handle);
    throw Error(fmt::format("plugin '{}': built for plugin API version {}, but this flowline has version {}; "
                            "rebuild the plugin against this flowline",
                            path.string(), version, FLOWLINE_PLUGIN_API_VERSION));
  }
  const auto before = registry.names();
  try {
    register_fn(registry);
  } catch (const std::exception& e) {
    // The library stays loaded: executors it registered before failing point into it.
    throw Error(fmt::format("plugin '{}': registration failed: {}", path.string(), e.what()));
  }
  std::vector<std::string> added;
  const std::set<std::string> old(before.begin(), before.end());
  for (const auto& name : registry.names()) {
    if (!old.count(name)) added.push_back(name);
  }
  if (added.empty()) {
    throw Error(fmt::format("plugin '{}': its entry point registered no executor (call registry.add<T>() in "
                            "FLOWLINE_PLUGIN)", path.string()));
  }
  loaded_plugins().insert({canonical, &registry});
  spdlog::debug("plugin {}: added {}", path.string(), fmt::join(added, ", "));
  return added;
}

std::filesystem::path resolve_plugin(const std::string& reference, const std::filesystem::path& base_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> tried;
  const fs::path ref(reference);
  if (ref.is_absolute()) {
    if (fs::exists(ref, ec)) return ref;
    tried.push_back(ref);
  } else {
    const fs::path local = base_dir / ref;
    if (fs::exists(local, ec)) return local;
    tried.push_back(local);
    for (const auto& folder : plugin_path_folders()) {
      for (const auto& name : {reference, "lib" + reference + ".so", reference + ".so"}) {
        const fs::path candidate = folder / name;
        if (fs::exists(candidate, ec)) return candidate;
        tried.push_back(candidate);
      }
    }
  }
  std::vector<std::string> shown;
  for (const auto& t : tried) shown.push_back(t.string());
  throw Error(fmt::format("plugin '{}' not found; looked for {}{}", reference, fmt::join(shown, ", "),
                          plugin_path_folders().empty() ? fmt::format(" ({} is not set)", kPluginPathVariable) : ""));
}

std::vector<std::string> load_plugins_from_environment(Registry& registry) {
  std::vector<std::string> added;
  for (const auto& folder : plugin_path_folders()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".so") {
        auto names = load_plugin(entry.path(), registry);
        added.insert(added.end(), names.begin(), names.end());
      }
    }
    if (ec) spdlog::warn("{}: cannot list plugin folder '{}': {}", kPluginPathVariable, folder.string(), ec.message());
  }
  return added;
}

}  // namespace flowline
