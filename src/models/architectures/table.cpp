// The architecture table: which file runs which config.json model_type. Adding an architecture is a file
// in this folder with a make_<name> function, and one line here (docs/models.md).
#include "../transformer.hpp"

namespace flowline::models::detail {

// Each make_<name> with its check_<name>: config.json's values in range and agreeing with the weights.
std::unique_ptr<Transformer> make_bert(const ArchitectureContext& context);  // bert.cpp
void check_bert(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_roberta(const ArchitectureContext& context);  // roberta.cpp
void check_roberta(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_mpnet(const ArchitectureContext& context);  // mpnet.cpp
void check_mpnet(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_modernbert(const ArchitectureContext& context);  // modernbert.cpp
void check_modernbert(const ArchitectureContext& context);
std::unique_ptr<Transformer> make_qwen3(const ArchitectureContext& context);  // qwen3.cpp
void check_qwen3(const ArchitectureContext& context);

std::span<const Architecture> architectures() {
  static const Architecture table[] = {
      {{"bert"}, "BERT", &make_bert, &check_bert},
      {{"roberta", "xlm-roberta", "camembert"}, "RoBERTa / XLM-RoBERTa / CamemBERT", &make_roberta, &check_roberta},
      {{"mpnet"}, "MPNet (relative position bias)", &make_mpnet, &check_mpnet},
      {{"modernbert"}, "ModernBERT (rotary, GeGLU, local/global attention)", &make_modernbert, &check_modernbert},
      {{"qwen3"}, "Qwen3 (RMSNorm, rotary, SwiGLU, grouped-query causal attention)", &make_qwen3, &check_qwen3},
  };
  return table;
}

}  // namespace flowline::models::detail
