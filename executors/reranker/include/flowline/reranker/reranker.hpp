// flowline/reranker/reranker.hpp — the Reranker executor: a cross-encoder scores (query, candidate) pairs.
//
//   - name: reranker
//     uses: Reranker
//     with: {model: models/ms-marco-MiniLM-L-6-v2, top_n: 10}
//     device: cuda
//
// Each document is a query (its text). Its candidates are its matches (Jina's shape: each match's text), or,
// when it has none, the strings of tags["documents"] (or tags["texts"]), which become its matches. Every
// (query, candidate) pair goes through the checkpoint's cross-encoder (flowline::models' CrossEncoderModel:
// the architectures whose table row has a sequence-classification head — BERT, RoBERTa/XLM-R/CamemBERT,
// DeBERTa-v2/v3)
// with the tokenizer's pair template; the matches are then sorted by score,
// highest first, and cut to top_n. Each match gets scores["relevance_score"] and tags["index"], its position
// among the candidates before sorting.
//
// Parameters: model (a cross-encoder checkpoint folder, one label), device, dtype (fp32, fp16, bf16),
// max_seq_length (pair tokens; 0: the model's), batch_size (pairs per forward pass), top_n (0: all),
// raw_scores (the logits instead of the CrossEncoder activation). A request's parameters top_n and
// raw_scores override the executor's. Endpoints: "/rerank" and the default.
//
// The pairs of all queries of a request are tokenized, sorted by length and packed into forward passes
// (flowline::models' PassPlanner, as the SentenceEncoder's); on
// a GPU each replica runs on its own stream and the replicas on a device share one copy of the weights.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::reranker {

// Adds Reranker to `registry`. The launcher loads it from the executor folder (libflowline_reranker.so).
void register_reranker(Registry& registry);

}  // namespace flowline::reranker
