// The gRPC front's answer to a message that does not parse as the method's protobuf message
// (src/gateway/grpc/front.cpp): INVALID_ARGUMENT naming the method and the message it takes, on the stream
// after the answers before it, and on each unary method; the gateway serves on. A real gRPC client
// (grpc::GenericStub, grpc_raw_call.hpp) sends the bytes to a Gateway served in process on a loopback port.
#include "gateway_fixtures.hpp"
#include "grpc_raw_call.hpp"

using namespace gateway_test;
using testing::grpc_raw_stream;
using testing::grpc_raw_unary;
using testing::jina_answer_documents;
using testing::jina_answer_texts;
using testing::jina_text_request;
using testing::jina_v1_text_request;

namespace {

constexpr int kOk = 0;               // grpc::StatusCode::OK
constexpr int kInvalidArgument = 3;  // grpc::StatusCode::INVALID_ARGUMENT

// Bytes no protobuf message parses: field 1, length-delimited, says 5 bytes and 2 follow.
const std::string kTruncated{'\x0a', '\x05', 'a', 'b'};
// A field number 0 (the tag 0x00 that no message may have), then bytes.
const std::string kZeroTag{'\x00', '\x01', '\x02'};

// The gateway with its gRPC front on a free port, the fake encoder behind it.
struct GrpcServed : Served {
  GrpcServed() : Served(fake_encoder_flow(), GatewayOptions{.grpc_port = 0}) {}
  std::uint16_t grpc_port() const { return gateway->grpc_port(); }
};

// Answers a request without documents with one it makes ("made here") and passes others on unchanged, so that
// the answer to an empty request has a document that shows which docarray generation it was written in.
class MakesOne : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{"MakesOne", "makes a document for an empty request", {}, {"/make"}};
  }
  explicit MakesOne(const ExecutorContext& c) : Executor(c) {
    auto handler = [](DocumentArray& docs, const RequestInfo&) {
      if (!docs.empty()) return;
      Document made(Document::WithId{"made"});
      made.text = "made here";
      docs.push_back(std::move(made));
    };
    bind("/make", handler);
    bind_default(handler);
  }
};

Flow makes_one_flow() {
  static const bool registered = [] {
    Registry::global().add<MakesOne>();
    return true;
  }();
  (void)registered;
  Flow flow;
  flow.add({.name = "maker", .uses = "MakesOne"});
  return flow;
}

}  // namespace

TEST_CASE(
    "a Jina request without documents is answered in the docarray generation its stream's requests showed, "
    "else in docarray >= 0.30's",
    "[gateway][grpc]") {
  if (!Gateway::grpc_available()) FLOWLINE_SKIP("this build has no gRPC front (gRPC C++ was not found)");
  Served served(makes_one_flow(), GatewayOptions{.grpc_port = 0});
  const std::uint16_t port = served.gateway->grpc_port();
  // Both generations' clients send a request without documents alike: header and parameters, no data.
  const std::string empty = jina_v1_text_request("/make", {});
  for (const bool v1 : {true, false}) {
    INFO((v1 ? "docarray < 0.30" : "docarray >= 0.30"));
    const std::string with_docs = v1 ? jina_v1_text_request("/make", {"a cat"}) : jina_text_request("/make", {"a cat"});
    const auto answer =
        grpc_raw_stream(port, "/jina.JinaRPC/Call", {with_docs, empty, empty}, std::chrono::seconds(20));
    INFO("status " << answer.grpc_code << ": " << answer.grpc_message);
    CHECK(answer.grpc_code == kOk);
    REQUIRE(answer.answers.size() == 3);
    CHECK(jina_answer_texts(answer.answers[0], v1) == std::vector<std::string>{"a cat"});
    CHECK(jina_answer_texts(answer.answers[1], v1) == std::vector<std::string>{"made here"});
    CHECK(jina_answer_texts(answer.answers[2], v1) == std::vector<std::string>{"made here"});
  }
  // Nothing to go by (a unary call, a stream's first request): docarray >= 0.30's, the front's default.
  const auto unary =
      grpc_raw_unary(port, "/jina.JinaSingleDataRequestRPC/process_single_data", empty, std::chrono::seconds(20));
  INFO("status " << unary.grpc_code << ": " << unary.grpc_message);
  REQUIRE(unary.answers.size() == 1);
  CHECK(jina_answer_texts(unary.answers[0], false) == std::vector<std::string>{"made here"});
}

