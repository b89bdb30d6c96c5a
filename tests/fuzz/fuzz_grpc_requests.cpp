// Fuzz target: the gRPC front's decoding path — bytes as a jina.DataRequestProto (what gRPC hands the front
// after HTTP/2 framing), then into a gateway call (documents, parameters, endpoint), then the answer
// written back and parsed again. Properties: a request flowline does not read is a RefusedError
// (BadRequest or TooLarge) with a message, never a crash; a read one has at most max_documents documents,
// and its answer parses back with one document per document, ids kept.
#include "grpc/jina_proto.hpp"

#include "fuzz_support.hpp"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

namespace gw = flowline::gateway;

namespace {

constexpr gw::ParseLimits kLimits{.max_documents = 64, .max_json_depth = 32};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  jina::DataRequestProto request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;  // gRPC refuses these before the front
  try {
    gw::Call call = gw::call_from_proto(request, kLimits);
    if (call.docs.size() > kLimits.max_documents) flowline::fuzz::broken("more documents than max_documents");
    if (call.endpoint.empty() || call.request_id.empty()) flowline::fuzz::broken("a call without endpoint or id");
    for (auto& doc : call.docs) doc.embedding = at::ones({3});
    gw::write_answer(request, call.docs);
    jina::DataRequestProto answer;
    if (!answer.ParseFromString(request.SerializeAsString())) flowline::fuzz::broken("an answer that does not parse");
    const auto& docs = answer.data().docs().docs();
    if (static_cast<std::size_t>(docs.size()) != call.docs.size())
      flowline::fuzz::broken("an answer without one document per document");
    for (int i = 0; i < docs.size(); ++i) {
      const auto it = docs[i].data().find("id");
      if (it == docs[i].data().end() || it->second.text() != call.docs[static_cast<std::size_t>(i)].id)
        flowline::fuzz::broken(fmt::format("document {}: its id did not come back", i));
    }
  } catch (const gw::RefusedError& e) {
    if (e.kind != gw::Refusal::BadRequest && e.kind != gw::Refusal::TooLarge)
      flowline::fuzz::broken(fmt::format("a refusal of kind {}: {}", static_cast<int>(e.kind), e.what()));
    if (std::string_view(e.what()).empty()) flowline::fuzz::broken("a refusal without a message");
  }
  return 0;
}
