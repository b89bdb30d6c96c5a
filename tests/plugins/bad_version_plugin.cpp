// A plugin claiming a future plugin API version.
#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN_EXPORT int flowline_plugin_api_version() { return 999; }
FLOWLINE_PLUGIN_EXPORT void flowline_plugin_register(flowline::Registry&) {}
