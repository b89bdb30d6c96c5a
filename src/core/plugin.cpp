// Loading executor plugins: dlopen with a version check, the plugin search path, and the executor folder
// where first-party executors are found by the conventional name of their library.
#include "flowline/plugin.hpp"
#include "flowline/error.hpp"

#include "shared_library.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
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
    throw Error(
        fmt::format("plugin '{}': cannot load it as a shared library: {}", path.string(), detail::dl_error_text()));
  }
  using VersionFn = int (*)();
  using RegisterFn = void (*)(Registry&);
  auto version_fn = reinterpret_cast<VersionFn>(dlsym(handle, "flowline_plugin_api_version"));
  auto register_fn = reinterpret_cast<RegisterFn>(dlsym(handle, "flowline_plugin_register"));
  if (!version_fn || !register_fn) {
    dlclose(handle);
    throw Error(
        fmt::format("plugin '{}': no flowline entry point (flowline_plugin_api_version / "
                    "flowline_plugin_register); define one with FLOWLINE_PLUGIN(registry) {{ ... }}",
                    path.string()));
  }
  const auto version = PluginApiVersion::decode(version_fn());
  if (!plugin_api_compatible(version, kPluginApiVersion)) {
    dlclose(handle);
    throw Error(
        fmt::format("plugin '{}': built for plugin API {}, but this flowline has plugin API {} (a plugin "
                    "needs the same major version and a minor version no higher); rebuild the plugin "
                    "against this flowline",
                    path.string(), version.str(), kPluginApiVersion.str()));
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
    throw Error(
        fmt::format("plugin '{}': its entry point registered no executor (call registry.add<T>() in "
                    "FLOWLINE_PLUGIN)",
                    path.string()));
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
    for (const auto& folder : plugin_search_path()) {
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

std::filesystem::path executor_dir() {
  if (const char* value = std::getenv(kExecutorDirVariable); value && *value) return value;
  // Any function of libflowline.so tells where the library was loaded from.
  const auto folder = detail::library_folder(reinterpret_cast<const void*>(&executor_dir));
  if (folder.empty()) return {};
  return folder / "flowline" / "executors";
}

std::vector<std::filesystem::path> plugin_search_path() {
  std::vector<std::filesystem::path> folders;
  if (auto dir = executor_dir(); !dir.empty()) folders.push_back(std::move(dir));
  for (auto& folder : plugin_path_folders()) folders.push_back(std::move(folder));
  return folders;
}

std::optional<std::string> executor_library_name(std::string_view executor) {
  if (executor.empty() || !std::isupper(static_cast<unsigned char>(executor.front()))) return std::nullopt;
  std::string snake;
  for (char c : executor) {
    const auto u = static_cast<unsigned char>(c);
    if (!std::isalnum(u)) return std::nullopt;
    if (std::isupper(u)) {
      if (!snake.empty()) snake += '_';
      snake += static_cast<char>(std::tolower(u));
    } else {
      snake += c;
    }
  }
  return "libflowline_" + snake + ".so";
}

namespace {
// "libflowline_torch_module.so" -> "TorchModule"; "" for a file name not of that form.
std::string executor_of_library(const std::string& file) {
  const std::string prefix = "libflowline_", suffix = ".so";
  if (file.size() <= prefix.size() + suffix.size() || file.compare(0, prefix.size(), prefix) != 0 ||
      file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return "";
  }
  std::string name;
  bool upper = true;
  for (char c : file.substr(prefix.size(), file.size() - prefix.size() - suffix.size())) {
    if (c == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return name;
}
}  // namespace

bool load_executor_library(std::string_view name, Registry& registry) {
  const auto file = executor_library_name(name);
  if (!file) return false;
  std::error_code ec;
  for (const auto& folder : plugin_search_path()) {
    const auto candidate = folder / *file;
    if (!std::filesystem::exists(candidate, ec)) continue;
    load_plugin(candidate, registry);
    if (!registry.find_registered(name)) {
      throw Error(fmt::format("plugin '{}': loaded for executor type '{}', but it does not register it",
                              candidate.string(), name));
    }
    return true;
  }
  return false;
}

std::vector<std::string> available_executor_libraries() {
  std::set<std::string> names;
  if (const auto folder = executor_dir(); !folder.empty()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
      if (auto name = executor_of_library(entry.path().filename().string()); !name.empty()) names.insert(name);
    }
  }
  return {names.begin(), names.end()};
}

std::vector<std::string> load_executor_dir(Registry& registry) {
  std::vector<std::string> added;
  const auto folder = executor_dir();
  std::error_code ec;
  if (folder.empty() || !std::filesystem::is_directory(folder, ec)) return added;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (entry.path().extension() == ".so") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    auto names = load_plugin(file, registry);
    added.insert(added.end(), names.begin(), names.end());
  }
  return added;
}

}  // namespace flowline
