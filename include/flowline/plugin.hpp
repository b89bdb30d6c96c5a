// flowline/plugin.hpp — executors in shared libraries, loaded by name from a flow.
//
// A plugin is a shared library that defines one entry point with FLOWLINE_PLUGIN:
//
//   #include <flowline/plugin.hpp>
//   class Upper : public flowline::Executor { ... };
//   FLOWLINE_PLUGIN(registry) {
//     registry.add<Upper>();
//   }
//
// load_plugin() opens the library, checks that it was built against the same plugin API version, runs the
// entry point with the registry, and fails if the plugin added no executor. Each failure — file missing,
// not a shared library, no entry point, version mismatch, no executor, a duplicate name — is a
// flowline::Error naming the file. Loading the same file twice is a no-op. Thread-safe.
//
// Plugins link flowline::core as a shared library, so they and the host share one registry and one copy
// of every flowline type. The CMake function flowline_add_executor() builds one with the right settings.
#pragma once

#include "flowline/registry.hpp"

#include <filesystem>
#include <string>
#include <vector>

// Raised whenever the plugin ABI changes (Executor, Document, Registry layout or semantics).
#define FLOWLINE_PLUGIN_API_VERSION 1

#define FLOWLINE_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

// Defines the plugin entry point. The body receives `flowline::Registry& NAME` and adds executors to it.
#define FLOWLINE_PLUGIN(NAME)                                                              \
  static void flowline_plugin_body_(::flowline::Registry& NAME);                           \
  FLOWLINE_PLUGIN_EXPORT int flowline_plugin_api_version() {                               \
    return FLOWLINE_PLUGIN_API_VERSION;                                                    \
  }                                                                                        \
  FLOWLINE_PLUGIN_EXPORT void flowline_plugin_register(::flowline::Registry& registry) {  \
    flowline_plugin_body_(registry);                                                       \
  }                                                                                        \
  static void flowline_plugin_body_(::flowline::Registry& NAME)

namespace flowline {

// Name of the environment variable holding plugin folders, separated by ':'.
inline constexpr const char* kPluginPathVariable = "FLOWLINE_PLUGIN_PATH";

// Loads one plugin into `registry`. Returns the names of the executors it added (empty when the file was
// loaded before).
std::vector<std::string> load_plugin(const std::filesystem::path& path,
                                     Registry& registry = Registry::global());

// Resolves a plugin reference from a flow file: an absolute path; a path relative to `base_dir`; or a bare
// name found in the FLOWLINE_PLUGIN_PATH folders as NAME, libNAME.so or NAME.so. Throws flowline::Error
// listing the places searched.
std::filesystem::path resolve_plugin(const std::string& reference, const std::filesystem::path& base_dir);

// Loads every *.so in the FLOWLINE_PLUGIN_PATH folders. Returns the executors added.
std::vector<std::string> load_plugins_from_environment(Registry& registry = Registry::global());

}  // namespace flowline
