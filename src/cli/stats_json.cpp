// The launcher's JSON files (stats_json.hpp): the shared file writer and `run --stats-json`'s document.
#include "stats_json.hpp"

#include "flowline/error.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <fstream>

namespace flowline::cli {

void write_json_file(const std::string& path, const boost::json::value& root) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << boost::json::serialize(root) << "\n";
  if (!out) throw Error(fmt::format("cannot write '{}'", path));
}

void write_stats_json(const std::string& path, const FlowStats& stats, const PostSummary& summary,
                      std::chrono::system_clock::time_point post_ended, double after_post_seconds,
                      const std::optional<WriterStats>& writer, const boost::json::object& resume) {
  boost::json::array replicas;
  for (const auto& r : stats.replicas) {
    boost::json::object o{{"executor", r.executor},
                          {"type", r.type},
                          {"replica", r.replica},
                          {"device", r.device},
                          {"documents", r.documents},
                          {"batches", r.batches},
                          {"errors", r.errors},
                          {"batch_ms_mean", r.batch_ms_mean},
                          {"batch_ms_p50", r.batch_ms_p50},
                          {"batch_ms_p99", r.batch_ms_p99}};
    if (r.has_gpu_memory) {
      o["gpu_load_bytes"] = r.gpu_load_bytes;
      o["gpu_peak_allocated_bytes"] = r.gpu_peak_allocated_bytes;
      o["gpu_peak_reserved_bytes"] = r.gpu_peak_reserved_bytes;
    } else {
      o["gpu"] = "not available";
    }
    boost::json::object metrics;
    for (const auto& [name, value] : r.metrics) metrics[name] = value;
    o["metrics"] = std::move(metrics);
    replicas.push_back(std::move(o));
  }
  boost::json::array devices;
  for (const auto& d : stats.devices) {
    boost::json::object o{{"device", d.device},
                          {"load_bytes", d.load_bytes},
                          {"peak_allocated_bytes", d.peak_allocated_bytes},
                          {"peak_reserved_bytes", d.peak_reserved_bytes},
                          {"reserved_after_load_bytes", d.reserved_after_load_bytes},
                          {"startup_peak_allocated_bytes", d.startup_peak_allocated_bytes}};
    if (d.has_nvml) {
      o.insert({{"nvml_total_bytes", d.nvml_total_bytes},
                {"nvml_used_at_start_bytes", d.nvml_used_at_start_bytes},
                {"nvml_used_after_load_bytes", d.nvml_used_after_load_bytes},
                {"nvml_peak_used_bytes", d.nvml_peak_used_bytes},
                {"outside_allocator_bytes", d.outside_allocator_bytes()},
                {"accounted_peak_bytes", d.accounted_peak_bytes()}});
    } else {
      o["nvml"] = "not available";
    }
    devices.push_back(std::move(o));
  }
  boost::json::array hosts;
  for (const auto& h : stats.remote_hosts) {
    hosts.push_back(boost::json::object{{"executor", h.executor},
                                        {"address", h.address},
                                        {"connected", h.connected},
                                        {"requests", h.requests},
                                        {"lost", h.lost},
                                        {"reconnects", h.reconnects},
                                        {"requeued_batches", h.requeued_batches},
                                        {"last_error", h.last_error}});
  }
  boost::json::array executors;
  for (const auto& e : stats.executors) {
    executors.push_back(boost::json::object{{"executor", e.executor},
                                            {"batches", e.batches},
                                            {"batch_ms_mean", e.batch_ms_mean},
                                            {"batch_ms_p50", e.batch_ms_p50},
                                            {"batch_ms_p99", e.batch_ms_p99}});
  }
  boost::json::object root{{"replicas", std::move(replicas)},
                           {"executors", std::move(executors)},
                           {"remote_hosts", std::move(hosts)},
                           {"devices", std::move(devices)},
                           {"host_peak_rss_mb", stats.host_peak_rss_mb},
                           {"documents", summary.documents},
                           {"requests", summary.requests},
                           {"failed_requests", summary.failed_requests},
                           {"seconds", summary.seconds},
                           {"source_seconds", summary.source_seconds},
                           {"deliver_seconds", summary.deliver_seconds},
                           {"post_ended_unix", std::chrono::duration<double>(post_ended.time_since_epoch()).count()},
                           {"after_post_seconds", after_post_seconds}};
  if (writer) {
    root["output"] = boost::json::object{{"documents", writer->documents},
                                         {"bytes", writer->bytes},
                                         {"format_seconds", writer->format_seconds},
                                         {"write_seconds", writer->write_seconds}};
  }
  if (!resume.empty()) root["resume"] = resume;
  write_json_file(path, std::move(root));
}

}  // namespace flowline::cli
