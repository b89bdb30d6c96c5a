// The observers a Flow attaches, called as one: each hook goes to every observer in attach order, and an
// exception from one is logged and dropped so that watching never breaks serving. The list is fixed while
// the flow runs (attach() only before start()), so calling it needs no lock. Private to flowline::core.
#pragma once

#include "flowline/observer.hpp"

#include <memory>
#include <vector>

namespace flowline::runtime {

class ObserverList {
 public:
  void add(std::shared_ptr<FlowObserver> observer) { observers_.push_back(std::move(observer)); }

  void flow_start(const FlowTopology& topology) const;
  void replica_ready(const ReplicaReady& ready) const;
  void flow_loaded() const;
  void batch_done(const BatchDone& batch) const;
  void device_sample(const DeviceSample& sample) const;
  void flow_stop() const;

 private:
  template <class Hook>
  void each(const char* hook, Hook&& call) const;

  std::vector<std::shared_ptr<FlowObserver>> observers_;
};

}  // namespace flowline::runtime
