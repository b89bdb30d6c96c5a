// RoBERTa, XLM-RoBERTa and CamemBERT (model_type "roberta", "xlm-roberta", "camembert"): BERT's stack with
// positions counted from padding_idx + 1 (as Hugging Face's create_position_ids_from_input_ids does for
// unpadded tokens) and, in practice, one token type.
#include "bert_family.hpp"

namespace flowline::models::detail {

namespace {
BertFamilyOptions roberta_options(const ArchitectureContext& context) {
  const std::int64_t padding_idx = context.int_in("pad_token_id", 1, 0, kMaxPositions);
  return {.description = "RoBERTa (BERT stack, positions from padding_idx + 1)", .position_offset = padding_idx + 1};
}
}  // namespace

std::unique_ptr<Transformer> make_roberta(const ArchitectureContext& context) {
  return make_bert_family(context, roberta_options(context));
}
void check_roberta(const ArchitectureContext& context) { check_bert_family(context, roberta_options(context)); }

}  // namespace flowline::models::detail
