// Fuzz target: the gRPC front's decoding path — bytes as a jina.DataRequestProto (what gRPC hands the front
// after HTTP/2 framing), then into a gateway call (documents, parameters, endpoint), then the answer
// written back and parsed again. Properties: a request flowline does not read is a RefusedError
// (BadRequest or TooLarge) with a message, never a crash; a read one has at most max_documents documents,
// and its answer parses back with one document per document, ids kept. Each input is read as both
// generations of Jina's documents (docarray >= 0.30's DocProto, < 0.30's DocumentProto).
#include "grpc/jina_proto.hpp"

#include "fuzz_support.hpp"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace gw = flowline::gateway;

namespace {

constexpr gw::ParseLimits kLimits{.max_documents = 64, .max_json_depth = 32};

// Document i's id in an answer of either generation.
std::string first_id(const jina::DataRequestProto& answer, int i) {
  const auto& doc = answer.data().docs().docs(i);
  const auto it = doc.data().find("id");
  return it == doc.data().end() ? std::string("(none)") : it->second.text();
}
std::string first_id(const jina_v1::DataRequestProto& answer, int i) { return answer.data().docs().docs(i).id(); }

// The bytes as one generation's request, through call_from_proto and write_answer and back.
template <class Proto>
void check(const std::uint8_t* data, std::size_t size) {
  Proto request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return;  // gRPC refuses these before the front
  try {
    gw::Call call = gw::call_from_proto(request, kLimits);
    if (call.docs.size() > kLimits.max_documents) flowline::fuzz::broken("more documents than max_documents");
    if (call.endpoint.empty() || call.request_id.empty()) flowline::fuzz::broken("a call without endpoint or id");
    for (auto& doc : call.docs) doc.embedding = at::ones({3});
    gw::write_answer(request, call.docs);
    Proto answer;
    if (!answer.ParseFromString(request.SerializeAsString())) flowline::fuzz::broken("an answer that does not parse");
    const int count = answer.data().docs().docs_size();
    if (static_cast<std::size_t>(count) != call.docs.size())
      flowline::fuzz::broken("an answer without one document per document");
    for (int i = 0; i < count; ++i) {
      if (first_id(answer, i) != call.docs[static_cast<std::size_t>(i)].id)
        flowline::fuzz::broken(fmt::format("document {}: its id did not come back", i));
    }
  } catch (const gw::RefusedError& e) {
    if (e.kind != gw::Refusal::BadRequest && e.kind != gw::Refusal::TooLarge)
      flowline::fuzz::broken(fmt::format("a refusal of kind {}: {}", static_cast<int>(e.kind), e.what()));
    if (std::string_view(e.what()).empty()) flowline::fuzz::broken("a refusal without a message");
  }
}

}  // namespace

// Both generations of documents (docarray >= 0.30's and < 0.30's), as the front may take either.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check<jina::DataRequestProto>(data, size);
  check<jina_v1::DataRequestProto>(data, size);
  return 0;
}
