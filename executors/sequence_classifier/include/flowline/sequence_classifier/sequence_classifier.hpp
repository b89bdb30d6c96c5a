// flowline/sequence_classifier/sequence_classifier.hpp — the SequenceClassifier executor: each document's
// text (or text pair) through a `*ForSequenceClassification` checkpoint, its labels scored and sorted.
//
//   - name: classifier
//     uses: SequenceClassifier
//     with: {model: models/my-sentiment-model, top_k: 3}
//
// Input: each document's text; when its tags["text_pair"] is a string, the pair (text, text_pair) through
// the tokenizer's pair template (transformers' pipeline input {"text": ..., "text_pair": ...}). Any other
// tags.text_pair fails the request. An empty text is classified as the pipeline classifies "" (its special
// tokens alone). Texts and pairs are cut to max_seq_length tokens (0: the model's; `longest_first` for
// pairs), as transformers' pipeline does when given truncation=True (without it the pipeline fails past the
// model's positions).
//
// Output: tags["labels"] = [{"label", "score"}, ...] best first (a stable sort: ties keep the labels' order),
// the top_k of them (0: all), and scores[label] = score for each label returned. Labels are config.json's
// id2label; a checkpoint without one gets LABEL_0, LABEL_1, ... (transformers' names).
//
// Scores: the logits of the checkpoint's classifier head (flowline::models' CrossEncoderModel: the
// architectures whose table row has a sequence-classification head — BERT, RoBERTa/XLM-R/CamemBERT,
// DeBERTa-v2/v3), then
// the function transformers' TextClassificationPipeline applies: `function_to_apply` auto picks none for
// problem_type regression, sigmoid for multi_label_classification or one label, softmax otherwise; none,
// sigmoid or softmax force one. raw_scores: true gives the logits (function none). A document whose scores
// are not finite (NaN or infinity) fails the request (models::NonFiniteOutput names it).
//
// Parameters: model (a *ForSequenceClassification checkpoint folder, or ORG/NAME in the local Hugging Face
// cache), device, dtype (fp32, fp16, bf16), max_seq_length, batch_size (sequences per forward pass), top_k,
// function_to_apply (auto, none, sigmoid, softmax), raw_scores. A request's parameters top_k, raw_scores and
// function_to_apply override the executor's (checked by the core: top_k an int ≥ 0, function_to_apply one of
// the four); count_tokens: true puts each document's tokens (special ones included) in tags["tokens"] (the
// gateway's usage figures). Endpoints: "/classify" and the default.
//
// A request's sequences are tokenized, sorted by length and packed into forward passes (flowline::models'
// PassPlanner); on a GPU each replica runs on its own stream and the replicas on a device share one copy
// of the weights (as the Reranker's).
#pragma once

#include "flowline/registry.hpp"

namespace flowline::sequence_classifier {

// Adds SequenceClassifier to `registry`. The launcher loads it from the executor folder
// (libflowline_sequence_classifier.so).
void register_sequence_classifier(Registry& registry);

}  // namespace flowline::sequence_classifier
