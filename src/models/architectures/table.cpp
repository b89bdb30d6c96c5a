// The architecture table: which file runs which config.json model_type, and the layout of each head kind
// its checkpoints carry. Adding an architecture is a file in this folder with a make_<name> function, and
// one line here; a head of a new kind is one more column (docs/models.md).
#include "../transformer.hpp"

namespace flowline::models::detail {

// Each make_<name> with its check_<name>: config.json's values in range and agreeing with the weights.
std::unique_ptr<Transformer> make_bert(const ArchitectureContext& context);  // bert.cpp
void check_bert(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_roberta(const ArchitectureContext& context);  // roberta.cpp
void check_roberta(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_distilbert(const ArchitectureContext& context);  // distilbert.cpp
void check_distilbert(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_mpnet(const ArchitectureContext& context);  // mpnet.cpp
void check_mpnet(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_modernbert(const ArchitectureContext& context);  // modernbert.cpp
void check_modernbert(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_qwen3(const ArchitectureContext& context);  // qwen3.cpp
void check_qwen3(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_deberta_v2(const ArchitectureContext& context);  // deberta_v2.cpp
void check_deberta_v2(const ArchitectureContext& context);

std::span<const Architecture> architectures() {
  // model_type values | name | description | make | check | heads: sequence classification, token classification
  static const Architecture table[] = {
      {{"bert"}, "BERT", "BERT", &make_bert, &check_bert, {&make_pooler_classifier, &make_token_classifier}},
      {{"roberta", "xlm-roberta", "camembert"},
       "RoBERTa/XLM-R/CamemBERT",
       "RoBERTa / XLM-RoBERTa / CamemBERT",
       &make_roberta,
       &check_roberta,
       {&make_dense_out_proj_classifier, &make_token_classifier}},
      {{"distilbert"},
       "DistilBERT",
       "DistilBERT (post-LayerNorm, no token types)",
       &make_distilbert,
       &check_distilbert,
       {nullptr, &make_token_classifier}},
      {{"mpnet"},
       "MPNet",
       "MPNet (relative position bias)",
       &make_mpnet,
       &check_mpnet,
       {nullptr, &make_token_classifier}},
      {{"modernbert"},
       "ModernBERT",
       "ModernBERT (rotary, GeGLU, local/global attention)",
       &make_modernbert,
       &check_modernbert,
       {nullptr, &make_modernbert_token_classifier}},
      {{"qwen3"},
       "Qwen3",
       "Qwen3 (RMSNorm, rotary, SwiGLU, grouped-query causal attention)",
       &make_qwen3,
       &check_qwen3,
       {nullptr, &make_score_token_classifier}},
      {{"deberta-v2"},
       "DeBERTa-v2/v3",
       "DeBERTa-v2/v3 (disentangled attention, relative position buckets)",
       &make_deberta_v2,
       &check_deberta_v2,
       {&make_deberta_pooler_classifier, &make_token_classifier}},
  };
  return table;
}

}  // namespace flowline::models::detail
