// Tokenizer::encode_with_offsets and encode_pair_with_offsets (flowline/models/tokenizer.hpp): the pipeline's
// run keeping each token's code points of its text, truncated and framed as the ids are, then as Python
// `tokenizers` reports offsets: trimmed of spaces where the post-processor says trim_offsets (its
// process_offsets), (0, 0) for special tokens.
#include "flowline/models/tokenizer.hpp"

#include "pipeline.hpp"

#include <algorithm>
#include <limits>

namespace flowline::models {

namespace {

using tokenizers::Align;
using tokenizers::Pipeline;
using tokenizers::TokenPlace;

// One sequence's ids and places, as the pipeline gives them and truncation leaves them.
struct Sequence {
  std::vector<std::int32_t> ids;
  std::vector<TokenPlace> places;
};

// The sequence's offsets appended to `out`, trimmed of spaces where the post-processor says trim_offsets
// (tokenizers' process_offsets over the truncated sequence). Written in place into `out` grown once, in the
// same pass that frames them: a vector of offsets between the places and the Encoding cost a pass per token.
void append_offsets(const Pipeline& p, const Sequence& s, std::vector<TokenOffsets>& out) {
  const std::size_t n = s.places.size(), from = out.size();
  out.resize(from + n);
  TokenOffsets* const o = out.data() + from;
  const TokenPlace* const places = s.places.data();
  if (!p.post.trim_offsets) {
    for (std::size_t i = 0; i < n; ++i) o[i] = TokenOffsets{places[i].chars.begin, places[i].chars.end};
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const TokenPlace& place = places[i];
    std::size_t start = place.chars.begin, end = place.chars.end;
    if (std::size_t lead = place.lead; lead > 0) {
      const bool first = i == 0 || start == 0;
      if (first && p.post.add_prefix_space && lead == 1) lead = 0;
      start = std::min(start + lead, end);
    }
    if (place.trail > 0 && end >= place.trail) end = std::max<std::size_t>(end - place.trail, start);
    o[i] = TokenOffsets{start, end};
  }
}

void tokenize(const Pipeline& p, std::string_view text, Sequence& s) {
  s.ids.clear();
  s.places.clear();
  p.tokens(text, s.ids, &s.places);
}

void keep(Sequence& s, std::size_t n, bool left) {
  tokenizers::cut(s.ids, n, left);
  tokenizers::cut(s.places, n, left);
}

// The post-processor's template around one or two sequences.
Encoding frame(const Pipeline& p, const std::vector<tokenizers::TemplatePiece>& pieces, const Sequence& a,
               const Sequence* b) {
  Encoding e;
  std::size_t total = 0;  // each vector allocated once, at its size
  for (const tokenizers::TemplatePiece& piece : pieces)
    total += !piece.is_sequence ? piece.ids.size() : piece.sequence == 0 ? a.ids.size() : b->ids.size();
  e.ids.reserve(total);
  e.type_ids.reserve(total);
  e.offsets.reserve(total);
  e.special.reserve(total);
  e.sequence.reserve(total);
  for (const tokenizers::TemplatePiece& piece : pieces) {
    if (!piece.is_sequence) {
      e.ids.insert(e.ids.end(), piece.ids.begin(), piece.ids.end());
      e.type_ids.insert(e.type_ids.end(), piece.ids.size(), piece.type_id);
      e.offsets.insert(e.offsets.end(), piece.ids.size(), TokenOffsets{});
      e.special.insert(e.special.end(), piece.ids.size(), 1);
      e.sequence.insert(e.sequence.end(), piece.ids.size(), -1);
      continue;
    }
    const Sequence& s = piece.sequence == 0 ? a : *b;
    e.ids.insert(e.ids.end(), s.ids.begin(), s.ids.end());
    e.type_ids.insert(e.type_ids.end(), s.ids.size(), piece.type_id);
    append_offsets(p, s, e.offsets);
    e.special.insert(e.special.end(), s.ids.size(), 0);
    e.sequence.insert(e.sequence.end(), s.ids.size(), static_cast<std::int8_t>(piece.sequence));
  }
  return e;
}

}  // namespace

std::vector<TokenOffsets> byte_offsets(std::string_view text, const std::vector<TokenOffsets>& offsets) {
  thread_local std::vector<std::size_t> starts;  // the first byte of each code point, then the text's size
  tokenizers::utf8_starts(text, starts);
  const std::size_t points = starts.size() - 1;
  std::vector<TokenOffsets> out;
  out.reserve(offsets.size());
  for (const TokenOffsets& o : offsets)
    out.push_back({starts[std::min(o.start, points)], starts[std::min(o.end, points)]});
  return out;
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, std::size_t max_length) const {
  const Pipeline& p = *pipeline_;
  thread_local Sequence a;  // this thread's buffers, reused
  tokenize(p, text, a);
  const std::size_t added = p.post.added(false);
  if (max_length != 0) keep(a, max_length > added ? max_length - added : 0, p.truncate_left);
  return frame(p, p.post.single, a, nullptr);
}

Encoding Tokenizer::encode_pair_with_offsets(std::string_view first, std::string_view second,
                                             std::size_t max_length) const {
  const Pipeline& p = *pipeline_;
  thread_local Sequence a, b;
  tokenize(p, first, a);
  tokenize(p, second, b);
  if (max_length != 0) {
    const std::size_t added = p.post.added(true);
    const auto [n1, n2] =
        tokenizers::pair_lengths(a.ids.size(), b.ids.size(), max_length > added ? max_length - added : 0);
    keep(a, n1, p.truncate_left);
    keep(b, n2, p.truncate_left);
  }
  return frame(p, p.post.pair, a, &b);
}

}  // namespace flowline::models
