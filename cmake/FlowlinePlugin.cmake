# flowline_add_executor(NAME SOURCES src... [LINK_LIBRARIES lib...] [OUTPUT_DIRECTORY dir]): builds an
# executor plugin, a MODULE library that flowline loads from a flow's `plugins:` list, from
# FLOWLINE_PLUGIN_PATH, or by executor name from the executor folder lib/flowline/executors (where
# flowline's own SentenceEncoder and TorchModule are built and installed as libflowline_<snake_name>.so).
# The sources must define the entry point with FLOWLINE_PLUGIN(registry) { registry.add<MyExecutor>(); }
# (flowline/plugin.hpp); without it the plugin does not link.
include_guard(GLOBAL)

function(flowline_add_executor name)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES;LINK_LIBRARIES" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "flowline_add_executor(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE flowline::core ${ARG_LINK_LIBRARIES})
  # Only the entry point is exported; everything else stays inside the plugin.
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  endif()
  # A plugin that forgets FLOWLINE_PLUGIN fails to link instead of failing silently at load.
  target_link_options(${name} PRIVATE "LINKER:--undefined=flowline_plugin_register" "LINKER:--no-undefined")
endfunction()
