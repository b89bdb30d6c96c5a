// ClipModel (issue 54 §2, §4's CPU parity) on the tiny CLIP and SigLIP checkpoints of scripts/tiny_clip.py
// (make_tiny_models.py --only clip): image embeddings from the goldens' pixel_values and text embeddings end to end
// from texts against transformers' get_image_features / get_text_features after its processor, the logit scale and
// bias, sentence-transformers' layout, the folders refused naming what is wrong, and on a GPU the fp16/bf16 bounds.
#include "test_support.hpp"
#include "tiny_goldens.hpp"

#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/images.hpp"
#include "flowline/models/clip_model.hpp"
#include "flowline/models/image_processor.hpp"
#include "flowline/models/safetensors.hpp"
#include "flowline/models/tokenizer.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <cmath>
#include <map>

using namespace flowline;
using namespace flowline::models;

namespace {

const std::filesystem::path& kTiny = testing::kTinyModels;
using testing::worst_cosine;

std::vector<std::string> golden_texts(const std::string& name) {
  std::vector<std::string> texts;
  for (const auto& line : testing::read_json_lines(kTiny / (name + ".texts.jsonl"))) {
    texts.emplace_back(line.at("text").as_string());
  }
  return texts;
}

at::Tensor encode_all(const ClipModel& model, const std::vector<std::string>& texts) {
  std::vector<std::string_view> views(texts.begin(), texts.end());
  return model.encode_texts(views).cpu();
}

}  // namespace

TEST_CASE("a tiny CLIP and SigLIP embed images and texts as transformers does in fp32 on the CPU", "[models][clip]") {
  const auto name = GENERATE(as<std::string>{}, "clip", "siglip");
  INFO(name);
  const SafetensorsFile goldens(kTiny / (name + ".goldens.safetensors"));
  const auto model = ClipModel::load(kTiny / name, {});
  CHECK(model->kind() == name);
  CHECK(model->image_size() == 32);
  const at::Tensor images = goldens.get("image_embeds");
  CHECK(model->embedding_dim() == images.size(1));

  const at::Tensor got_images = model->encode_pixels(goldens.get("pixel_values")).cpu();
  REQUIRE(got_images.sizes() == images.sizes());
  CHECK(got_images.scalar_type() == at::kFloat);
  CHECK(worst_cosine(got_images, images) >= 0.9999);
  CHECK((got_images - images).abs().max().item<double>() < 1e-3);
  // One image at a time gives the same rows as the batch.
  CHECK(worst_cosine(model->encode_pixels(goldens.get("pixel_values").slice(0, 2, 3)).cpu(), images.slice(0, 2, 3)) >=
        0.9999);

  // The tokenizer gives the processor's ids (before its padding).
  const auto texts = golden_texts(name);
  const at::Tensor ids = goldens.get("input_ids").to(at::kLong);
  REQUIRE(ids.size(0) == static_cast<std::int64_t>(texts.size()));
  for (std::size_t i = 0; i < texts.size(); ++i) {
    INFO(texts[i]);
    const auto mine = model->tokenizer().encode(texts[i], model->max_text_length());
    const at::Tensor row = ids[static_cast<std::int64_t>(i)].slice(0, 0, static_cast<std::int64_t>(mine.size()));
    CHECK(std::vector<std::int64_t>(row.data_ptr<std::int64_t>(), row.data_ptr<std::int64_t>() + row.numel()) ==
          std::vector<std::int64_t>(mine.begin(), mine.end()));
  }
  const at::Tensor text = goldens.get("text_embeds");
  const at::Tensor got_texts = encode_all(*model, texts);
  REQUIRE(got_texts.sizes() == text.sizes());
  CHECK(worst_cosine(got_texts, text) >= 0.9999);
  CHECK((got_texts - text).abs().max().item<double>() < 1e-3);
  if (name == "siglip") {  // the padding to 64 is what transformers' embeddings were made with, not the bare text
    CHECK(worst_cosine(got_texts, goldens.get("text_embeds_unpadded")) < 0.99);
  }

  // Relative 1e-6 (Catch2 v2 and v3 spell Approx differently).
  const auto close = [](float got, float want) { return std::abs(got - want) <= 1e-6f * std::abs(want); };
  CHECK(close(model->logit_scale(), goldens.get("logit_scale").item<float>()));
  const ImageProcessorConfig& processor = model->image_processor();
  CHECK(processor.kind == (name == "clip" ? ImageProcessorConfig::Kind::clip : ImageProcessorConfig::Kind::siglip));
  CHECK(processor.output_height() == model->image_size());
  CHECK(processor.output_width() == model->image_size());
  if (goldens.contains("logit_bias")) {
    REQUIRE(model->logit_bias().has_value());
    CHECK(close(*model->logit_bias(), goldens.get("logit_bias").item<float>()));
  } else {
    CHECK_FALSE(model->logit_bias().has_value());
  }
}

