// flowline/flow_stats_json.hpp — Flow::stats() as JSON, the one form every reader gets: `flowline run
// --stats-json` (which `profile` reads back from its child runs) and Python's Flow.stats(). A pure function of
// its argument, callable from any thread; the caller owns the object returned.
#pragma once

#include "flowline/flow_results.hpp"

#include <boost/json/object.hpp>

namespace flowline {

// {"replicas", "executors", "remote_hosts", "devices", "host_peak_rss_mb"}: each replica's counts, batch times,
// metrics and GPU figures (or "gpu": "not available"), each executor's batch times over its replicas, each remote
// host's connection, each GPU's memory figures (NVML's, or "nvml": "not available").
boost::json::object stats_json(const FlowStats& stats);

}  // namespace flowline
