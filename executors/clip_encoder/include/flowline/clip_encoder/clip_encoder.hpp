// flowline/clip_encoder/clip_encoder.hpp — the ClipEncoder executor: texts and images into one embedding space
// (CLIP, SigLIP), and CLIP-as-service's /rank.
//
//   - name: clip
//     uses: ClipEncoder
//     with: {model: models/clip-vit-base-patch32, dtype: fp16, batch_size: 64}
//     device: cuda
//
// The model is a Hugging Face CLIPModel or SiglipModel folder (or sentence-transformers' CLIP layout), run by
// flowline::models' ClipModel (clip_model.hpp). Each document is one of:
//   - an image: a `blob` (JPEG, PNG or WebP bytes), else — when it has no text — a `uri` that names an image (a
//     data: URI, a local path or file:// URI): decoded by flowline::images (nvJPEG or the CPU, see below),
//     preprocessed as the checkpoint's preprocessor_config.json says and run through the vision tower;
//   - a text (its `text`; a document with a text and a `uri` is a text: flowline's readers set `uri` to the file
//     a text came from): tokenized with the checkpoint's tokenizer.json and run through the text tower.
// Both land in `embedding` (float32 [D]; unit length with `normalize: true`; on the host unless keep_on_device).
//
// Where an image may be read from (flowline::images::ImageSourcePolicy): a blob and a data: URI always; a local
// path only under the folders of `allowed_uri_roots`, or anywhere when the documents are the user's own
// (`flowline run`, RuntimeInfo::local_input_files). A served flow (`flowline serve`, an executor server) never
// reads a file a client names outside those folders. http(s): only with `allow_http: true`, and
// refused even then until flowline::images fetches (docs/images.md).
//
// Failures: a document that is neither a text nor an image, an image that cannot be read or decoded (garbage,
// truncated, more than max_image_pixels pixels), a path outside the allowed folders, fail its request with a
// RequestError naming every such document and why (HTTP 422), before any model work; the flow keeps serving and
// the other requests of a merged batch are run again on their own (the runtime's isolation), so they succeed.
//
// /rank (CLIP-as-service's): each document is a query (text or image) whose `matches` are the candidates (texts
// or images). Every query and candidate is embedded (their `embedding` set as by /encode); each candidate gets
// scores["clip_score_cosine"] (cosine with the query) and scores["clip_score"]: for CLIP, the softmax over the
// query's candidates of logit_scale * cosine (the model's logit_scale, exp() applied, as transformers' CLIPModel
// multiplies its logits; CLIP-as-service used a fixed 100, which is what OpenAI's checkpoints hold); for SigLIP,
// sigmoid(logit_scale * cosine + logit_bias) per candidate, as transformers' zero-shot image classification
// pipeline does for SigLIP (it was trained with a sigmoid loss, not a softmax). The matches are then sorted
// by clip_score, best first (stable). A query without matches fails the request.
//
// JPEGs are decoded on the GPU with nvJPEG when the device is CUDA and `gpu_decode` allows it (auto: when
// libnvjpeg.so.13 loads; on: an error at start when it cannot; off), straight into device tensors on the replica's
// stream; other formats and the JPEGs nvJPEG cannot take (CMYK, arithmetic coding, a missing EOI, anything its
// calls refuse) go to the CPU decoders per image, so a bad file still fails with the CPU decoder's words.
// Metrics gpu_decode_images / cpu_decode_images count each side, gpu_decode_seconds / cpu_decode_seconds time it.
// CPU decoding runs on CPU threads (`decode_threads`, from ATen's pool) in slices of batch_size images; on a GPU a
// slice's vision pass is only enqueued on the replica's CUDA stream before the next slice is decoded, so the
// CPU decodes slice k+1 while the GPU runs slice k, and the replicas (replicas_per_gpu 4) overlap some's
// decoding with others' GPU work. With nvJPEG, cpu_decode_share sends a slice's last images to the CPU threads
// while nvJPEG decodes the first ones. Replicas on one device share one copy of the weights.
//
// Threads: as every executor (executor.hpp): one replica is never called concurrently.
#pragma once

#include "flowline/registry.hpp"

namespace flowline::clip_encoder {

// Adds ClipEncoder to `registry`. The launcher loads it from the executor folder (libflowline_clip_encoder.so).
void register_clip_encoder(Registry& registry);

}  // namespace flowline::clip_encoder
