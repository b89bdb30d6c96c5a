// stats_table.hpp — `run --stats`: the per-replica table (documents, batches, batch times, GPU memory), the
// remote hosts, the devices' memory against NVML's, and the posting thread's time, printed to standard error.
//
// Called on the main thread after a run has ended; nothing here keeps state.
#pragma once

#include "flowline/flow_results.hpp"

namespace flowline::cli {

void print_stats_table(const FlowStats& stats, const PostSummary& summary);

}  // namespace flowline::cli
