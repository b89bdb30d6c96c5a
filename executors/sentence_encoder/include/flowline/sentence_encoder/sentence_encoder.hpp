// flowline/sentence_encoder/sentence_encoder.hpp — the SentenceEncoder executor: text in, embeddings out.
//
//   - name: encoder
//     uses: SentenceEncoder
//     with: {model: models/all-MiniLM-L6-v2, dtype: fp16, batch_size: 128}
//     device: cuda
//
// Any checkpoint of flowline::models' architecture table runs (BERT, RoBERTa/XLM-R/CamemBERT, MPNet,
// ModernBERT, Qwen3; docs/models.md), with the Pooling, Dense and Normalize modules it declares.
//
// Parameters: model (a sentence-transformers checkpoint folder), prompt_name (a prompt of the checkpoint put
// before every text; a request's `prompt_name` or `prompt` parameter overrides it), device (cpu, cuda, cuda:N, auto;
// empty: the executor's `device:` in the flow), dtype (fp32, fp16, bf16), max_seq_length (0: the model's), batch_size
// (sequences per forward pass), max_batch_tokens (tokens per forward pass, 0: no limit), normalize (auto: as the
// checkpoint says; true; false), keep_on_device (leave embeddings on the GPU for a next executor on the same device),
// cuda_graphs and cuda_graph_max_tokens (replay passes of up to that many tokens from CUDA graphs; GPU, fp16/bf16),
// memory_fraction (for batch_size/max_batch_tokens: auto), share_weights, tokenizer_threads and warmup. Endpoints:
// "/encode" and the default set every document's embedding (float32; on the CPU unless keep_on_device).
//
// On a GPU each replica runs on its own CUDA stream: tokenizing happens on the host (in parallel for
// large batches), every forward pass of the batch is enqueued without waiting, and the handler waits
// once, for the copy of all embeddings back to the host. Its metrics (Flow::stats()) split the time into
// tokenize_seconds, enqueue_seconds and wait_seconds, and count tokens, forward_passes and graph_passes.
//
// Within each batch it receives, documents are ordered by token count and cut into forward passes, so
// padding never happens (tokens are packed); results go back to their documents in the original order — the
// pass planner of flowline::models (pass_planner.hpp), which every model head's executor shares.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::sentence_encoder {

// Adds SentenceEncoder to `registry`. The launcher calls it for the global registry.
void register_sentence_encoder(Registry& registry);

}  // namespace flowline::sentence_encoder
