// jina_grpc_call.hpp: the call, with the generated Jina protocol code where gRPC C++ is built.
#include "jina_grpc_call.hpp"

#if FLOWLINE_TEST_GRPC
#include "jina.grpc.pb.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#endif

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace flowline::testing {

#if FLOWLINE_TEST_GRPC

bool jina_grpc_available() { return true; }

JinaGrpcAnswer jina_grpc_call(std::uint16_t port, const std::string& endpoint, const std::string& parameters_json,
                              const std::string& id, const std::vector<float>& embedding,
                              std::chrono::milliseconds timeout, const std::function<bool()>& cancel_when) {
  jina::DataRequestProto request;
  request.mutable_header()->set_exec_endpoint(endpoint);
  if (!google::protobuf::util::JsonStringToMessage(parameters_json, request.mutable_parameters()).ok())
    throw std::invalid_argument("jina_grpc_call: the parameters are not a JSON object: " + parameters_json);
  auto& data = *request.mutable_data()->mutable_docs()->add_docs()->mutable_data();
  data["id"].set_text(id);
  auto* dense = data["embedding"].mutable_ndarray()->mutable_dense();
  std::string buffer(embedding.size() * sizeof(float), '\0');
  std::memcpy(buffer.data(), embedding.data(), buffer.size());
  dense->set_buffer(buffer);
  dense->add_shape(static_cast<std::uint32_t>(embedding.size()));
  dense->set_dtype("<f4");

  const auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  const auto stub = jina::JinaSingleDataRequestRPC::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  jina::DataRequestProto reply;
  std::atomic<bool> finished{false};
  std::thread canceller;
  if (cancel_when) {
    canceller = std::thread([&] {
      while (!finished.load()) {
        if (cancel_when()) return context.TryCancel();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  const grpc::Status status = stub->process_single_data(&context, request, &reply);
  finished = true;
  if (canceller.joinable()) canceller.join();
  JinaGrpcAnswer answer;
  answer.grpc_code = static_cast<int>(status.error_code());
  answer.grpc_message = status.error_message();
  if (status.ok()) {
    answer.header_error = reply.header().status().code() == jina::StatusProto::ERROR;
    answer.description = reply.header().status().description();
    answer.exception = reply.header().status().exception().name();
    answer.documents = static_cast<std::size_t>(reply.data().docs().docs_size());
  }
  return answer;
}

#else

bool jina_grpc_available() { return false; }

JinaGrpcAnswer jina_grpc_call(std::uint16_t, const std::string&, const std::string&, const std::string&,
                              const std::vector<float>&, std::chrono::milliseconds, const std::function<bool()>&) {
  throw std::logic_error("jina_grpc_call: this build has no gRPC C++");
}

#endif

}  // namespace flowline::testing
