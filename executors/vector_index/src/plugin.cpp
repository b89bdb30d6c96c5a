// Entry point of the VectorIndex plugin, libflowline_vector_index.so in the executor folder.
#include "flowline/vector_index/vector_index.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::vector_index::register_vector_index(registry); }
