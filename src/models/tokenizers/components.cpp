// Building a pipeline's components from tokenizer.json: the normalizer (normalizers.cpp), the pre-tokenizer
// (pre_tokenizers.cpp), the model (the table below; one file per model kind) and the post-processor
// (post_processors.cpp).
#include "builders.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <functional>
#include <map>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

using ModelBuilder = std::function<std::unique_ptr<Model>(const json::object&, const Origin&)>;
const std::map<std::string, ModelBuilder, std::less<>>& model_table() {
  static const std::map<std::string, ModelBuilder, std::less<>> table = {
      {"BPE", make_bpe},
      {"WordPiece", make_wordpiece},
      {"Unigram", make_unigram},
  };
  return table;
}

}  // namespace

void build_components(const json::object& root, const std::string& file, Pipeline& p) {
  if (const json::value* v = field(root, "normalizer")) add_normalizer(*v, {file, "normalizer"}, p.normalizers);
  if (const json::value* v = field(root, "pre_tokenizer"))
    add_pre_tokenizer(*v, {file, "pre_tokenizer"}, p.pre_tokenizers);

  const json::value* model = field(root, "model");
  if (model == nullptr) refuse({file, "model"}, "no model");
  const Origin model_origin{file, "model"};
  const json::object& mo = object_of(*model, model_origin);
  const std::string type = field(mo, "type") == nullptr ? std::string("(none)") : type_of(mo, model_origin);
  const auto it = model_table().find(type);
  if (it == model_table().end())
    refuse(Origin{file, "model.type"},
           fmt::format("model '{}' is not supported (supported: {})", type, names_of(model_table())));
  p.model = it->second(mo, model_origin);

  // A decoder flowline cannot run leaves encoding alone: decode_tokens() throws why.
  if (const json::value* v = field(root, "decoder")) {
    try {
      const Origin origin{file, "decoder"};
      p.decoder = make_decoder(object_of(*v, origin), origin);
    } catch (const Error& e) {
      p.decoder_refusal = e.what();
    }
  }

  if (const json::value* v = field(root, "post_processor")) {
    const Origin origin{file, "post_processor"};
    p.post = make_post_processor(object_of(*v, origin), origin);
  } else {
    p.post = plain_post_processor();
  }
}

}  // namespace flowline::models::tokenizers