TEST_CASE(
    "a CLIP text tower pools at the first eos_token_id unless it is 2, and SigLIP masks only as its tokenizer says",
    "[models][clip]") {
  const auto dir = testing::scratch_dir("clip pooling");
  std::filesystem::copy(kTiny / "clip", dir / "clip", std::filesystem::copy_options::recursive);
  std::filesystem::copy(kTiny / "siglip", dir / "siglip", std::filesystem::copy_options::recursive);
  // CLIP with a config from after transformers' fix (eos_token_id the real <|endoftext|>): the same token.
  auto config = boost::json::parse(testing::read_text(dir / "clip/config.json")).as_object();
  const std::int64_t vocab = config["text_config"].as_object()["vocab_size"].as_int64();
  config["text_config"].as_object()["eos_token_id"] = vocab - 1;
  testing::write_text(dir / "clip/config.json", boost::json::serialize(config));
  const SafetensorsFile clip_goldens(kTiny / "clip.goldens.safetensors");
  const auto texts = golden_texts("clip");
  CHECK(worst_cosine(encode_all(*ClipModel::load(dir / "clip", {}), texts), clip_goldens.get("text_embeds")) >= 0.9999);
  // An eos_token_id the texts never hold: position 0 (<|startoftext|>), as transformers' argmax of no match gives.
  config["text_config"].as_object()["eos_token_id"] = 5;
  testing::write_text(dir / "clip/config.json", boost::json::serialize(config));
  const at::Tensor first = encode_all(*ClipModel::load(dir / "clip", {}), texts);
  CHECK(testing::row_cosines(first, first[0].unsqueeze(0).expand_as(first)).min().item<double>() > 0.99999);

  // SigLIP whose tokenizer_config.json names input_ids alone (as transformers 4 saved them): no attention mask.
  auto tokenizer_config = boost::json::parse(testing::read_text(dir / "siglip/tokenizer_config.json")).as_object();
  tokenizer_config["model_input_names"] = boost::json::array{"input_ids"};
  testing::write_text(dir / "siglip/tokenizer_config.json", boost::json::serialize(tokenizer_config));
  const SafetensorsFile siglip_goldens(kTiny / "siglip.goldens.safetensors");
  CHECK(worst_cosine(encode_all(*ClipModel::load(dir / "siglip", {}), golden_texts("siglip")),
                     siglip_goldens.get("text_embeds_no_mask")) >= 0.9999);
}

TEST_CASE("a tiny CLIP and SigLIP embed image files end to end as Pillow, transformers' processor and model do",
          "[models][clip][images]") {
  const auto name = GENERATE(as<std::string>{}, "clip", "siglip");
  INFO(name);
  const auto model = ClipModel::load(kTiny / name, {});
  std::vector<images::Image> decoded;
  for (const auto& line : testing::read_json_lines(kTiny / (name + ".images.jsonl"))) {
    const std::string file(line.at("file").as_string());
    const std::string bytes = testing::read_text(std::filesystem::path(FLOWLINE_SOURCE_DIR) / file);
    decoded.push_back(
        images::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size())));
  }
  const at::Tensor pixels = preprocess_images(decoded, model->image_processor(), model->device(), model->dtype());
  const at::Tensor want = SafetensorsFile(kTiny / (name + ".goldens.safetensors")).get("file_embeds");
  const at::Tensor got = model->encode_pixels(pixels).cpu();
  REQUIRE(got.sizes() == want.sizes());
  WARN(name << ": image files end to end, worst cosine " << worst_cosine(got, want));
  CHECK(worst_cosine(got, want) >= 0.9999);
}

