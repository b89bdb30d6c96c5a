// ExecutorRunner: one executor run on documents with request parameters and no Flow (MediaPipe's
// CalculatorRunner for flowline). It builds the executor from a registry entry the way a flow does — its
// `with:` values over the spec's defaults, checked against the spec — and each post() checks the request's
// parameters against the entry's declarations (check_request_params) before calling the handler, so a test
// sees what a flow's replica would do, on the test's own thread, with no queues or threads between.
//
// Threads: one runner is used by one thread. It owns its executor (closed with Complete on destruction).
#pragma once

#include "flowline/executor.hpp"
#include "flowline/registry.hpp"

#include <boost/json/object.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace flowline::testing {

class ExecutorRunner {
 public:
  // `type`: the executor type in `registry`; `with`: its parameters (unknown ones, wrong types and missing
  // required ones throw ConfigError-like flowline::Error naming them); `runtime`: where it runs (its `type`
  // is set from the entry; the name defaults to the type's).
  ExecutorRunner(const Registry& registry, std::string_view type, const boost::json::object& with = {},
                 RuntimeInfo runtime = {});
  ~ExecutorRunner();
  ExecutorRunner(const ExecutorRunner&) = delete;
  ExecutorRunner& operator=(const ExecutorRunner&) = delete;

  // Runs the handler of `endpoint` on `docs` and returns what it left. The request's parameters are
  // checked first, as a flow's replica checks them: a breach throws RequestError and the handler does not
  // run. Whatever the handler throws propagates.
  DocumentArray post(std::string_view endpoint, DocumentArray docs, const boost::json::object& parameters = {});

  Executor& executor() { return *executor_; }
  const Registry::Entry& entry() const { return entry_; }

 private:
  const Registry::Entry& entry_;
  RuntimeInfo runtime_;
  Params params_;
  std::unique_ptr<Executor> executor_;
};

}  // namespace flowline::testing
