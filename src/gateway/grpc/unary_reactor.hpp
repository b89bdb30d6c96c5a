// The reactor of one unary call of the gRPC front (front.cpp): as gRPC's default reactor, and a client that
// cancels its call (or goes away) sets the request's cancellation flag, so the flow drops the request or its
// handler stops, as at the request's deadline. Private to flowline::gateway.
//
// Threads and ownership: made with new by the service method and given to gRPC, which calls OnCancel (on any
// thread, at most once) and OnDone once Finish() has completed; OnDone deletes it. The flag is shared with
// the request in the flow.
#pragma once

#include "flowline/executor.hpp"

#include <grpcpp/grpcpp.h>

#include <memory>
#include <utility>

namespace flowline::gateway {

class CancellableUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit CancellableUnaryReactor(std::shared_ptr<Cancellation::Flag> cancel) : cancel_(std::move(cancel)) {}
  void OnCancel() override { cancel_->store(true); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Cancellation::Flag> cancel_;
};

}  // namespace flowline::gateway
