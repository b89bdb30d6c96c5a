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
// load_plugin() opens the library, checks that its plugin API version is compatible with this flowline
// (the rule is beside the version numbers below), runs the entry point with the registry, and fails if
// the plugin added no executor. Each failure — file missing, not a shared library, no entry point,
// incompatible version, no executor, a duplicate name — is a flowline::Error naming the file. Loading the
// same file twice into one registry is a no-op. Thread-safe.
//
// Every executor is loaded this way, first-party ones included: SentenceEncoder and TorchModule are
// plugins in the executor folder (executor_dir(): <libdir>/flowline/executors beside libflowline.so, in
// the build tree and in an install). Registry::global() looks an unknown `uses:` name up there and in the
// FLOWLINE_PLUGIN_PATH folders by convention: executor SentenceEncoder lives in
// libflowline_sentence_encoder.so (executor_library_name()). A flow's `plugins:` list and
// FLOWLINE_PLUGIN_PATH load any other plugin.
//
// Plugins link flowline::core as a shared library, so they and the host share one registry and one copy
// of every flowline type. The CMake function flowline_add_executor() builds one with the right settings.
#pragma once

#include "flowline/registry.hpp"

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The plugin API version, MAJOR.MINOR. Compatibility rule: a plugin loads when it was built with the same
// MAJOR as this flowline and a MINOR no higher than this flowline's. Raise MAJOR (and reset MINOR to 0)
// whenever the ABI changes incompatibly (the layout or meaning of Executor, Document, Registry, ...);
// raise MINOR when something is only added (a new function or type plugins may use), so that plugins
// built before still load, while a plugin that may use the addition is refused by an older flowline.
// 3.0: Executor gained run_outcome() (a member: its layout changed).
// 4.0: ParamSpec gained `output` and RuntimeInfo `max_output_bytes` (their layouts changed).
// 4.1: request parameters (EndpointParams, Registry::add with them, RequestInfo::declared and param<T>(),
//      Registry::Entry::request_params). Only added: what a plugin builds (ExecutorSpec, ParamSpec) keeps
//      its layout, and what the host builds and a plugin reads (RequestInfo, Registry::Entry) only grew at
//      its end, so plugins built against 4.0 load and run unchanged.
// 4.2: RuntimeInfo::local_input_files (RuntimeInfo only grew at its end).
// 4.3: cancellation (Cancellation, RequestInfo::cancellation and cancelled(), this_thread_cancellation(),
//      throw_if_cancelled(), Executor::handle with a Cancellation). RequestInfo only grew at its end.
#define FLOWLINE_PLUGIN_API_VERSION_MAJOR 4
#define FLOWLINE_PLUGIN_API_VERSION_MINOR 3
// What a plugin's flowline_plugin_api_version() returns: MAJOR * 1000 + MINOR.
#define FLOWLINE_PLUGIN_API_VERSION (FLOWLINE_PLUGIN_API_VERSION_MAJOR * 1000 + FLOWLINE_PLUGIN_API_VERSION_MINOR)

#define FLOWLINE_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))

// Defines the plugin entry point. The body receives `flowline::Registry& NAME` and adds executors to it.
#define FLOWLINE_PLUGIN(NAME)                                                                      \
  static void flowline_plugin_body_(::flowline::Registry& NAME);                                   \
  FLOWLINE_PLUGIN_EXPORT int flowline_plugin_api_version() { return FLOWLINE_PLUGIN_API_VERSION; } \
  FLOWLINE_PLUGIN_EXPORT void flowline_plugin_register(::flowline::Registry& registry) {           \
    flowline_plugin_body_(registry);                                                               \
  }                                                                                                \
  static void flowline_plugin_body_(::flowline::Registry& NAME)

namespace flowline {

// Name of the environment variable holding plugin folders, separated by ':'.
inline constexpr const char* kPluginPathVariable = "FLOWLINE_PLUGIN_PATH";
// Name of the environment variable that replaces the executor folder (executor_dir()).
inline constexpr const char* kExecutorDirVariable = "FLOWLINE_EXECUTOR_DIR";

struct PluginApiVersion {
  int major = 0;
  int minor = 0;
  // From the encoded form MAJOR * 1000 + MINOR that flowline_plugin_api_version() returns.
  static PluginApiVersion decode(int encoded) { return {encoded / 1000, encoded % 1000}; }
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
};
inline constexpr PluginApiVersion kPluginApiVersion{FLOWLINE_PLUGIN_API_VERSION_MAJOR,
                                                    FLOWLINE_PLUGIN_API_VERSION_MINOR};

// The compatibility rule above: the same major, and a plugin minor no higher than the host's.
constexpr bool plugin_api_compatible(PluginApiVersion plugin, PluginApiVersion host) {
  return plugin.major == host.major && plugin.minor <= host.minor;
}

// Loads one plugin into `registry`. Returns the names of the executors it added (empty when the file was
// loaded before).
std::vector<std::string> load_plugin(const std::filesystem::path& path, Registry& registry = Registry::global());

// Resolves a plugin reference from a flow file: an absolute path; a path relative to `base_dir`; or a bare
// name found in the plugin search path (plugin_search_path()) as NAME, libNAME.so or NAME.so. Throws
// flowline::Error listing the places searched.
std::filesystem::path resolve_plugin(const std::string& reference, const std::filesystem::path& base_dir);

// Loads every *.so in the FLOWLINE_PLUGIN_PATH folders. Returns the executors added.
std::vector<std::string> load_plugins_from_environment(Registry& registry = Registry::global());

// The folder of first-party executor plugins: $FLOWLINE_EXECUTOR_DIR when set, otherwise flowline/executors
// in the folder libflowline.so itself was loaded from (found with dladdr), so it is right in the build
// tree (build/lib) and in an install prefix (<prefix>/lib) alike.
std::filesystem::path executor_dir();

// The folders searched for plugins by name: executor_dir(), then the FLOWLINE_PLUGIN_PATH folders.
std::vector<std::filesystem::path> plugin_search_path();

// The conventional library file of an executor type: "SentenceEncoder" -> "libflowline_sentence_encoder.so".
// std::nullopt for a name that is not CamelCase letters and digits (it has no conventional file).
std::optional<std::string> executor_library_name(std::string_view executor);

// Loads the conventional library of executor type `name` into `registry` when the plugin search path has
// one. Returns true when `registry` has `name` afterwards. Throws flowline::Error when the file exists but
// does not load (see load_plugin), or loads without adding `name`.
bool load_executor_library(std::string_view name, Registry& registry);

// The executor types executor_dir() offers by convention (from the file names, without loading them):
// libflowline_torch_module.so -> "TorchModule". Sorted.
std::vector<std::string> available_executor_libraries();

// Loads every *.so in executor_dir() into `registry` (`flowline executors` and `flowline schema` list
// them). Returns the executors added.
std::vector<std::string> load_executor_dir(Registry& registry = Registry::global());

}  // namespace flowline
