// NoOp: passes documents through unchanged. A user-facing executor for joins (a node that only merges
// branches) and for trying a flow's shape out without a model.
#include "../builtin.hpp"

#include "flowline/executor.hpp"

namespace flowline::builtin {
namespace {

class NoOp : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"NoOp", "Pass documents through unchanged", {}, {}}; }
  explicit NoOp(const ExecutorContext& context) : Executor(context) {
    bind_default([](DocumentArray&, const RequestInfo&) {});
  }
};

}  // namespace

void register_no_op(Registry& registry) { registry.add<NoOp>("built-in"); }

}  // namespace flowline::builtin
