// Entry point of the Reranker plugin, libflowline_reranker.so in the executor folder.
#include "flowline/reranker/reranker.hpp"

#include <flowline/plugin.hpp>

FLOWLINE_PLUGIN(registry) { flowline::reranker::register_reranker(registry); }