TEST_CASE(
    "a gRPC message that does not parse ends jina.JinaRPC/Call with INVALID_ARGUMENT naming the method, after "
    "the answers before it",
    "[gateway][grpc]") {
  if (!Gateway::grpc_available()) FLOWLINE_SKIP("this build has no gRPC front (gRPC C++ was not found)");
  GrpcServed served;
  const std::string good = jina_text_request("/encode", {"one", "two"});
  for (const std::string& bad : {kTruncated, kZeroTag}) {
    const auto answer =
        grpc_raw_stream(served.grpc_port(), "/jina.JinaRPC/Call", {good, bad, good}, std::chrono::seconds(20));
    INFO("status " << answer.grpc_code << ": " << answer.grpc_message);
    CHECK(answer.grpc_code == kInvalidArgument);
    CHECK_THAT(answer.grpc_message, testing::contains("request 2 of the stream"));
    CHECK_THAT(answer.grpc_message, testing::contains("jina.JinaRPC/Call"));
    CHECK_THAT(answer.grpc_message, testing::contains("does not parse as jina.DataRequestProto"));
    REQUIRE(answer.answers.size() == 1);  // the first request's; nothing after the refused one
    CHECK(jina_answer_documents(answer.answers[0]) == 2);
  }
  // A malformed first message: no answer, the same status.
  const auto first = grpc_raw_stream(served.grpc_port(), "/jina.JinaRPC/Call", {kTruncated}, std::chrono::seconds(20));
  CHECK(first.grpc_code == kInvalidArgument);
  CHECK_THAT(first.grpc_message, testing::contains("request 1 of the stream"));
  CHECK(first.answers.empty());
  // The gateway serves on: a stream of good messages is answered in full, with status OK.
  const auto after = grpc_raw_stream(served.grpc_port(), "/jina.JinaRPC/Call", {good, good}, std::chrono::seconds(20));
  INFO("status " << after.grpc_code << ": " << after.grpc_message);
  CHECK(after.grpc_code == kOk);
  REQUIRE(after.answers.size() == 2);
  CHECK(jina_answer_documents(after.answers[1]) == 2);
  // Each refusal is counted as a bad request on the gRPC route.
  const std::string metrics = Client(served.port()).get("/metrics").body;
  CHECK_THAT(metrics, testing::contains("flowline_requests_total{front=\"grpc\",outcome=\"bad_request\","
                                        "route=\"grpc\"} 3"));
}

TEST_CASE("a gRPC message that does not parse is refused with INVALID_ARGUMENT naming the method", "[gateway][grpc]") {
  if (!Gateway::grpc_available()) FLOWLINE_SKIP("this build has no gRPC front (gRPC C++ was not found)");
  GrpcServed served;
  struct Method {
    std::string path;     // as gRPC names it on the wire
    std::string name;     // as the status names it
    std::string message;  // the request message
  };
  const std::vector<Method> methods = {
      {"/jina.JinaSingleDataRequestRPC/process_single_data", "jina.JinaSingleDataRequestRPC/process_single_data",
       "jina.DataRequestProto"},
      {"/jina.JinaGatewayDryRunRPC/dry_run", "jina.JinaGatewayDryRunRPC/dry_run", "google.protobuf.Empty"},
      {"/jina.JinaDiscoverEndpointsRPC/endpoint_discovery", "jina.JinaDiscoverEndpointsRPC/endpoint_discovery",
       "google.protobuf.Empty"},
      {"/jina.JinaInfoRPC/_status", "jina.JinaInfoRPC/_status", "google.protobuf.Empty"},
  };
  for (const auto& method : methods) {
    for (const std::string& bad : {kTruncated, kZeroTag}) {
      const auto answer = grpc_raw_unary(served.grpc_port(), method.path, bad, std::chrono::seconds(20));
      INFO(method.path << ": status " << answer.grpc_code << ": " << answer.grpc_message);
      CHECK(answer.grpc_code == kInvalidArgument);
      CHECK_THAT(answer.grpc_message, testing::contains(method.name));
      CHECK_THAT(answer.grpc_message, testing::contains("does not parse as " + method.message));
      CHECK(answer.answers.empty());
    }
    // A well-formed message to the same method is answered.
    const std::string good =
        method.message == "google.protobuf.Empty" ? std::string() : jina_text_request("/encode", {"after"});
    const auto answer = grpc_raw_unary(served.grpc_port(), method.path, good, std::chrono::seconds(20));
    INFO(method.path << " after: status " << answer.grpc_code << ": " << answer.grpc_message);
    CHECK(answer.grpc_code == kOk);
    REQUIRE(answer.answers.size() == 1);
    if (method.message != "google.protobuf.Empty") CHECK(jina_answer_documents(answer.answers[0]) == 1);
  }
}
