// Calling every attached observer, keeping their failures away from the runtime.
#include "observers.hpp"

#include <spdlog/spdlog.h>

#include <exception>

namespace flowline::runtime {

template <class Hook>
void ObserverList::each(const char* hook, Hook&& call) const {
  for (const auto& observer : observers_) {
    try {
      call(*observer);
    } catch (const std::exception& e) {
      spdlog::error("flow observer: {}() threw: {}", hook, e.what());
    } catch (...) {
      spdlog::error("flow observer: {}() threw", hook);
    }
  }
}

void ObserverList::flow_start(const FlowTopology& topology) const {
  each("on_flow_start", [&](FlowObserver& o) { o.on_flow_start(topology); });
}
void ObserverList::replica_ready(const ReplicaReady& ready) const {
  each("on_replica_ready", [&](FlowObserver& o) { o.on_replica_ready(ready); });
}
void ObserverList::flow_loaded() const {
  each("on_flow_loaded", [&](FlowObserver& o) { o.on_flow_loaded(); });
}
void ObserverList::batch_done(const BatchDone& batch) const {
  each("on_batch", [&](FlowObserver& o) { o.on_batch(batch); });
}
void ObserverList::device_sample(const DeviceSample& sample) const {
  each("on_device_sample", [&](FlowObserver& o) { o.on_device_sample(sample); });
}
void ObserverList::flow_stop() const {
  each("on_flow_stop", [&](FlowObserver& o) { o.on_flow_stop(); });
}

}  // namespace flowline::runtime
