// The ClipEncoder with http(s) image uris: off unless the flow sets allow_http, non-public addresses refused
// unless http_allow_private_addresses, and a download embedded as the same bytes sent as a blob are. The images
// are served by tests/images/http_image_server.py on a loopback port. And Cohere's Python client on /v2/embed with
// an image, reading the answer's per-image metadata.
#include "../gateway/gateway_fixtures.hpp"
#include "../images/image_server.hpp"

#include "flowline/clip_encoder/clip_encoder.hpp"
#include "flowline/flow.hpp"
#include "flowline/io.hpp"
#include "flowline/registry.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <fstream>
#include <iterator>

using namespace flowline;

namespace {

namespace fs = std::filesystem;
const fs::path kSource(FLOWLINE_SOURCE_DIR);
const fs::path kImage = kSource / "tests/clip_encoder/data/images/smooth-48x30.jpg";

Registry& http_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    clip_encoder::register_clip_encoder(*r);
    return r;
  }();
  return *registry;
}

Flow http_flow(boost::json::object with) {
  with["model"] = (kSource / "tests/data/tiny-models/clip").string();
  with["warmup"] = false;
  Flow flow(FlowOptions{}, http_registry());
  flow.add({.name = "clip", .uses = "ClipEncoder", .with = with, .device = "cpu"});
  return flow;
}

// One request of one document: the response.
Response post_one(Flow& flow, Document doc) {
  DocumentArray docs;
  docs.push_back(std::move(doc));
  ArraySource source(std::move(docs));
  std::vector<Response> responses;
  flow.post("/encode", source, [&](Response&& r) { responses.push_back(std::move(r)); });
  REQUIRE(responses.size() == 1);
  return std::move(responses[0]);
}

Document uri_doc(const std::string& id, const std::string& uri) {
  Document d(Document::WithId{id});
  d.uri = uri;
  return d;
}

}  // namespace

TEST_CASE("a ClipEncoder fetches an http image only when its flow allows it", "[clip_encoder][http]") {
  const auto server = testing::start_image_server("clip-http", kImage);
  const std::string uri = server.url("/image.jpg");
  {
    Flow off = http_flow({});
    const Response r = post_one(off, uri_doc("web", uri));
    CHECK(r.request_error);
    CHECK_THAT(r.error, testing::contains("document 'web': http URI refused: fetching images over http(s) is off"));
  }
  {
    Flow public_only = http_flow({{"allow_http", true}});
    const Response r = post_one(public_only, uri_doc("web", uri));
    CHECK(r.request_error);
    CHECK_THAT(r.error, testing::contains(fmt::format("document 'web': cannot fetch '{}': host '127.0.0.1' is "
                                                      "127.0.0.1, a loopback address: refused",
                                                      uri)));
  }
  Flow allowed = http_flow({{"allow_http", true}, {"http_allow_private_addresses", true}, {"http_timeout", 5.0}});
  DocumentArray docs;
  docs.push_back(uri_doc("web", uri));
  docs.push_back(uri_doc("redirected", server.url("/redirect")));
  Document blob(Document::WithId{"blob"});
  std::ifstream in(kImage, std::ios::binary);
  blob.blob = Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(blob.blob.empty());
  docs.push_back(std::move(blob));
  const DocumentArray out = allowed.post("/encode", std::move(docs));
  REQUIRE(out.size() == 3);
  for (std::size_t i = 0; i < 2; ++i) {
    INFO(out[i].id);
    REQUIRE(out[i].embedding.defined());
    CHECK(at::allclose(out[i].embedding, out[2].embedding, 0, 1e-6));
  }
  const Response missing = post_one(allowed, uri_doc("gone", server.url("/missing")));
  CHECK(missing.request_error);
  CHECK_THAT(missing.error, testing::contains("document 'gone': cannot fetch"));
  CHECK_THAT(missing.error, testing::contains("HTTP 404 Not Found"));
}

TEST_CASE("Cohere's Python client embeds an image through /v2/embed and reads its metadata",
          "[clip_encoder][gateway][clients]") {
  const fs::path python = kSource / ".venv-clients/bin/python";
  if (!fs::exists(python) || testing::run_process(python.string() + " -c 'import cohere' 2>&1").exit_code != 0) {
    WARN("no .venv-clients with the cohere package (scripts/setup-clients.sh): not tested");
    return;
  }
  // The gateway reads endpoints from the global registry; test_clip_encoder.cpp may have registered it already.
  if (!Registry::global().find_registered("ClipEncoder")) clip_encoder::register_clip_encoder(Registry::global());
  Flow flow;
  flow.add({.name = "clip",
            .uses = "ClipEncoder",
            .with = {{"model", (kSource / "tests/data/tiny-models/clip").string()}, {"warmup", false}},
            .device = "cpu"});
  gateway_test::Served served(std::move(flow));
  const fs::path image = kSource / "tests/clip_encoder/data/images/rgba-33x33.png";
  const auto r =
      testing::run_process(fmt::format("{} {}/tests/clip_encoder/cohere_image_client.py "
                                       "http://127.0.0.1:{} {} 2>&1",
                                       python.string(), kSource.string(), served.port(), image.string()));
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  const auto answer = boost::json::parse(r.out).as_object();
  CHECK(boost::json::serialize(answer.at("images")) == R"([{"width":33,"height":33,"format":"png","bit_depth":32}])");
  CHECK(answer.at("billed_images").to_number<double>() == 1);  // the client reads it as a float
  CHECK(answer.at("dims").as_int64() > 0);
}
