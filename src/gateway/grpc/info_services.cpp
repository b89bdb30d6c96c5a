// info_services.hpp: one service class per Jina service, each with its one method as a raw callback.
#include "info_services.hpp"

#include "front_support.hpp"
#include "jina.grpc.pb.h"

#include "flowline/version.hpp"

#include <google/protobuf/empty.pb.h>

#include <string>

namespace flowline::gateway {

namespace {

// What the three services share: the request (Empty) parsed, the answer serialized, the count.
class InfoCalls {
 protected:
  explicit InfoCalls(Core& core) : core_(core) {}

  // nullopt when `message` parses as google.protobuf.Empty, else the refusal's message.
  static std::optional<std::string> unparsed(std::string_view method, const grpc::ByteBuffer& message) {
    grpc::ByteBuffer bytes(message);  // shares its slices
    google::protobuf::Empty empty;
    if (parse_message(bytes, empty)) return std::nullopt;
    return not_parsed(method, empty, message.Length());
  }

  grpc::ServerUnaryReactor* finish(grpc::CallbackServerContext* context, const google::protobuf::MessageLite& answer,
                                   grpc::ByteBuffer* out) {
    auto* reactor = context->DefaultReactor();
    std::optional<std::string> failed;
    try {
      failed = serialize_message(answer, *out);
    } catch (const std::bad_alloc&) {
      failed = "out of memory";
    }
    if (failed) {
      core_.count_answer(FrontKind::Grpc, Route::Info, 500, Refusal::Failed, 0, 0);
      reactor->Finish(grpc::Status(grpc::StatusCode::INTERNAL, "the answer could not be written: " + *failed));
    } else {
      core_.count_answer(FrontKind::Grpc, Route::Info, 200, std::nullopt, 0, 0);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* refuse(grpc::CallbackServerContext* context, Refusal kind, const std::string& message) {
    core_.count_answer(FrontKind::Grpc, Route::Info, http_status(kind), kind, 0, 0);
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status(grpc_code(kind), message));
    return reactor;
  }
  grpc::ServerUnaryReactor* unauthenticated(grpc::CallbackServerContext* context) {
    return refuse(context, Refusal::Unauthenticated, "missing or wrong bearer token");
  }

  Core& core_;
};

class DryRun final
    : public jina::JinaGatewayDryRunRPC::WithRawCallbackMethod_dry_run<jina::JinaGatewayDryRunRPC::Service>,
      InfoCalls {
 public:
  explicit DryRun(Core& core) : InfoCalls(core) {}
  grpc::ServerUnaryReactor* dry_run(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* answer) override {
    if (auto bad = unparsed("jina.JinaGatewayDryRunRPC/dry_run", *request))
      return refuse(context, Refusal::BadRequest, *bad);
    jina::StatusProto status;
    if (const auto reason = core_.not_ready()) {
      status.set_code(jina::StatusProto::ERROR);
      status.set_description(*reason);
      status.mutable_exception()->set_name("FlowNotReady");
      status.mutable_exception()->add_args(*reason);
    } else {
      status.set_code(jina::StatusProto::SUCCESS);
    }
    return finish(context, status, answer);
  }
};

class Endpoints final : public jina::JinaDiscoverEndpointsRPC::WithRawCallbackMethod_endpoint_discovery<
                            jina::JinaDiscoverEndpointsRPC::Service>,
                        InfoCalls {
 public:
  explicit Endpoints(Core& core) : InfoCalls(core) {}
  grpc::ServerUnaryReactor* endpoint_discovery(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                               grpc::ByteBuffer* answer) override {
    if (!authorized(core_, context)) return unauthenticated(context);
    if (auto bad = unparsed("jina.JinaDiscoverEndpointsRPC/endpoint_discovery", *request))
      return refuse(context, Refusal::BadRequest, *bad);
    jina::EndpointsProto endpoints;
    for (const auto& e : core_.endpoints) endpoints.add_endpoints(e);
    return finish(context, endpoints, answer);
  }
};

class Status final : public jina::JinaInfoRPC::WithRawCallbackMethod__status<jina::JinaInfoRPC::Service>, InfoCalls {
 public:
  explicit Status(Core& core) : InfoCalls(core) {}
  grpc::ServerUnaryReactor* _status(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* answer) override {
    if (!authorized(core_, context)) return unauthenticated(context);
    if (auto bad = unparsed("jina.JinaInfoRPC/_status", *request)) return refuse(context, Refusal::BadRequest, *bad);
    jina::JinaInfoProto info;
    (*info.mutable_jina())["flowline"] = version();
    (*info.mutable_jina())["protocol"] = "jina 3.34 gRPC";
    return finish(context, info, answer);
  }
};

}  // namespace

std::vector<std::unique_ptr<grpc::Service>> make_info_services(Core& core) {
  std::vector<std::unique_ptr<grpc::Service>> services;
  services.push_back(std::make_unique<DryRun>(core));
  services.push_back(std::make_unique<Endpoints>(core));
  services.push_back(std::make_unique<Status>(core));
  return services;
}

}  // namespace flowline::gateway
