// A plugin claiming this flowline's major plugin API version with the next minor version: it may use
// something this flowline does not have, so it is refused.
#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN_EXPORT int flowline_plugin_api_version() { return FLOWLINE_PLUGIN_API_VERSION + 1; }
FLOWLINE_PLUGIN_EXPORT void flowline_plugin_register(flowline::Registry&) {}
