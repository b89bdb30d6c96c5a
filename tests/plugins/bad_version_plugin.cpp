// A plugin claiming the next major plugin API version (an incompatible ABI).
#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN_EXPORT int flowline_plugin_api_version() { return (FLOWLINE_PLUGIN_API_VERSION_MAJOR + 1) * 1000; }
FLOWLINE_PLUGIN_EXPORT void flowline_plugin_register(flowline::Registry&) {}
