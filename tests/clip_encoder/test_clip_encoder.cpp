// Tests of the ClipEncoder executor on the tiny CLIP and SigLIP checkpoints: text and image embeddings against
// ClipModel's own output and transformers' (goldens made by tests/clip_encoder/make_goldens.py from the images
// in tests/clip_encoder/data/images), /rank against transformers' probabilities, bad images failing their own
// request, local paths refused outside allowed_uri_roots unless the documents are the user's own, and Jina's
// /post through the gateway with image documents.
#include "../gateway/gateway_fixtures.hpp"

#include "flowline/clip_encoder/clip_encoder.hpp"
#include "flowline/device.hpp"
#include "flowline/flow.hpp"
#include "flowline/flow_config.hpp"
#include "flowline/images.hpp"
#include "flowline/io.hpp"
#include "flowline/models/clip_model.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/registry.hpp"
#include "flowline/vector_index/vector_index.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <fstream>
#include <iterator>

using namespace flowline;
using gateway_test::Client;
using gateway_test::Served;

namespace {

namespace fs = std::filesystem;
const fs::path kSource(FLOWLINE_SOURCE_DIR);
const fs::path kTiny = kSource / "tests/data/tiny-models";
const fs::path kData = kSource / "tests/clip_encoder/data";

Registry& clip_registry() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_executors(*r);
    clip_encoder::register_clip_encoder(*r);
    vector_index::register_vector_index(*r);  // the shipped image flows' index
    return r;
  }();
  return *registry;
}

Bytes file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Goldens {
  std::vector<std::string> texts;
  std::vector<fs::path> images;
  at::Tensor image_embeds, text_embeds, text_to_images, image_to_texts;
};

Goldens read_goldens(const std::string& kind) {
  Goldens g;
  std::ifstream in(kData / "captions.json");
  const auto captions = boost::json::parse(std::string(std::istreambuf_iterator<char>(in), {})).as_object();
  for (const auto& t : captions.at("texts").as_array()) g.texts.emplace_back(t.as_string());
  for (const auto& f : captions.at("images").as_array())
    g.images.push_back(kData / "images" / std::string(f.as_string()));
  const models::SafetensorsFile file(kData / (kind + ".safetensors"));
  g.image_embeds = file.get("image_embeds").clone();
  g.text_embeds = file.get("text_embeds").clone();
  g.text_to_images = file.get("text_to_images").clone();
  g.image_to_texts = file.get("image_to_texts").clone();
  return g;
}

Flow clip_flow(const std::string& kind, boost::json::object with = {}, FlowOptions options = {}) {
  with["model"] = (kTiny / kind).string();
  with["warmup"] = false;
  Flow flow(options, clip_registry());
  flow.add({.name = "clip", .uses = "ClipEncoder", .with = with, .device = "cpu"});
  return flow;
}

// Images alternately as blobs and as local paths (uri) under the allowed folder.
Document image_document(const fs::path& file, std::size_t i) {
  Document d(Document::WithId{file.filename().string()});
  if (i % 2 == 0) {
    d.blob = file_bytes(file);
  } else {
    d.uri = file.string();
  }
  return d;
}

double cosine(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.to(at::kDouble).flatten(), y = b.to(at::kDouble).flatten();
  return (x.dot(y) / (x.norm() * y.norm())).item<double>();
}

// The goldens' texts, then their images as blobs, one document each; golden_embedding(g, i) is row i's expected
// embedding.
DocumentArray golden_documents(const Goldens& g) {
  DocumentArray docs;
  for (const auto& t : g.texts) docs.push_back(Document(t));
  for (const auto& file : g.images) {
    Document d;
    d.blob = file_bytes(file);
    docs.push_back(std::move(d));
  }
  return docs;
}

at::Tensor golden_embedding(const Goldens& g, std::size_t i) {
  return i < g.texts.size() ? g.text_embeds[static_cast<std::int64_t>(i)]
                            : g.image_embeds[static_cast<std::int64_t>(i - g.texts.size())];
}

std::vector<Response> post_each(Flow& flow, std::string_view endpoint, DocumentArray docs) {
  ArraySource source(std::move(docs));
  std::vector<Response> responses;
  flow.post(
      endpoint, source, [&](Response&& r) { responses.push_back(std::move(r)); }, PostOptions{.request_size = 1});
  return responses;
}

}  // namespace

