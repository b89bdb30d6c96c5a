// stats_json.hpp — the launcher's JSON files: the one writer of a JSON document to a file that `run
// --stats-json` and `profile --json` share (one line, then a newline), and the document `run --stats-json`
// writes (which `profile` reads back from its child runs).
//
// Called on the main thread after a run or a profile has ended; nothing here keeps state.
#pragma once

#include "flowline/flow_results.hpp"
#include "flowline/writers.hpp"

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace flowline::cli {

// Writes `root` serialized on one line, then a newline, to `path` (replacing it). Throws flowline::Error
// "cannot write 'PATH'" when the file cannot be written.
void write_json_file(const std::string& path, const boost::json::value& root);

// `run --stats-json`: the run's accounting (replicas, executors, remote hosts, devices) and its summary.
// `post_ended` is when post() returned (wall clock); with summary.seconds it places the processing in time,
// so outside samplers (NVML in the GPU benchmark) can keep only their samples from that window.
// `after_post_seconds` is how long closing the executors and completing --output took after that; `writer`
// what the --output writer did, when there is one; `resume` (when not empty) goes in as "resume": what a
// resumed run skipped and had left, and the output's syncs. Throws flowline::Error as write_json_file() does.
void write_stats_json(const std::string& path, const FlowStats& stats, const PostSummary& summary,
                      std::chrono::system_clock::time_point post_ended, double after_post_seconds,
                      const std::optional<WriterStats>& writer, const boost::json::object& resume = {});

}  // namespace flowline::cli