TEST_CASE("a CLIP model takes pixel_values only of its image size and refuses no texts", "[models][clip]") {
  const auto model = ClipModel::load(kTiny / "clip", {});
  CHECK_THROWS_WITH(model->encode_pixels(at::zeros({2, 3, 64, 64})), testing::contains("[N >= 1, 3, 32, 32]"));
  CHECK_THROWS_AS(model->encode_pixels(at::zeros({3, 32, 32})), InputError);
  CHECK_THROWS_AS(model->encode_pixels(at::zeros({1, 3, 32, 32}, at::kLong)), InputError);
  CHECK_THROWS_AS(model->encode_texts({}), InputError);
}

TEST_CASE("sentence-transformers' CLIP layout loads the CLIPModel module's folder", "[models][clip]") {
  const auto dir = testing::scratch_dir("clip st layout");
  std::filesystem::copy(kTiny / "clip", dir / "0_CLIPModel", std::filesystem::copy_options::recursive);
  testing::write_text(
      dir / "modules.json",
      R"([{"idx": 0, "name": "0", "path": "0_CLIPModel", "type": "sentence_transformers.models.CLIPModel"}])");
  const SafetensorsFile goldens(kTiny / "clip.goldens.safetensors");
  const auto model = ClipModel::load(dir, {});
  CHECK(worst_cosine(model->encode_pixels(goldens.get("pixel_values")).cpu(), goldens.get("image_embeds")) >= 0.9999);
  testing::write_text(dir / "modules.json", R"([{"idx": 0, "name": "0", "path": "../x", "type": "a.b.CLIPModel"}])");
  CHECK_THROWS_WITH(ClipModel::load(dir, {}), testing::contains("must be inside the folder"));
}

TEST_CASE("a folder ClipModel cannot run is refused, naming the file and key or tensor", "[models][clip]") {
  const auto dir = testing::scratch_dir("clip refused");
  std::filesystem::copy(kTiny / "clip", dir, std::filesystem::copy_options::recursive);
  const auto original = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  const std::string file = (dir / "config.json").string();
  auto refused = [&](const char* section, const char* key, boost::json::value value, const std::string& message) {
    INFO(section << "." << key);
    auto config = original;
    if (*section == '\0') {
      config[key] = std::move(value);
    } else {
      config[section].as_object()[key] = std::move(value);
    }
    testing::write_text(dir / "config.json", boost::json::serialize(config));
    CHECK_THROWS_WITH(ClipModel::load(dir, {}), testing::contains(message));
  };
  refused("", "model_type", "bert", "'" + file + "': model_type: 'bert' is not a CLIP-like model");
  refused("vision_config", "hidden_size", 0, "vision_config.hidden_size: must be an integer in 1..65536, got 0");
  refused("vision_config", "hidden_size", 48, "config.json's vision_config.hidden_size");
  refused("text_config", "num_attention_heads", 5, "text_config.num_attention_heads: 5 does not divide");
  refused("vision_config", "patch_size", 5, "vision_config.patch_size: 5 does not divide image_size 32");
  refused("text_config", "num_hidden_layers", 3, "text_config.num_hidden_layers is 3, but");
  refused("text_config", "hidden_act", "swishy", "text_config.hidden_act: 'swishy' is not supported");
  refused("", "projection_dim", 16, "tensor 'visual_projection.weight' has shape [24, 32]");
  refused("vision_config", "layer_norm_eps", -1.0, "vision_config.layer_norm_eps: must be a finite number");
  // A value is shown cut to 40 characters: a megabyte string in config.json is no megabyte message.
  refused("vision_config", "hidden_size", boost::json::string(std::string(1 << 20, 'x')),
          "vision_config.hidden_size: must be an integer in 1..65536, got \"" + std::string(36, 'x') + "...");
  try {
    auto config = original;
    config["text_config"].as_object()["hidden_act"] = boost::json::array(100000, 1);
    testing::write_text(dir / "config.json", boost::json::serialize(config));
    ClipModel::load(dir, {});
    FAIL("a hidden_act of 100,000 numbers was accepted");
  } catch (const std::exception& e) {
    CHECK(std::string(e.what()).size() < 400);
    CHECK_THAT(std::string(e.what()),
               testing::contains("must be a string, got [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,..."));
  }
  testing::write_text(dir / "config.json", boost::json::serialize(original));
  REQUIRE_NOTHROW(ClipModel::load(dir, {}));

  // The text tower alone (a CLIPTextModel's tensors): no vision tower.
  std::map<std::string, at::Tensor> text_only;
  const SafetensorsFile weights(kTiny / "clip/model.safetensors");
  for (const auto& n : weights.names()) {
    if (!n.starts_with("vision_model.")) text_only[n] = weights.get(n);
  }
  save_safetensors(dir / "model.safetensors", text_only);
  CHECK_THROWS_WITH(ClipModel::load(dir, {}), testing::contains("no vision tower"));
  std::filesystem::remove(dir / "model.safetensors");
  CHECK_THROWS_WITH(ClipModel::load(dir, {}), testing::contains("model.safetensors': no such file"));
  std::filesystem::copy_file(kTiny / "clip/model.safetensors", dir / "model.safetensors");
  auto processor = boost::json::parse(testing::read_text(dir / "preprocessor_config.json")).as_object();
  processor["crop_size"] = boost::json::object{{"height", 48}, {"width", 48}};
  testing::write_text(dir / "preprocessor_config.json", boost::json::serialize(processor));
  CHECK_THROWS_WITH(ClipModel::load(dir, {}),
                    testing::contains("preprocessor_config.json': gives pixel_values of 48x48, and config.json's "
                                      "vision_config.image_size is 32"));
  std::filesystem::remove(dir / "preprocessor_config.json");
  CHECK_THROWS_WITH(ClipModel::load(dir, {}), testing::contains("preprocessor_config.json"));
  CHECK_THROWS_WITH(ClipModel::load(kTiny / "bert-all-poolings-dense", {}),
                    testing::contains("no sentence_transformers CLIPModel module"));
}

