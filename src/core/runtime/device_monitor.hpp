// The GPUs a flow runs on, as an observer: NVML and caching-allocator readings at start and after loading,
// and a sampler thread (only when some GPU has NVML) that reads each GPU's used memory every 5 ms from
// start to stop, publishes every reading to the flow's observers and keeps the peak. With no GPU in the
// flow it does nothing and starts no thread. Private to flowline::core. snapshot() is thread-safe.
#pragma once

#include "observers.hpp"

#include "flowline/flow_results.hpp"
#include "flowline/observer.hpp"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace flowline::runtime {

class DeviceMonitor final : public FlowObserver {
 public:
  // `publish_to` receives the samples (the flow's observer list, this monitor included); it must outlive
  // the monitor's run (start to stop).
  explicit DeviceMonitor(const ObserverList& publish_to) : publish_to_(publish_to) {}
  ~DeviceMonitor() override { stop_sampler(); }

  void on_flow_start(const FlowTopology& topology) override;
  void on_flow_loaded() override;
  void on_device_sample(const DeviceSample& sample) override;
  void on_flow_stop() override { stop_sampler(); }

  std::vector<DeviceStats> snapshot() const;

 private:
  struct Slot {
    c10::Device device{c10::kCPU};
    DeviceStats stats;
    std::int64_t allocated_at_start = 0;
    std::atomic<std::int64_t> peak{0};
  };
  void sample_loop();
  void sample_once() const;
  void stop_sampler();

  const ObserverList& publish_to_;
  mutable std::mutex slots_mutex_;  // guards the slot list against a restart; stats fields are written
                                    // only before the sampler starts and read after
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mutex_;  // guards stopping_
  std::condition_variable cv_;
  bool stopping_ = true;
  std::thread sampler_;
};

}  // namespace flowline::runtime
