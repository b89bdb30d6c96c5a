// flowline/text_models/sentence_encoder.hpp — the SentenceEncoder executor: text in, embeddings out.
//
//   - name: encoder
//     uses: SentenceEncoder
//     with: {model: models/all-MiniLM-L6-v2, dtype: fp16, batch_size: 128}
//     device: cuda
//
// Parameters: model (a sentence-transformers checkpoint folder), device (cpu, cuda, cuda:N, auto; empty:
// the executor's `device:` in the flow), dtype (fp32, fp16, bf16), max_seq_length (0: the model's),
// batch_size (sequences per forward pass), max_batch_tokens (tokens per forward pass, 0: no limit),
// normalize (auto: as the checkpoint says; true; false).
// Endpoints: "/encode" and the default set every document's embedding (float32, on the CPU).
//
// Within each batch it receives, documents are ordered by token count and cut into forward passes, so
// padding never happens (tokens are packed); results go back to their documents in the original order.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::text_models {

// Adds SentenceEncoder to `registry`. The launcher calls it for the global registry.
void register_sentence_encoder(Registry& registry);

}  // namespace flowline::text_models
