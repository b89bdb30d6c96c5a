// The architecture table: which file runs which config.json model_type. Adding an architecture is a file
// in this folder with a make_<name> function, and one line here (docs/models.md).
#include "../transformer.hpp"

namespace flowline::models::detail {

std::unique_ptr<Transformer> make_bert(const ArchitectureContext& context);        // bert.cpp
std::unique_ptr<Transformer> make_roberta(const ArchitectureContext& context);     // roberta.cpp
std::unique_ptr<Transformer> make_mpnet(const ArchitectureContext& context);       // mpnet.cpp
std::unique_ptr<Transformer> make_modernbert(const ArchitectureContext& context);  // modernbert.cpp

std::span<const Architecture> architectures() {
  static const Architecture table[] = {
      {{"bert"}, "BERT", &make_bert},
      {{"roberta", "xlm-roberta", "camembert"}, "RoBERTa / XLM-RoBERTa / CamemBERT", &make_roberta},
      {{"mpnet"}, "MPNet (relative position bias)", &make_mpnet},
      {{"modernbert"}, "ModernBERT (rotary, GeGLU, local/global attention)", &make_modernbert},
  };
  return table;
}

}  // namespace flowline::models::detail
