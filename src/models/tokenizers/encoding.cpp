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

using tokenizers::Pipeline;

// One sequence's ids and either its places (trimmed into offsets once truncation has picked its first token) or
// its offsets (PlaceSink), as the pipeline gives them and truncation leaves them.
struct Sequence {
  std::vector<std::int32_t> ids;
  tokenizers::TokenPlaces places;
  std::vector<TokenOffsets> offsets;
  bool placed = false;  // places, not offsets
};

// Whether offsets must wait for truncation: trim_offsets keeps the leading space of a sequence's first token, and
// truncation from the left picks which that is.
bool trim_after_cut(const Pipeline& p, std::size_t max_length) {
  return p.post.trim_offsets && p.truncate_left && max_length != 0;
}

tokenizers::PlaceSink sink_of(const Pipeline& p, bool placed, tokenizers::TokenPlaces& places,
                              std::vector<TokenOffsets>& offsets) {
  tokenizers::PlaceSink sink;
  sink.trim = p.post.trim_offsets;
  sink.prefix = p.post.add_prefix_space;
  if (placed)
    sink.places = &places;
  else
    sink.offsets = &offsets, sink.first = offsets.size();
  return sink;
}

// The places' offsets appended to `out`, as the post-processor trims them (the first place its sequence's first).
void append_offsets(const Pipeline& p, const tokenizers::TokenPlaces& places, std::vector<TokenOffsets>& out) {
  out.reserve(out.size() + places.size());
  for (std::size_t i = 0; i < places.size(); ++i)
    out.push_back(p.post.trim_offsets ? tokenizers::trimmed_offsets(places[i], i == 0, p.post.add_prefix_space)
                                      : TokenOffsets{places[i].chars.begin, places[i].chars.end});
}

void tokenize(const Pipeline& p, std::string_view text, bool placed, Sequence& s) {
  s.ids.clear();
  s.places.clear();
  s.offsets.clear();
  s.placed = placed;
  tokenizers::PlaceSink sink = sink_of(p, placed, s.places, s.offsets);
  p.tokens(text, s.ids, &sink);
}

void keep(Sequence& s, std::size_t n, bool left) {
  tokenizers::cut(s.ids, n, left);
  tokenizers::cut(s.places, n, left);
  tokenizers::cut(s.offsets, n, left);
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
  for (const std::int32_t id : piece.ids) {  // one or two: pushed, not inserted (a call each)
    e.ids.push_back(id);
    e.type_ids.push_back(piece.type_id);
    e.offsets.push_back(TokenOffsets{});
    e.special.push_back(1);
    e.sequence.push_back(-1);
  }
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
    if (s.placed)
      append_offsets(p, s.places, e.offsets);
    else
      e.offsets.insert(e.offsets.end(), s.offsets.begin(), s.offsets.end());
    e.special.insert(e.special.end(), s.ids.size(), 0);
    e.sequence.insert(e.sequence.end(), s.ids.size(), static_cast<std::int8_t>(piece.sequence));
  }
}

}  // namespace

void byte_offsets_into(std::string_view text, const std::vector<TokenOffsets>& offsets,
                       std::vector<TokenOffsets>& out) {
  thread_local std::vector<std::size_t> starts;  // the first byte of each code point, then the text's size
  tokenizers::utf8_starts(text, starts);
  const std::size_t points = starts.size() - 1;
  out.clear();
  out.reserve(offsets.size());
  for (const TokenOffsets& o : offsets)
    out.push_back({starts[std::min(o.start, points)], starts[std::min(o.end, points)]});
}

std::vector<TokenOffsets> byte_offsets(std::string_view text, const std::vector<TokenOffsets>& offsets) {
  std::vector<TokenOffsets> out;
  byte_offsets_into(text, offsets, out);
  return out;
}

// The single template holds sequence A once: its ids go straight into the Encoding, between the special
// tokens before and after it, as encode_into does, and its offsets too unless they must wait for truncation.
void Tokenizer::encode_with_offsets_into(std::string_view text, std::size_t max_length, Encoding& e) const {
  const Pipeline& p = *pipeline_;
  thread_local tokenizers::TokenPlaces places;  // this thread's, reused
  clear(e);
  const std::size_t added = p.post.added(false);
  const bool placed = trim_after_cut(p, max_length);
  for (const tokenizers::TemplatePiece& piece : p.post.single) {
    if (!piece.is_sequence) {
      append_special(piece, e);
      continue;
    }
    const std::size_t start = e.ids.size();
    places.clear();
    tokenizers::PlaceSink sink = sink_of(p, placed, places, e.offsets);
    p.tokens(text, e.ids, &sink);
    if (max_length != 0) {
      const std::size_t n = max_length > added ? max_length - added : 0;
      if (e.ids.size() - start > n) {
        const auto drop = static_cast<std::ptrdiff_t>(e.ids.size() - start - n);
        if (p.truncate_left) {
          e.ids.erase(e.ids.begin() + static_cast<std::ptrdiff_t>(start),
                      e.ids.begin() + static_cast<std::ptrdiff_t>(start) + drop);
          if (!placed)
            e.offsets.erase(e.offsets.begin() + static_cast<std::ptrdiff_t>(start),
                            e.offsets.begin() + static_cast<std::ptrdiff_t>(start) + drop);
        }
        e.ids.resize(start + n);
        if (!placed) e.offsets.resize(start + n);
        tokenizers::cut(places, n, p.truncate_left);
      }
    }
    // Grown at the end (insert's general case, a call, costs more); zeros by resize(n) alone, a memset (with the
    // value given, a loop a token).
    const std::size_t n = e.ids.size() - start;
    if (piece.type_id == 0)
      e.type_ids.resize(e.type_ids.size() + n);
    else
      e.type_ids.resize(e.type_ids.size() + n, piece.type_id);
    if (placed) append_offsets(p, places, e.offsets);
    e.special.resize(e.special.size() + n);
    e.sequence.resize(e.sequence.size() + n);
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
  const bool placed = trim_after_cut(p, max_length);
  tokenize(p, first, placed, a);
  tokenize(p, second, placed, b);
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