TEST_CASE("a ClipEncoder's text and image embeddings equal transformers' CLIP and SigLIP", "[clip_encoder]") {
  for (const std::string kind : {"clip", "siglip"}) {
    INFO(kind);
    const Goldens g = read_goldens(kind);
    Flow flow = clip_flow(kind, {{"allowed_uri_roots", boost::json::array{(kData / "images").string()}}});
    DocumentArray docs;
    for (const auto& t : g.texts) docs.push_back(Document(t));
    for (std::size_t i = 0; i < g.images.size(); ++i) docs.push_back(image_document(g.images[i], i));
    const DocumentArray out = flow.post("/encode", std::move(docs));
    REQUIRE(out.size() == g.texts.size() + g.images.size());
    for (std::size_t t = 0; t < g.texts.size(); ++t) {
      INFO("text '" << g.texts[t] << "'");
      REQUIRE(out[t].embedding.defined());
      CHECK(out[t].embedding.device().is_cpu());
      CHECK(cosine(out[t].embedding, g.text_embeds[static_cast<std::int64_t>(t)]) >= 0.9999);
    }
    for (std::size_t i = 0; i < g.images.size(); ++i) {
      INFO("image " << g.images[i].filename());
      const Document& d = out[g.texts.size() + i];
      REQUIRE(d.embedding.defined());
      CHECK(cosine(d.embedding, g.image_embeds[static_cast<std::int64_t>(i)]) >= 0.9999);
    }
    // The same texts through ClipModel directly: the executor adds nothing to the model's output.
    const auto model = models::ClipModel::load(kTiny / kind, {});
    std::vector<std::string_view> views(g.texts.begin(), g.texts.end());
    const at::Tensor direct = model->encode_texts(views);
    for (std::size_t t = 0; t < g.texts.size(); ++t) {
      CHECK(at::allclose(out[t].embedding, direct[static_cast<std::int64_t>(t)], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("a ClipEncoder with normalize: true gives unit embeddings in the model's direction", "[clip_encoder]") {
  const Goldens g = read_goldens("clip");
  Flow flow = clip_flow("clip", {{"normalize", true}});
  DocumentArray docs;
  docs.push_back(Document(g.texts[0]));
  Document image;
  image.blob = file_bytes(g.images[0]);
  docs.push_back(std::move(image));
  const DocumentArray out = flow.post("/encode", std::move(docs));
  for (const auto& d : out) CHECK(std::abs(d.embedding.norm().item<double>() - 1.0) < 1e-5);
  CHECK(cosine(out[0].embedding, g.text_embeds[0]) >= 0.9999);
  CHECK(cosine(out[1].embedding, g.image_embeds[0]) >= 0.9999);
}

TEST_CASE("/rank orders a query's candidates and scores them as transformers does", "[clip_encoder][rank]") {
  for (const std::string kind : {"clip", "siglip"}) {
    INFO(kind);
    const Goldens g = read_goldens(kind);
    Flow flow = clip_flow(kind);
    DocumentArray queries;
    // A text query over image candidates (blobs), and an image query over text candidates.
    Document text_query(g.texts[1]);
    for (std::size_t i = 0; i < g.images.size(); ++i) {
      Document m(Document::WithId{std::to_string(i)});
      m.blob = file_bytes(g.images[i]);
      text_query.matches.push_back(std::move(m));
    }
    queries.push_back(std::move(text_query));
    Document image_query;
    image_query.blob = file_bytes(g.images[3]);
    for (std::size_t t = 0; t < g.texts.size(); ++t) {
      Document m(Document::WithId{std::to_string(t)});
      m.text = g.texts[t];
      image_query.matches.push_back(std::move(m));
    }
    queries.push_back(std::move(image_query));
    const DocumentArray out = flow.post("/rank", std::move(queries));
    REQUIRE(out.size() == 2);
    const std::array<at::Tensor, 2> expected = {g.text_to_images[1], g.image_to_texts[3]};
    for (std::size_t q = 0; q < 2; ++q) {
      const auto& matches = out[q].matches;
      REQUIRE(matches.size() == static_cast<std::size_t>(expected[q].size(0)));
      // Sorted best first, each candidate's probability transformers' within 1e-4.
      const at::Tensor order = std::get<1>(expected[q].sort(0, /*descending=*/true));
      for (std::size_t r = 0; r < matches.size(); ++r) {
        const auto index = std::stoll(matches[r].id);
        INFO("query " << q << " rank " << r << " candidate " << index);
        CHECK(std::abs(matches[r].scores.at("clip_score") - expected[q][index].item<float>()) < 1e-4);
        CHECK(matches[r].scores.contains("clip_score_cosine"));
        CHECK(matches[r].embedding.defined());
        if (r > 0) CHECK(matches[r].scores.at("clip_score") <= matches[r - 1].scores.at("clip_score"));
        // Ties aside, the order is transformers' order.
        if (std::abs(expected[q][order[static_cast<std::int64_t>(r)]].item<float>() -
                     expected[q][index].item<float>()) > 1e-4) {
          CHECK(index == order[static_cast<std::int64_t>(r)].item<std::int64_t>());
        }
      }
      CHECK(out[q].embedding.defined());
    }
    // CLIP's probabilities are a softmax over the candidates: they sum to one.
    if (kind == "clip") {
      double sum = 0;
      for (const auto& m : out[0].matches) sum += m.scores.at("clip_score");
      CHECK(std::abs(sum - 1.0) < 1e-5);
    }
  }
}

TEST_CASE("a query without candidates is refused by /rank, naming it", "[clip_encoder][rank]") {
  Flow flow = clip_flow("clip");
  DocumentArray docs;
  docs.push_back(Document(Document::WithId{"lonely"}));
  docs[0].text = "a cat";
  const auto responses = post_each(flow, "/rank", std::move(docs));
  REQUIRE(responses.size() == 1);
  CHECK(responses[0].request_error);
  CHECK_THAT(responses[0].error, testing::contains("document 'lonely': /rank needs the candidates in its matches"));
}

TEST_CASE("a bad image or an empty document fails its own request, naming the document", "[clip_encoder]") {
  const Goldens g = read_goldens("clip");
  Flow flow = clip_flow("clip");
  DocumentArray docs;
  Document good;
  good.blob = file_bytes(g.images[0]);
  docs.push_back(good);
  Document garbage(Document::WithId{"garbage"});
  garbage.blob = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
  docs.push_back(std::move(garbage));
  Document truncated(Document::WithId{"truncated"});
  truncated.blob = file_bytes(g.images[4]);  // the JPEG, cut in half
  truncated.blob.resize(truncated.blob.size() / 2);
  docs.push_back(std::move(truncated));
  docs.push_back(Document(Document::WithId{"empty"}));
  docs.push_back(Document("a text after them"));
  const auto responses = post_each(flow, "/encode", std::move(docs));
  REQUIRE(responses.size() == 5);
  CHECK(responses[0].ok());
  CHECK(responses[4].ok());
  CHECK(responses[4].docs[0].embedding.defined());
  for (std::size_t i : {1, 2}) {
    INFO(responses[i].error);
    CHECK_FALSE(responses[i].ok());
    CHECK(responses[i].request_error);
  }
  CHECK_THAT(responses[1].error, testing::contains("document 'garbage'"));
  CHECK_THAT(responses[2].error, testing::contains("document 'truncated'"));
  CHECK_THAT(responses[3].error, testing::contains("document 'empty': neither a text nor an image"));
  // In one request, the error names every bad document.
  DocumentArray one_request;
  for (const std::size_t i : {1, 2}) one_request.push_back(responses[i].docs[0]);
  try {
    flow.post("/encode", std::move(one_request));
    FAIL("the request passed");
  } catch (const ExecutorError& e) {
    CHECK_THAT(std::string(e.what()), testing::contains("document 'garbage'"));
    CHECK_THAT(std::string(e.what()), testing::contains("document 'truncated'"));
  }
}

TEST_CASE("pixels given as a document's tensor embed as the image's file does; other tensors are refused",
          "[clip_encoder][pixels]") {
  const Goldens g = read_goldens("clip");
  Flow flow = clip_flow("clip", {{"max_image_pixels", 40 * 40}});
  // Each PNG (RGB, gray, RGBA) as its file's bytes, then as the decoder's RGB pixels in a tensor (as CLIP-as-
  // service's clients send a PIL image's numpy array): the same embedding, bit for bit.
  DocumentArray docs;
  std::vector<at::Tensor> rgb;
  for (const auto& file : g.images) {
    if (file.extension() != ".png") continue;
    Document blob;
    blob.blob = file_bytes(file);
    docs.push_back(std::move(blob));
    const images::Image image = images::decode_image(file_bytes(file));
    rgb.push_back(at::tensor(at::ArrayRef<std::uint8_t>(image.rgb))
                      .view({static_cast<std::int64_t>(image.height), static_cast<std::int64_t>(image.width), 3}));
  }
  REQUIRE(rgb.size() >= 3);
  const std::size_t files = docs.size();
  std::vector<std::size_t> of_file;  // the file each tensor document shows
  const auto add = [&](std::size_t k, at::Tensor t) {
    Document d;
    d.tensor = std::move(t);
    docs.push_back(std::move(d));
    of_file.push_back(k);
  };
  for (std::size_t k = 0; k < rgb.size(); ++k) {
    add(k, rgb[k]);
    add(k, rgb[k].to(at::kFloat));                                            // whole numbers in a float tensor
    add(k, at::cat({rgb[k], at::full_like(rgb[k].narrow(2, 0, 1), 77)}, 2));  // RGBA: alpha dropped
    if (at::equal(rgb[k].select(2, 0), rgb[k].select(2, 2))) {                // a gray image
      add(k, rgb[k].select(2, 0).clone());                                    // [H, W]
      add(k, rgb[k].narrow(2, 0, 1).to(at::kLong));                           // [H, W, 1], int64
    }
  }
  CHECK(of_file.size() > 3 * rgb.size());
  const DocumentArray out = flow.post("/encode", std::move(docs));
  for (std::size_t i = 0; i < of_file.size(); ++i) {
    INFO("tensor document " << i << " of file " << of_file[i] << ": " << out[files + i].tensor.sizes());
    REQUIRE(out[files + i].embedding.defined());
    CHECK(at::equal(out[files + i].embedding, out[of_file[i]].embedding));
  }
  CHECK(flow.stats().replicas.at(0).metrics.at("given_pixel_images") == static_cast<double>(of_file.size()));
  // What is not pixels fails its own request, naming the document and what was expected.
  const auto refused = [&](at::Tensor t, const std::string& why) {
    Document d(Document::WithId{"bad"});
    d.tensor = std::move(t);
    DocumentArray one;
    one.push_back(std::move(d));
    const auto responses = post_each(flow, "/encode", std::move(one));
    REQUIRE(responses.size() == 1);
    INFO(responses[0].error);
    CHECK(responses[0].request_error);
    CHECK_THAT(responses[0].error, testing::contains("document 'bad': its tensor"));
    CHECK_THAT(responses[0].error, testing::contains(why));
  };
  refused(rgb[0].to(at::kFloat) / 255, "whole numbers 0..255");
  refused(rgb[0].to(at::kInt) + 200, "whole numbers 0..255");
  refused(rgb[0].narrow(2, 0, 2), "is not an image: pixels are [H, W, 3]");
  refused(at::zeros({0, 4, 3}, at::kByte), "is not an image");
  refused(at::zeros({4, 4, 3, 1}, at::kByte), "is not an image");
  refused(at::zeros({41, 40, 3}, at::kByte), "1640 pixels, more than the limit of 1600");
}

TEST_CASE("exif_orientation: true embeds each image upright as Pillow's exif_transpose turns it; false as stored",
          "[clip_encoder][pixels]") {
  const fs::path dir = kSource / "tests/data/images/orientation";
  const auto manifest = boost::json::parse(testing::read_text(dir / "manifest.json")).as_array();
  for (const bool upright : {true, false}) {
    INFO("exif_orientation: " << upright);
    Flow flow = clip_flow("clip", {{"exif_orientation", upright}});
    DocumentArray docs;
    for (const auto& entry : manifest) {
      const auto& e = entry.as_object();
      const Bytes bytes = file_bytes(dir / std::string(e.at("file").as_string()));
      Document file;
      file.blob = bytes;
      docs.push_back(std::move(file));
      // The pixels it should have: Pillow's upright ones (the golden), or the stored ones decoded.
      Document pixels;
      if (upright) {
        const Bytes golden = file_bytes(dir / std::string(e.at("golden").as_string()));
        pixels.tensor =
            at::tensor(at::ArrayRef<std::uint8_t>(golden))
                .view({e.at("height").to_number<std::int64_t>(), e.at("width").to_number<std::int64_t>(), 3});
      } else {
        const images::Image image = images::decode_image(bytes);
        pixels.tensor = at::tensor(at::ArrayRef<std::uint8_t>(image.rgb))
                            .view({static_cast<std::int64_t>(image.height), static_cast<std::int64_t>(image.width), 3});
      }
      docs.push_back(std::move(pixels));
    }
    const DocumentArray out = flow.post("/encode", std::move(docs));
    for (std::size_t i = 0; i < out.size(); i += 2) {
      INFO(manifest[i / 2].as_object().at("file").as_string());
      CHECK(at::equal(out[i].embedding, out[i + 1].embedding));
    }
  }
}

TEST_CASE("a served flow reads no local path outside allowed_uri_roots, flowline run reads the input's paths",
          "[clip_encoder][uri]") {
  const Goldens g = read_goldens("clip");
  const auto elsewhere = testing::scratch_dir("clip allowed roots");
  fs::create_directories(elsewhere / "allowed");
  fs::copy_file(g.images[0], elsewhere / "allowed/a.png", fs::copy_options::overwrite_existing);
  const auto make_docs = [&] {
    DocumentArray docs;
    Document inside(Document::WithId{"inside"});
    inside.uri = (elsewhere / "allowed/a.png").string();
    docs.push_back(std::move(inside));
    Document outside(Document::WithId{"outside"});
    outside.uri = g.images[0].string();
    docs.push_back(std::move(outside));
    Document escaping(Document::WithId{"escaping"});
    escaping.uri =
        (elsewhere / "allowed/../allowed/../../" / fs::relative(g.images[0], elsewhere.parent_path())).string();
    docs.push_back(std::move(escaping));
    return docs;
  };
  {
    Flow flow = clip_flow("clip", {{"allowed_uri_roots", boost::json::array{(elsewhere / "allowed").string()}}});
    const auto responses = post_each(flow, "/encode", make_docs());
    REQUIRE(responses.size() == 3);
    CHECK(responses[0].ok());
    CHECK_FALSE(responses[1].ok());
    CHECK_THAT(responses[1].error, testing::contains("outside"));
    CHECK_FALSE(responses[2].ok());
    CHECK_THAT(responses[2].error, testing::contains("escaping"));
  }
  {
    // No roots: a served flow reads no local path at all.
    Flow flow = clip_flow("clip");
    const auto responses = post_each(flow, "/encode", make_docs());
    for (const auto& r : responses) CHECK_FALSE(r.ok());
  }
  {
    // `flowline run` (FlowOptions::local_input_files): the input's paths are the user's own.
    FlowOptions options;
    options.local_input_files = true;
    Flow flow = clip_flow("clip", {}, options);
    const auto responses = post_each(flow, "/encode", make_docs());
    for (const auto& r : responses) CHECK(r.ok());
  }
}

TEST_CASE("Jina's /post with image documents reaches the ClipEncoder through the gateway", "[clip_encoder][gateway]") {
  // The gateway reads endpoints from the global registry; test_clip_encoder_http.cpp may have registered it already.
  if (!Registry::global().find_registered("ClipEncoder")) clip_encoder::register_clip_encoder(Registry::global());
  const Goldens g = read_goldens("clip");
  Flow flow;
  flow.add({.name = "clip",
            .uses = "ClipEncoder",
            .with = {{"model", (kTiny / "clip").string()}, {"warmup", false}},
            .device = "cpu"});
  Served served(std::move(flow));
  Client client(served.port());
  const Bytes png = file_bytes(g.images[1]);
  std::string b64;
  append_json_base64(b64, png.data(), png.size());  // a quoted base64 string
  const std::string body = R"({"execEndpoint": "/encode", "data": [{"id": "by-bytes", "bytes_": )" + b64 +
                           R"(}, {"id": "by-data-uri", "url": "data:image/png;base64,)" +
                           b64.substr(1, b64.size() - 2) + R"("}, {"id": "by-text", "text": ")" + g.texts[0] +
                           R"("}]})";
  const auto reply = client.post("/post", body);
  INFO(reply.body);
  REQUIRE(reply.status == 200);
  const auto data = reply.json().at("data").as_array();
  REQUIRE(data.size() == 3);
  const auto embedding = [&](std::size_t i) {
    std::vector<float> v;
    for (const auto& x : data[i].at("embedding").as_array()) v.push_back(static_cast<float>(x.to_number<double>()));
    return at::tensor(v);
  };
  CHECK(cosine(embedding(0), g.image_embeds[1]) >= 0.9999);
  CHECK(cosine(embedding(1), g.image_embeds[1]) >= 0.9999);
  CHECK(cosine(embedding(2), g.text_embeds[0]) >= 0.9999);
  // A local path from a client: refused (422), the server's file never read.
  const auto refused = client.post(
      "/post", R"({"execEndpoint": "/encode", "data": [{"id": "snoop", "url": ")" + g.images[0].string() + R"("}]})");
  CHECK(refused.status == 422);
  CHECK_THAT(refused.body, testing::contains("snoop"));

  // Infinity's /v1/embeddings with "modality": "image": data URIs in, OpenAI's answer out.
  const std::string data_uri = "\"data:image/png;base64," + b64.substr(1);
  const auto infinity =
      client.post("/v1/embeddings", R"({"model": "clip", "modality": "image", "input": [)" + data_uri + R"(]})");
  INFO(infinity.body);
  REQUIRE(infinity.status == 200);
  const auto answer = infinity.json();
  const auto& rows = answer.at("data").as_array();
  REQUIRE(rows.size() == 1);
  std::vector<float> v;
  for (const auto& x : rows[0].at("embedding").as_array()) v.push_back(static_cast<float>(x.to_number<double>()));
  CHECK(cosine(at::tensor(v), g.image_embeds[1]) >= 0.9999);
  // Cohere v2's /v2/embed: images as data URIs, or texts; embeddings by type, float only.
  const auto cohere = client.post("/v2/embed", R"({"model": "clip", "input_type": "image", "embedding_types": ["float"],
                                                   "images": [)" +
                                                   data_uri + R"(]})");
  INFO(cohere.body);
  REQUIRE(cohere.status == 200);
  const auto cohere_answer = cohere.json().as_object();
  CHECK(cohere_answer.at("response_type").as_string() == "embeddings_by_type");
  CHECK(cohere_answer.at("meta").at("billed_units").at("images").as_int64() == 1);
  // Cohere's per-image metadata: g.images[1] is gray-24x64.png, 8-bit grey.
  CHECK(boost::json::serialize(cohere_answer.at("images")) ==
        R"([{"width":24,"height":64,"format":"png","bit_depth":8}])");
  const auto& cohere_rows = cohere_answer.at("embeddings").at("float").as_array();
  REQUIRE(cohere_rows.size() == 1);
  std::vector<float> c;
  for (const auto& x : cohere_rows[0].as_array()) c.push_back(static_cast<float>(x.to_number<double>()));
  CHECK(cosine(at::tensor(c), g.image_embeds[1]) >= 0.9999);
  const auto cohere_texts =
      client.post("/v2/embed", R"({"texts": [")" + g.texts[2] + R"("], "input_type": "search_query"})").json();
  CHECK(cohere_texts.at("texts").as_array()[0].as_string() == g.texts[2]);
  std::vector<float> t;
  for (const auto& x : cohere_texts.at("embeddings").at("float").as_array()[0].as_array()) {
    t.push_back(static_cast<float>(x.to_number<double>()));
  }
  CHECK(cosine(at::tensor(t), g.text_embeds[2]) >= 0.9999);
  CHECK(client.post("/v2/embed", R"({"texts": ["a"], "images": []})").status == 400);
  const auto cohere_url = client.post("/v2/embed", R"({"images": ["https://example.com/a.jpg"]})");
  CHECK(cohere_url.status == 400);
  CHECK_THAT(cohere_url.body, testing::contains("'images'[0]: expected a data URI"));
  CHECK(client.post("/v2/embed", R"({"texts": ["a"], "embedding_types": ["int8"]})").status == 400);
  const auto bad_modality = client.post("/v1/embeddings", R"({"model": "clip", "modality": "audio", "input": ["x"]})");
  CHECK(bad_modality.status == 400);
  CHECK_THAT(bad_modality.body, testing::contains("'modality'"));
}

TEST_CASE("the shipped flows/clip.yml, images-index.yml and images-search.yml validate", "[clip_encoder][config]") {
  for (const char* name : {"clip.yml", "images-index.yml", "images-search.yml"}) {
    INFO(name);
    const auto config = load_flow_config(kSource / "flows" / name, clip_registry());
    CHECK(config.executors[0].name == "clip");
    CHECK(config.executors[0].uses == "ClipEncoder");
  }
}

TEST_CASE("a text-embedding checkpoint given to the ClipEncoder is refused at validate time",
          "[clip_encoder][config]") {
  const auto dir = testing::scratch_dir("clip validate");
  testing::write_text(dir / "flow.yml", "executors:\n  - name: clip\n    uses: ClipEncoder\n    with:\n      model: " +
                                            (kTiny / "mpnet").string() + "\n");
  try {
    load_flow_config(dir / "flow.yml", clip_registry());
    FAIL("the flow validated");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), testing::contains("flow.yml:5:7: executor 'clip': parameter 'model'"));
    CHECK_THAT(std::string(e.what()), testing::contains("is not CLIP or SigLIP"));
  }
}

