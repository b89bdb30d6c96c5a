// One unary call to a gateway's Jina gRPC front (jina.JinaSingleDataRequestRPC/process_single_data), for tests
// that check what a client over gRPC is answered. Kept in a file of its own so that protobuf's headers stay
// out of the test's precompiled header (LibTorch carries an older copy of them).
//
// Threads: any; each call opens its own channel and is bounded by `timeout`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flowline::testing {

struct JinaGrpcAnswer {
  int grpc_code = -1;         // grpc::StatusCode: 0 OK, 3 INVALID_ARGUMENT, 13 INTERNAL, ...
  std::string grpc_message;   // the status's message, when not OK
  bool header_error = false;  // the answer's header status is Jina's ERROR (an executor failed it)
  std::string description;    // the header status's description
  std::string exception;      // the header's exception name ("ExecutorError")
  std::size_t documents = 0;  // documents in the answer
};

// Whether this build has gRPC C++ (the gateway's gRPC front and this client).
bool jina_grpc_available();

// Sends one document (`id`, with `embedding`) to `endpoint` with `parameters_json` (a JSON object as text)
// to 127.0.0.1:`port`. With `cancel_when`, a thread of its own asks it every 10 ms while the call is open and
// cancels the call (ClientContext::TryCancel; the answer is then CANCELLED) once it returns true.
JinaGrpcAnswer jina_grpc_call(std::uint16_t port, const std::string& endpoint, const std::string& parameters_json,
                              const std::string& id, const std::vector<float>& embedding,
                              std::chrono::milliseconds timeout, const std::function<bool()>& cancel_when = {});

}  // namespace flowline::testing
