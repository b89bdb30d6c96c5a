// Internal: the BERT encoder stack, which the RoBERTa family (roberta.cpp) runs with its own position
// scheme. Not installed.
#pragma once

#include "../transformer.hpp"

namespace flowline::models::detail {

struct BertFamilyOptions {
  std::string_view description;
  // Added to every token's position within its sequence: RoBERTa counts from padding_idx + 1.
  std::int64_t position_offset = 0;
};

std::unique_ptr<Transformer> make_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options);
// The table's check: config.json's values in range and in agreement with the weights' header.
void check_bert_family(const ArchitectureContext& context, const BertFamilyOptions& options);

}  // namespace flowline::models::detail
