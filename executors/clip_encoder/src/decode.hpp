// Private to the ClipEncoder: which documents are images and which texts, and decoding a slice of image
// documents on CPU threads.
#pragma once

#include "flowline/document.hpp"
#include "flowline/images.hpp"

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace flowline::clip_encoder {

enum class Modality { text, image };

// A blob is an image; else a text is a text (readers set `uri` to the file a text came from); else a `uri`
// naming an image (images::has_image) is one. nullopt: neither.
std::optional<Modality> modality_of(const Document& doc);

// What decode_slice() needs, fixed for an executor's life.
struct DecodeSettings {
  images::ImageSourcePolicy policy;
  images::DecodeLimits limits;
  std::size_t threads = 1;  // at most this many of ATen's threads decode one slice
};

// Reads and decodes docs[i]'s image into out[i] for every i, spread over settings.threads threads of ATen's
// pool; http(s) images are downloaded first, settings.policy.http_in_flight at once (images::fetch_http_images). A
// document that fails leaves out[i] empty and failures[i] set to "document 'ID': why"; the others are decoded
// regardless. `out` and `failures` are resized to docs.size(). Called by one replica thread at a time per output (it
// keeps no state).
void decode_slice(std::span<const Document* const> docs, const DecodeSettings& settings,
                  std::vector<images::Image>& out, std::vector<std::string>& failures);

}  // namespace flowline::clip_encoder