TEST_CASE("flowline run indexes a folder of images with flows/images-index.yml and images-search.yml finds them",
          "[clip_encoder][launcher]") {
  const auto dir = testing::scratch_dir("clip images flows");
  const fs::path images = kData / "images";
  const auto run = [&](const std::string& args) {
    const auto r =
        testing::run_process(fmt::format("cd '{}' && env -u FLOWLINE_CLIP_MODEL FLOWLINE_WORKSPACE='{}' '{}' {}",
                                         FLOWLINE_SOURCE_DIR, dir.string(), FLOWLINE_LAUNCHER, args));
    INFO(r.out + r.err);
    REQUIRE(r.exit_code == 0);
    return r.out + r.err;
  };
  const std::string indexed = run(fmt::format(
      "run flows/images-index.yml --input '{}' --input-format images --set clip.device=cpu --set index.device=cpu",
      images.string()));
  CHECK_THAT(indexed, testing::contains("5 documents in, 5 out"));
  // Queries: a text, and one of the indexed images as a local path (flowline run's input is the user's own).
  const fs::path square = images / "square-40x40.png";
  testing::write_text(dir / "queries.jsonl", "{\"text\": \"a red square\"}\n{\"uri\": \"" + square.string() + "\"}\n");
  run(
      fmt::format("run flows/images-search.yml --input '{}' --endpoint /search --output '{}' --set clip.device=cpu "
                  "--set index.device=cpu",
                  (dir / "queries.jsonl").string(), (dir / "found.jsonl").string()));
  std::ifstream in(dir / "found.jsonl");
  std::vector<boost::json::object> found;
  for (std::string line; std::getline(in, line);) found.push_back(boost::json::parse(line).as_object());
  REQUIRE(found.size() == 2);
  for (const auto& query : found) {
    const auto& matches = query.at("matches").as_array();
    CHECK(matches.size() == 5);  // every indexed image, best first, each named by its file
    for (const auto& m : matches) CHECK(fs::exists(std::string(m.at("uri").as_string())));
  }
  // The image query finds itself first.
  const auto& best = found[1].at("matches").as_array()[0].as_object();
  CHECK(std::string(best.at("uri").as_string()) == square.string());
  CHECK(best.at("scores").at("cosine").to_number<double>() > 0.9999);
}