TEST_CASE("a tiny CLIP and SigLIP run in bf16 and fp16 on the CPU too", "[models][clip]") {
  for (const std::string name : {"clip", "siglip"}) {
    const SafetensorsFile goldens(kTiny / (name + ".goldens.safetensors"));
    for (const auto dtype : {c10::kBFloat16, c10::kHalf}) {
      INFO(name << " " << c10::toString(dtype));
      const auto model = ClipModel::load(kTiny / name, {c10::Device(c10::kCPU), dtype});
      const at::Tensor images = model->encode_pixels(goldens.get("pixel_values"));
      CHECK(images.scalar_type() == at::kFloat);
      CHECK(worst_cosine(images, goldens.get("image_embeds")) >= 0.99);
      CHECK(worst_cosine(encode_all(*model, golden_texts(name)), goldens.get("text_embeds")) >= 0.99);
    }
  }
}

TEST_CASE("on the GPU a tiny CLIP and SigLIP stay within the fp16 and bf16 bounds", "[models][clip][gpu]") {
  if (cuda_device_count() == 0) FLOWLINE_SKIP("no GPU visible");
  for (const std::string name : {"clip", "siglip"}) {
    const SafetensorsFile goldens(kTiny / (name + ".goldens.safetensors"));
    const auto texts = golden_texts(name);
    for (const auto& [dtype, bound] :
         {std::pair{c10::kFloat, 0.99999}, std::pair{c10::kHalf, 0.999}, std::pair{c10::kBFloat16, 0.995}}) {
      const auto model = ClipModel::load(kTiny / name, {c10::Device(c10::kCUDA, 0), dtype});
      const double images =
          worst_cosine(model->encode_pixels(goldens.get("pixel_values")).cpu(), goldens.get("image_embeds"));
      const double text = worst_cosine(encode_all(*model, texts), goldens.get("text_embeds"));
      WARN(name << " on the GPU in " << c10::toString(dtype) << ": worst cosine images " << images << ", texts "
                << text);
      CHECK(images >= bound);
      CHECK(text >= bound);
    }
  }
}
