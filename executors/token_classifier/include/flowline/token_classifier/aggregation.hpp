// flowline/token_classifier/aggregation.hpp — transformers' TokenClassificationPipeline's post-processing
// (transformers 5.24, pipelines/token_classification.py) on one window's tokens: from each token's label scores
// to entities, as the TokenClassifier executor and its tests use it.
//
// The executor makes a PreEntity for each non-special token of a window (gather_pre_entities: its token string,
// softmax scores, code-point offsets into the document's text, index in the window, sub-word flag), then calls
// aggregate() (the pipeline's aggregate: none and simple label tokens alone, first / average / max vote per
// word, every strategy but none groups B-/I- runs), drops ignore_labels, and for a text cut into stride windows
// merges the windows' entities with merge_overlapping() (aggregate_overlapping_entities).
// Plain functions of their arguments: call them from any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::token_classifier {

enum class Strategy { None, Simple, First, Average, Max };
// "none", "simple", "first", "average", "max" (the pipeline's names, any case); nullopt for another name.
std::optional<Strategy> parse_strategy(std::string_view name);
std::string_view to_string(Strategy strategy);

// One token, as gather_pre_entities makes it. Views only: the caller keeps the token strings (the tokenizer's
// vocabulary, the text) and the scores (its softmax buffer) alive while aggregate() runs.
struct PreEntity {
  std::string_view word;           // the token string; the text's slice for the unknown token
  std::span<const float> scores;   // softmax over the labels
  std::size_t start = 0, end = 0;  // code points of the document's text
  std::size_t index = 0;           // the token's index in its window (specials counted)
  bool is_subword = false;
};

// An entity: a token (strategy none: `index` set, `label` is the pipeline's `entity`) or a group (`label` is
// its `entity_group`: the label without its B-/I- prefix).
struct Entity {
  std::string label;
  double score = 0;
  std::string word;
  std::size_t start = 0, end = 0;
  std::optional<std::size_t> index;
};

// The tokenizer's convert_tokens_to_string (Tokenizer::decode_tokens).
using DecodeTokens = std::function<std::string(std::span<const std::string_view>)>;

// The pipeline's aggregate(pre_entities, strategy): `labels` by index (id2label). A word for first / average /
// max is a token and the sub-word tokens after it (is_subword); its label the first token's argmax (first), the
// argmax of the token with the highest score (max) or of the mean scores (average). Groups join a run of
// entities of one tag (B-X or I-X or X) where each after the first is not B-; their score is the mean, their
// word decode() of the members' words. Entities labelled one of `ignore` are left out as drop_ignored() leaves
// them, but before their words are decoded (most groups are "O": decoding them is most of the work).
std::vector<Entity> aggregate(std::span<const PreEntity> tokens, Strategy strategy,
                              const std::vector<std::string>& labels, const DecodeTokens& decode,
                              std::span<const std::string> ignore = {});

// Leaves out the entities whose label is one of `ignore` (the pipeline's ignore_labels), keeping the order.
void drop_ignored(std::vector<Entity>& entities, std::span<const std::string> ignore);

// aggregate_overlapping_entities: entities sorted by start (stably), and of entities whose start falls inside
// the one kept before, the longer kept (the higher score for equal lengths; the earlier when both are equal).
std::vector<Entity> merge_overlapping(std::vector<Entity> entities);

}  // namespace flowline::token_classifier