TEST_CASE("on a GPU the ClipEncoder's fp16 and bf16 embeddings and /rank agree with transformers' fp32",
          "[clip_encoder][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  for (const std::string kind : {"clip", "siglip"}) {
    const Goldens g = read_goldens(kind);
    for (const char* dtype : {"fp16", "bf16"}) {
      INFO(kind << " " << dtype);
      Flow flow(FlowOptions{}, clip_registry());
      flow.add({.name = "clip",
                .uses = "ClipEncoder",
                .with = {{"model", (kTiny / kind).string()}, {"dtype", dtype}, {"keep_on_device", true}},
                .device = "cuda"});
      const DocumentArray out = flow.post("/encode", golden_documents(g));
      for (std::size_t i = 0; i < out.size(); ++i) {
        CHECK(out[i].embedding.device().is_cuda());  // keep_on_device: left for the next executor
        CHECK(cosine(out[i].embedding.to(at::kCPU), golden_embedding(g, i)) >= 0.999);
      }
      DocumentArray query;
      query.push_back(Document(g.texts[1]));
      for (const auto& file : g.images) {
        Document m(Document::WithId{file.filename().string()});
        m.blob = file_bytes(file);
        query[0].matches.push_back(std::move(m));
      }
      const DocumentArray ranked = flow.post("/rank", std::move(query));
      for (const auto& m : ranked[0].matches) {
        const auto at = std::find_if(g.images.begin(), g.images.end(),
                                     [&](const fs::path& f) { return f.filename().string() == m.id; });
        REQUIRE(at != g.images.end());
        CHECK(std::abs(m.scores.at("clip_score") - g.text_to_images[1][at - g.images.begin()].item<float>()) < 5e-3);
      }
    }
  }
}

