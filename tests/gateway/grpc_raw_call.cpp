// grpc_raw_call.hpp: grpc::GenericStub's async calls, each driven to its end on a completion queue of its own.
#include "grpc_raw_call.hpp"

#if FLOWLINE_TEST_GRPC
#include "jina.pb.h"
#include "jina_v1.pb.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#endif

#include <stdexcept>

namespace flowline::testing {

#if FLOWLINE_TEST_GRPC

namespace {

// Waits for the one operation started on `queue` (its tag `tag`); false when it failed.
bool wait(grpc::CompletionQueue& queue, void* tag) {
  void* got = nullptr;
  bool ok = false;
  if (!queue.Next(&got, &ok)) throw std::logic_error("grpc_raw_call: the completion queue shut down");
  if (got != tag) throw std::logic_error("grpc_raw_call: an operation ended that was not waited for");
  return ok;
}

void shut_down(grpc::CompletionQueue& queue) {
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
}

grpc::ByteBuffer buffer_of(const std::string& bytes) {
  grpc::Slice slice(bytes);  // a copy
  return grpc::ByteBuffer(&slice, 1);
}

std::string bytes_of(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) throw std::runtime_error("grpc_raw_call: an answer could not be read");
  std::string out;
  for (const auto& slice : slices) out.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return out;
}

std::shared_ptr<grpc::Channel> channel_to(std::uint16_t port) {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
}

GrpcRawAnswer answer_of(const grpc::Status& status) {
  GrpcRawAnswer answer;
  answer.grpc_code = static_cast<int>(status.error_code());
  answer.grpc_message = status.error_message();
  return answer;
}

}  // namespace

GrpcRawAnswer grpc_raw_unary(std::uint16_t port, const std::string& method, const std::string& message,
                             std::chrono::milliseconds timeout) {
  grpc::GenericStub stub(channel_to(port));
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  const grpc::ByteBuffer request = buffer_of(message);
  grpc::ByteBuffer response;
  grpc::Status status;
  {
    auto call = stub.PrepareUnaryCall(&context, method, request, &queue);
    call->StartCall();
    int tag = 0;
    call->Finish(&response, &status, &tag);
    wait(queue, &tag);
  }
  shut_down(queue);
  GrpcRawAnswer answer = answer_of(status);
  if (status.ok()) answer.answers.push_back(bytes_of(response));
  return answer;
}

GrpcRawAnswer grpc_raw_stream(std::uint16_t port, const std::string& method, const std::vector<std::string>& messages,
                              std::chrono::milliseconds timeout) {
  grpc::GenericStub stub(channel_to(port));
  grpc::CompletionQueue queue;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  std::vector<std::string> answers;
  grpc::Status status;
  {
    auto call = stub.PrepareCall(&context, method, &queue);
    int tag = 0;
    call->StartCall(&tag);
    if (wait(queue, &tag)) {
      for (const auto& message : messages) {
        const grpc::ByteBuffer buffer = buffer_of(message);
        call->Write(buffer, &tag);
        if (!wait(queue, &tag)) break;  // the server ended the stream
      }
      call->WritesDone(&tag);
      wait(queue, &tag);
      for (;;) {
        grpc::ByteBuffer buffer;
        call->Read(&buffer, &tag);
        if (!wait(queue, &tag)) break;
        answers.push_back(bytes_of(buffer));
      }
    }
    call->Finish(&status, &tag);
    wait(queue, &tag);
  }
  shut_down(queue);
  GrpcRawAnswer answer = answer_of(status);
  answer.answers = std::move(answers);
  return answer;
}

std::string jina_text_request(const std::string& endpoint, const std::vector<std::string>& texts) {
  jina::DataRequestProto request;
  request.mutable_header()->set_exec_endpoint(endpoint);
  auto* docs = request.mutable_data()->mutable_docs();
  for (const auto& text : texts) (*docs->add_docs()->mutable_data())["text"].set_text(text);
  return request.SerializeAsString();
}

std::size_t jina_answer_documents(const std::string& answer) {
  jina::DataRequestProto proto;
  if (!proto.ParseFromString(answer))
    throw std::runtime_error("jina_answer_documents: the answer does not parse as a jina.DataRequestProto");
  return static_cast<std::size_t>(proto.data().docs().docs_size());
}

std::string jina_v1_text_request(const std::string& endpoint, const std::vector<std::string>& texts) {
  jina_v1::DataRequestProto request;
  request.mutable_header()->set_exec_endpoint(endpoint);
  for (std::size_t i = 0; i < texts.size(); ++i) {
    auto* doc = request.mutable_data()->mutable_docs()->add_docs();
    doc->set_id("v1-" + std::to_string(i));
    doc->set_text(texts[i]);
  }
  return request.SerializeAsString();
}

std::vector<std::string> jina_answer_texts(const std::string& answer, bool docarray_v1) {
  std::vector<std::string> texts;
  if (docarray_v1) {
    jina_v1::DataRequestProto proto;
    if (!proto.ParseFromString(answer))
      throw std::runtime_error("jina_answer_texts: the answer does not parse as a jina_v1.DataRequestProto");
    for (const auto& doc : proto.data().docs().docs()) texts.push_back(doc.text());
    return texts;
  }
  jina::DataRequestProto proto;
  if (!proto.ParseFromString(answer))
    throw std::runtime_error("jina_answer_texts: the answer does not parse as a jina.DataRequestProto");
  for (const auto& doc : proto.data().docs().docs()) {
    const auto it = doc.data().find("text");
    texts.push_back(it == doc.data().end() ? std::string() : it->second.text());
  }
  return texts;
}

#else

namespace {
[[noreturn]] void no_grpc() { throw std::logic_error("grpc_raw_call: this build has no gRPC C++"); }
}  // namespace

GrpcRawAnswer grpc_raw_unary(std::uint16_t, const std::string&, const std::string&, std::chrono::milliseconds) {
  no_grpc();
}
GrpcRawAnswer grpc_raw_stream(std::uint16_t, const std::string&, const std::vector<std::string>&,
                              std::chrono::milliseconds) {
  no_grpc();
}
std::string jina_text_request(const std::string&, const std::vector<std::string>&) { no_grpc(); }
std::size_t jina_answer_documents(const std::string&) { no_grpc(); }
std::string jina_v1_text_request(const std::string&, const std::vector<std::string>&) { no_grpc(); }
std::vector<std::string> jina_answer_texts(const std::string&, bool) { no_grpc(); }

#endif

}  // namespace flowline::testing
