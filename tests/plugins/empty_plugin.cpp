// A plugin whose entry point registers nothing.
#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { (void)registry; }