TEST_CASE("on a busy GPU a ClipEncoder's answer waits for its own passes: each document gets its embedding",
          "[clip_encoder][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  // Before the fix, the handler normalised and copied the embeddings back on the device's default stream, which
  // does not wait for a replica's stream: when the GPU was busy the copy read a request's rows before its passes
  // had written them (whole requests with another request's embeddings, or NaN, at four to eight replicas). Here
  // the replica's stream is kept busy on purpose, so that copy would come too early. Two things hid that: the
  // handler's uploads waited for the stream (now queued from pinned memory, to_device_queued), and a request's
  // first pinned and device allocations may wait for the device (CUDA's implicit synchronization). So the
  // documents are sent once on an idle GPU (the allocators' caches filled), in reverse order so that a read of a
  // reused buffer's old rows shows (session 37: in order, the early read found the first answer's equal rows
  // there), then behind the busy streams.
  const Goldens g = read_goldens("clip");
  Flow flow(FlowOptions{}, clip_registry());
  flow.add({.name = "clip",
            .uses = "ClipEncoder",
            .with = {{"model", (kTiny / "clip").string()}, {"dtype", "fp32"}},
            .device = "cuda"});
  flow.start();
  const std::size_t n = g.texts.size() + g.images.size();
  const auto check = [&](const DocumentArray& out, bool reversed) {
    REQUIRE(out.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
      INFO("document " << i << (reversed ? " of the reversed request" : ""));
      CHECK(cosine(out[i].embedding, golden_embedding(g, reversed ? n - 1 - i : i)) >= 0.999);
    }
  };
  DocumentArray first = golden_documents(g);
  std::reverse(first.docs().begin(), first.docs().end());
  check(flow.post("/encode", std::move(first)), true);
  // Every stream of LibTorch's pool (the replica took one of them at start) gets a queue of matrix products. Their
  // memory (products, cuBLAS's workspace per stream) is taken first and the device left idle, as an allocation
  // may wait for the queues.
  const c10::Device device(c10::kCUDA, 0);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().dtype(at::kHalf).device(device));
  c10::impl::getDeviceGuardImpl(c10::kCUDA)->getDefaultStream(device).synchronize();  // `a` is read on other streams
  std::vector<c10::Stream> streams;
  std::vector<at::Tensor> products;
  for (int s = 0; s < 32; ++s) {
    streams.push_back(c10::impl::getDeviceGuardImpl(c10::kCUDA)->getStreamFromGlobalPool(device, false));
    c10::StreamGuard on(streams.back());
    products.push_back(at::mm(a, a));
  }
  for (const c10::Stream& s : streams) s.synchronize();
  for (std::size_t s = 0; s < streams.size(); ++s) {
    c10::StreamGuard on(streams[s]);
    for (int k = 0; k < 48; ++k) at::mm_out(products[s], a, a);
  }
  const auto busy = [&] {
    return std::count_if(streams.begin(), streams.end(), [](const c10::Stream& s) { return !s.query(); });
  };
  REQUIRE(busy() == 32);  // else this case shows nothing
  check(flow.post("/encode", golden_documents(g)), false);
  for (const c10::Stream& s : streams) s.synchronize();
  flow.close();
}
