// Internal: the BERT encoder stack, which the RoBERTa family (roberta.cpp) runs with its own position
// scheme, and the post-LayerNorm layers BERT, MPNet (mpnet.cpp) and DistilBERT (distilbert.cpp) share. Not
// installed.
#pragma once

#include "../transformer.hpp"

namespace flowline::models::detail {

// Where a checkpoint keeps the tensors of BERT-style post-LayerNorm layers: layer N's are named
// "<stem>N.<name>.weight" (and ".bias"), the names below.
struct PostLayerNormNames {
  std::string_view stem;                 // "encoder.layer."
  std::string_view q, k, v, out, norm1;  // attention's projections, its output dense and LayerNorm
  std::string_view up, down, norm2;      // the feed-forward denses and LayerNorm
};

// BERT-style post-LayerNorm encoder layers (BERT, the RoBERTa family, MPNet, DistilBERT): attention
// with q, k and v fused into one projection, its output dense added to the residual and normalized, then
// the feed-forward up-projection, activation and down-projection added to the residual and normalized
// (linear_add_layer_norm: one fused kernel on a GPU in fp16/bf16). One loader and one forward for all.
class PostLayerNormLayers {
 public:
  struct Sizes {
    std::int64_t layers = 0, hidden = 0, intermediate = 0, heads = 0;
    double eps = 1e-12;
    std::string activation = "gelu";
  };
  // Loads the layers' tensors through `w` (each shape checked against `sizes`).
  void load(WeightLoader& w, const PostLayerNormNames& names, const Sizes& sizes);
  // The layers over x [T, hidden] (the embeddings, normalized), attention as `attention` says. Enqueues
  // work only.
  at::Tensor forward(at::Tensor x, const DeviceBatch& batch, const AttentionOptions& attention) const;
  // Bytes of the tensors kept (the fused q/k/v copies, not the loaded pieces).
  std::size_t bytes() const noexcept;

 private:
  struct Layer {
    at::Tensor qkv_w, qkv_b;    // fused [3H, H], [3H]
    at::Tensor out_w, out_b;    // attention output dense
    at::Tensor ln1_w, ln1_b;    // attention output LayerNorm
    at::Tensor up_w, up_b;      // intermediate dense
    at::Tensor down_w, down_b;  // output dense
    at::Tensor ln2_w, ln2_b;    // output LayerNorm
  };
  Sizes sizes_;
  std::vector<Layer> layers_;
};

struct BertFamilyOptions {
  std::string_view description;
  // Added to every token's position within its sequence: RoBERTa counts from padding_idx + 1.
  std::int64_t position_offset = 0;
};

std::unique_ptr<Transformer> make_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options);
// The table's check: config.json's values in range and in agreement with the weights' header.
void check_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options);

}  // namespace flowline::models::detail
