// flowline/token_classifier/token_classifier.hpp — the TokenClassifier executor: named entities (or any token
// labels) of each document's text through a `*ForTokenClassification` checkpoint, exactly as transformers'
// TokenClassificationPipeline (5.24) finds them, as chunks of the document.
//
//   - name: tagger
//     uses: TokenClassifier
//     with: {model: models/bert-base-NER, aggregation_strategy: simple}
//
// Input: each document's text. Output: doc.chunks gains one chunk per entity, in the text's order: text = the
// entity's `word` (the tokenizer's decoder over its tokens, as the pipeline's convert_tokens_to_string), tags
// {entity_group (strategy none: entity and index), score, start, end} with start/end Unicode code points of
// the text (Python str indices), and parent_id = the document's id. Existing chunks are kept. An empty (or
// all-whitespace) text gives no entities.
//
// What it computes, step by step as the pipeline: the tokenizer's ids and character offsets (Tokenizer::
// encode_with_offsets_into, into an Encoding each replica keeps for its documents from request to request: a
// replica's calls never overlap, so nothing is shared between threads), the model's logits for every token
// (TokenClassifierModel), softmax over the labels, the post-processor's special tokens dropped, then aggregation
// (flowline/token_classifier/aggregation.hpp): aggregation_strategy none | simple | first | average | max, sub-words
// told by the tokenizer's continuing-subword prefix (WordPiece's "##": a token whose string is not as long as its text)
// or else by the previous-character heuristic (a token starting after a character other than a space), the unknown
// token taking the text's slice as its word; then ignore_labels (default ["O"]) dropped.
//
// Long texts: a text longer than max_seq_length tokens (0: the model's, from tokenizer_config.json's
// model_max_length and the positions) is, with `stride` 0 (the default, as the pipeline without stride), cut
// to max_seq_length tokens; the executor then warns once per replica and counts the documents in its
// `truncated` metric. With `stride` N > 0 it is read in windows of max_seq_length tokens overlapping by N
// tokens (the pipeline's return_overflowing_tokens windows), each window's entities found alone and then
// merged as the pipeline merges them (of overlapping entities the longer, then the higher score). stride must
// be less than max_seq_length minus the template's special tokens, and needs a strategy other than none (the
// pipeline refuses both); with tokenizer_config.json's truncation_side left, stride is refused.
//
// Parameters: model (a *ForTokenClassification checkpoint folder, or ORG/NAME in the local Hugging Face cache;
// validation refuses a folder without the head's weights, without id2label, or of an architecture without a
// token head, naming the file and what is missing), device, dtype (fp32, fp16, bf16), max_seq_length,
// batch_size (windows per forward pass), aggregation_strategy (default simple, the Inference API's; the
// pipeline's own default is none), ignore_labels, stride, warmup (default true: at start, passes over dummy
// windows of max_seq_length, 128, 64 and 16 tokens on a GPU, one short pass on the CPU, so a fresh process's
// first request does not pay for CUDA and allocator set-up). A request's parameters aggregation_strategy,
// ignore_labels and stride override these for that request (a bad value fails the request).
// Endpoints: "/token-classification" and the default.
//
// Batching: a request's windows are packed into forward passes of similar length (flowline::models'
// PassPlanner, batch_size windows a pass); on a GPU each replica runs on its own stream (fp16/bf16 there),
// replicas on a device share one copy of the weights. Logits come back to the host once per request.
// Metrics: texts, entities, truncated, tokens and passes, and each request's phases in seconds: tokenize_seconds
// (tokens with offsets, windows), model_seconds (the passes and the logits back on the host: on a GPU, the wait
// for it) and post_seconds (softmax, aggregation, chunks) — tokenize and post are the replica thread's host work
// (bench/ner_host.py).
#pragma once

#include "flowline/registry.hpp"

namespace flowline::token_classifier {

// Adds TokenClassifier to `registry`. The launcher loads it from the executor folder
// (libflowline_token_classifier.so).
void register_token_classifier(Registry& registry);

}  // namespace flowline::token_classifier
