// Decoding image documents on ATen's CPU threads (compiled with OpenMP: flowline_parallel_sources).
#include "decode.hpp"

#include "flowline/error.hpp"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <exception>

namespace flowline::clip_encoder {

std::optional<Modality> modality_of(const Document& doc) {
  if (!doc.blob.empty()) return Modality::image;
  if (!doc.text.empty()) return Modality::text;
  if (images::has_image(doc)) return Modality::image;
  return std::nullopt;
}

namespace {

// image_bytes() names the document in its errors; decode_image() does not know it.
// `fetched` is the document's download when it is an http(s) one (already named in its error).
std::string decode_one(const Document& doc, const images::FetchedImage& fetched, const DecodeSettings& settings,
                       images::Image& out) {
  Bytes read;
  std::span<const std::uint8_t> bytes = doc.blob;
  if (fetched.fetched) {
    if (!fetched.error.empty()) return fetched.error;
    bytes = fetched.bytes;
  }
  try {
    if (bytes.empty()) {
      read = images::image_bytes(doc, settings.policy);
      bytes = read;
    }
  } catch (const std::exception& e) {
    return e.what();
  }
  try {
    out = images::decode_image(bytes, settings.limits);
    return {};
  } catch (const std::exception& e) {
    return fmt::format("document '{}': {}", doc.id, e.what());
  }
}

}  // namespace

void decode_slice(std::span<const Document* const> docs, const DecodeSettings& settings,
                  std::vector<images::Image>& out, std::vector<std::string>& failures) {
  const std::size_t n = docs.size();
  out.assign(n, images::Image{});
  failures.assign(n, std::string());
  // Downloads first, several at once on threads of their own (they wait on the network, not the CPU).
  const std::vector<images::FetchedImage> fetched = images::fetch_http_images(docs, settings.policy);
  const std::size_t chunks = std::max<std::size_t>(1, std::min(settings.threads, n));
  const std::size_t per_chunk = n == 0 ? 0 : (n + chunks - 1) / chunks;
  // One task per chunk, grain 1: at most `chunks` threads decode at once, each its own range of images.
  at::parallel_for(0, static_cast<std::int64_t>(chunks), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      const std::size_t first = static_cast<std::size_t>(c) * per_chunk, last = std::min(n, first + per_chunk);
      for (std::size_t i = first; i < last; ++i) failures[i] = decode_one(*docs[i], fetched[i], settings, out[i]);
    }
  });
}

}  // namespace flowline::clip_encoder
