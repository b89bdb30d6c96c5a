// A gRPC client that sends raw bytes to a method of the gateway's Jina gRPC front (grpc::GenericStub), so
// that tests can send messages no generated stub would write, and Jina messages to build and read those
// bytes. LibTorch-free, in the flowline_test_jina_grpc library (protobuf's headers stay out of the tests'
// precompiled header: LibTorch carries an older copy of them).
//
// Threads: any; each call opens its own channel and completion queue and is bounded by `timeout`. In a build
// without gRPC C++ every function throws std::logic_error.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace flowline::testing {

struct GrpcRawAnswer {
  int grpc_code = -1;                // grpc::StatusCode: 0 OK, 3 INVALID_ARGUMENT, 12 UNIMPLEMENTED, ...
  std::string grpc_message;          // the status's message
  std::vector<std::string> answers;  // the messages the server wrote, as bytes, in order
};

// A unary call of `method` ("/jina.JinaSingleDataRequestRPC/process_single_data") to 127.0.0.1:`port`, with
// `message` as the request's bytes.
GrpcRawAnswer grpc_raw_unary(std::uint16_t port, const std::string& method, const std::string& message,
                             std::chrono::milliseconds timeout);

// A bidirectional stream of `method` ("/jina.JinaRPC/Call"): writes `messages` in order (stopping at the
// first write the server no longer takes), half-closes, then reads every answer until the status.
GrpcRawAnswer grpc_raw_stream(std::uint16_t port, const std::string& method, const std::vector<std::string>& messages,
                              std::chrono::milliseconds timeout);

// A serialized jina.DataRequestProto for `endpoint` with one document per text (docarray's "text" field).
std::string jina_text_request(const std::string& endpoint, const std::vector<std::string>& texts);

// The documents in a serialized jina.DataRequestProto answer; throws std::runtime_error when the bytes do
// not parse as one.
std::size_t jina_answer_documents(const std::string& answer);

// A serialized jina_v1.DataRequestProto (docarray < 0.30's documents, as clip-client sends them) for `endpoint`
// with one document per text, ids "v1-0", "v1-1", ...; with no texts, a request without documents (header only,
// as a Jina client of either generation sends one).
std::string jina_v1_text_request(const std::string& endpoint, const std::vector<std::string>& texts);

// The texts of the documents in a serialized answer, read as docarray < 0.30's (`docarray_v1`) or >= 0.30's
// documents; throws std::runtime_error when the bytes do not parse as that generation's DataRequestProto.
std::vector<std::string> jina_answer_texts(const std::string& answer, bool docarray_v1);

}  // namespace flowline::testing
