// GPU memory over a flow's run: readings at start and after loading, and an NVML sampler keeping the peak.
#include "device_monitor.hpp"

#include "flowline/device.hpp"

#include <algorithm>
#include <chrono>

namespace flowline::runtime {

void DeviceMonitor::on_flow_start(const FlowTopology& topology) {
  stop_sampler();
  std::vector<std::unique_ptr<Slot>> slots;
  for (const auto& device : topology.gpus) {
    auto slot = std::make_unique<Slot>();
    slot->device = device;
    slot->stats.device = device.str();
    if (const auto nvml = nvml_memory(device)) {
      slot->stats.has_nvml = true;
      slot->stats.nvml_total_bytes = nvml->total;
      slot->stats.nvml_used_at_start_bytes = nvml->used;
      slot->peak.store(nvml->used);
    }
    if (const auto memory = device_memory(device)) {
      reset_device_peaks(device);
      slot->allocated_at_start = memory->allocated;
    }
    slots.push_back(std::move(slot));
  }
  const bool any_nvml = std::any_of(slots.begin(), slots.end(), [](const auto& s) { return s->stats.has_nvml; });
  {
    std::lock_guard lock(slots_mutex_);
    slots_ = std::move(slots);
  }
  if (any_nvml) {
    {
      std::lock_guard lock(mutex_);
      stopping_ = false;
    }
    sampler_ = std::thread([this] { sample_loop(); });
  }
}

// Every replica is constructed (and warmed up): the allocator's peaks restart here so they measure
// processing; the start-up peak is kept apart.
void DeviceMonitor::on_flow_loaded() {
  std::lock_guard lock(slots_mutex_);
  for (auto& slot : slots_) {
    if (const auto memory = device_memory(slot->device)) {
      slot->stats.load_bytes = memory->allocated - slot->allocated_at_start;
      slot->stats.reserved_after_load_bytes = memory->reserved;
      slot->stats.startup_peak_allocated_bytes = memory->peak_allocated;
      reset_device_peaks(slot->device);
    }
    if (const auto nvml = nvml_memory(slot->device)) slot->stats.nvml_used_after_load_bytes = nvml->used;
  }
}

void DeviceMonitor::on_device_sample(const DeviceSample& sample) {
  std::lock_guard lock(slots_mutex_);
  for (auto& slot : slots_) {
    if (slot->device != sample.device) continue;
    std::int64_t seen = slot->peak.load();
    while (sample.used_bytes > seen && !slot->peak.compare_exchange_weak(seen, sample.used_bytes)) {
    }
  }
}

void DeviceMonitor::sample_once() const {
  std::vector<c10::Device> devices;
  {
    std::lock_guard lock(slots_mutex_);
    for (const auto& slot : slots_) {
      if (slot->stats.has_nvml) devices.push_back(slot->device);
    }
  }
  for (const auto& device : devices) {
    if (const auto nvml = nvml_memory(device)) publish_to_.device_sample(DeviceSample{device, nvml->used, nvml->total});
  }
}

void DeviceMonitor::sample_loop() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    sample_once();
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_; });
  }
}

void DeviceMonitor::stop_sampler() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !sampler_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

std::vector<DeviceStats> DeviceMonitor::snapshot() const {
  bool running = false;
  {
    std::lock_guard lock(mutex_);
    running = !stopping_;
  }
  if (running) sample_once();  // a reading now, so a snapshot mid-run includes the present
  std::lock_guard lock(slots_mutex_);
  std::vector<DeviceStats> out;
  for (const auto& slot : slots_) {
    DeviceStats s = slot->stats;
    if (const auto memory = device_memory(slot->device)) {
      s.peak_allocated_bytes = memory->peak_allocated;
      s.peak_reserved_bytes = memory->peak_reserved;
    }
    if (s.has_nvml) s.nvml_peak_used_bytes = slot->peak.load();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace flowline::runtime
