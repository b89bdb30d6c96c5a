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
  tokenizers::TokenPlaces places;
};

// The sequence's offsets appended to `out`, trimmed of spaces where the post-processor says trim_offsets
// (tokenizers' process_offsets over the truncated sequence). Appended to `out` grown once (not resized: that
// wrote each offset twice), in the pass that frames them: a vector of offsets between cost a pass per token.
// The trimming without branches (most of a byte-level BPE's tokens start with a space, some do not: a branch on
// it was mispredicted often): a token's leading spaces are kept where add_prefix_space put the one space before
// the sequence's first token (its first token, or any starting at 0).
void append_offsets(const Pipeline& p, const Sequence& s, std::vector<TokenOffsets>& out) {
  const std::size_t n = s.places.size();
  out.reserve(out.size() + n);
  const TokenPlace* const places = s.places.data();
  if (!p.post.trim_offsets) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(TokenOffsets{places[i].chars.begin, places[i].chars.end});
    return;
  }
  const std::uint64_t prefix = p.post.add_prefix_space ? 1 : 0;
  for (std::size_t i = 0; i < n; ++i) {
    const TokenPlace& place = places[i];
    const std::uint64_t begin = place.chars.begin, end = place.chars.end, lead = place.lead, trail = place.trail;
    // start: past the leading spaces (none where add_prefix_space put the one), not past the end; the end before
    // the trailing spaces, not before the start. Each picked by a mask.
    const std::uint64_t keep =
        prefix & static_cast<std::uint64_t>(lead == 1) & static_cast<std::uint64_t>((i == 0) | (begin == 0));
    const std::uint64_t moved = std::min(begin + (lead & (keep - 1)), end);
    const std::uint64_t led = 0 - static_cast<std::uint64_t>(lead != 0);
    const std::uint64_t start = (moved & led) | (begin & ~led);
    const std::uint64_t cut = std::max(end - trail, start);
    const std::uint64_t trailed = 0 - static_cast<std::uint64_t>((trail != 0) & (end >= trail));
    out.push_back(TokenOffsets{start, (cut & trailed) | (end & ~trailed)});
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

void clear(Encoding& e) {
  e.ids.clear();
  e.type_ids.clear();
  e.offsets.clear();
  e.special.clear();
  e.sequence.clear();
}

// A template's special token, framed.
void append_special(const tokenizers::TemplatePiece& piece, Encoding& e) {
  e.ids.insert(e.ids.end(), piece.ids.begin(), piece.ids.end());
  e.type_ids.insert(e.type_ids.end(), piece.ids.size(), piece.type_id);
  e.offsets.insert(e.offsets.end(), piece.ids.size(), TokenOffsets{});
  e.special.insert(e.special.end(), piece.ids.size(), 1);
  e.sequence.insert(e.sequence.end(), piece.ids.size(), -1);
}

// The post-processor's template around a pair of sequences, into `e` (cleared).
void frame_pair(const Pipeline& p, const Sequence& a, const Sequence& b, Encoding& e) {
  clear(e);
  for (const tokenizers::TemplatePiece& piece : p.post.pair) {
    if (!piece.is_sequence) {
      append_special(piece, e);
      continue;
    }
    const Sequence& s = piece.sequence == 0 ? a : b;
    e.ids.insert(e.ids.end(), s.ids.begin(), s.ids.end());
    e.type_ids.insert(e.type_ids.end(), s.ids.size(), piece.type_id);
    append_offsets(p, s, e.offsets);
    e.special.insert(e.special.end(), s.ids.size(), 0);
    e.sequence.insert(e.sequence.end(), s.ids.size(), static_cast<std::int8_t>(piece.sequence));
  }
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

// The single template holds sequence A once: its ids go straight into the Encoding, between the special
// tokens before and after it, as encode_into does; only its places stand aside, to be trimmed into offsets.
void Tokenizer::encode_with_offsets_into(std::string_view text, std::size_t max_length, Encoding& e) const {
  const Pipeline& p = *pipeline_;
  thread_local Sequence a;  // this thread's places, reused (its ids unused)
  clear(e);
  const std::size_t added = p.post.added(false);
  for (const tokenizers::TemplatePiece& piece : p.post.single) {
    if (!piece.is_sequence) {
      append_special(piece, e);
      continue;
    }
    const std::size_t start = e.ids.size();
    a.places.clear();
    p.tokens(text, e.ids, &a.places);
    if (max_length != 0) {
      const std::size_t n = max_length > added ? max_length - added : 0;
      if (e.ids.size() - start > n) {
        if (p.truncate_left)
          e.ids.erase(e.ids.begin() + static_cast<std::ptrdiff_t>(start), e.ids.end() - static_cast<std::ptrdiff_t>(n));
        e.ids.resize(start + n);
        tokenizers::cut(a.places, n, p.truncate_left);
      }
    }
    const std::size_t n = e.ids.size() - start;
    e.type_ids.insert(e.type_ids.end(), n, piece.type_id);
    append_offsets(p, a, e.offsets);
    e.special.insert(e.special.end(), n, 0);
    e.sequence.insert(e.sequence.end(), n, 0);
  }
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, std::size_t max_length) const {
  Encoding e;
  encode_with_offsets_into(text, max_length, e);
  return e;
}

void Tokenizer::encode_pair_with_offsets_into(std::string_view first, std::string_view second, std::size_t max_length,
                                              Encoding& e) const {
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
  frame_pair(p, a, b, e);
}

Encoding Tokenizer::encode_pair_with_offsets(std::string_view first, std::string_view second,
                                             std::size_t max_length) const {
  Encoding e;
  encode_pair_with_offsets_into(first, second, max_length, e);
  return e;
}

}  // namespace flowline::models
