// `run --stats`'s table (stats_table.hpp).
#include "stats_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

namespace flowline::cli {
namespace {

std::string megabytes(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20)); }

}  // namespace

void print_stats_table(const FlowStats& stats, const PostSummary& summary) {
  fmt::print(stderr, "\n{:<14} {:>3} {:<8} {:>9} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}\n", "executor",
             "rep", "device", "docs", "batches", "errors", "mean ms", "p50 ms", "p99 ms", "load MiB", "peak alloc",
             "peak resv");
  for (const auto& r : stats.replicas) {
    fmt::print(stderr, "{:<14} {:>3} {:<8} {:>9} {:>8} {:>6} {:>9.2f} {:>9.2f} {:>9.2f} {:>9} {:>10} {:>10}\n",
               r.executor, r.replica, r.device, r.documents, r.batches, r.errors, r.batch_ms_mean, r.batch_ms_p50,
               r.batch_ms_p99, r.has_gpu_memory ? megabytes(r.gpu_load_bytes) : "n/a",
               r.has_gpu_memory ? megabytes(r.gpu_peak_allocated_bytes) : "n/a",
               r.has_gpu_memory ? megabytes(r.gpu_peak_reserved_bytes) : "n/a");
  }
  for (const auto& h : stats.remote_hosts) {
    fmt::print(stderr, "{} host {}: {}, {} requests answered, lost {}x, back {}x, {} batches re-queued{}\n", h.executor,
               h.address, h.connected ? "connected" : "down", h.requests, h.lost, h.reconnects, h.requeued_batches,
               h.last_error.empty() ? "" : fmt::format(" (last error: {})", h.last_error));
  }
  for (const auto& d : stats.devices) {
    fmt::print(stderr, "{}: allocator load {} MiB, peak allocated {} MiB, peak reserved {} MiB", d.device,
               megabytes(d.load_bytes), megabytes(d.peak_allocated_bytes), megabytes(d.peak_reserved_bytes));
    if (d.has_nvml) {
      const double diff = d.nvml_peak_used_bytes > 0
                              ? 100.0 * static_cast<double>(d.accounted_peak_bytes() - d.nvml_peak_used_bytes) /
                                    static_cast<double>(d.nvml_peak_used_bytes)
                              : 0.0;
      fmt::print(
          stderr,
          "; NVML: total {} MiB, in use at start {} MiB, context {} MiB, peak {} MiB (accounted {} MiB, {:+.2f}%)",
          megabytes(d.nvml_total_bytes), megabytes(d.nvml_used_at_start_bytes), megabytes(d.outside_allocator_bytes()),
          megabytes(d.nvml_peak_used_bytes), megabytes(d.accounted_peak_bytes()), diff);
    } else {
      fmt::print(stderr, "; NVML not available");
    }
    fmt::print(stderr, "\n");
  }
  const bool any_gpu =
      std::any_of(stats.replicas.begin(), stats.replicas.end(), [](const auto& r) { return r.has_gpu_memory; });
  fmt::print(stderr, "host peak RSS {:.1f} MiB; total {:.3f} s for {} docs{}\n", stats.host_peak_rss_mb,
             summary.seconds, summary.documents,
             any_gpu ? "" : "; GPU figures not available (no executor runs on a GPU)");
  fmt::print(
      stderr,
      "posting thread: {:.3f} s reading the input, {:.3f} s delivering responses, the rest waiting for the flow\n",
      summary.source_seconds, summary.deliver_seconds);
}

}  // namespace flowline::cli
