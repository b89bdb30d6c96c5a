// The pipeline's run over one text (pipeline.hpp): added tokens split out of the raw text, each stretch between
// them normalized, the normalized added tokens split out of it, each piece left pre-tokenized and cut by the
// model; with offsets asked for, each token's place in the input beside its id.
#include "pipeline.hpp"
#include "unicode.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace flowline::models::tokenizers {

namespace {

std::size_t utf8_length_at(std::string_view text, std::size_t at) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const std::size_t n = lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : 4;
  return std::min(n, text.size() - at);
}

char32_t code_point_at(std::string_view text, std::size_t at) {
  std::u32string one;
  decode_utf8(text.substr(at, utf8_length_at(text, at)), one);
  return one.empty() ? U'\uFFFD' : one[0];
}

// Walking a text by code points, in UTF-8 (the raw text) or in code points (normalized text).
char32_t point_at(std::string_view text, std::size_t at) { return code_point_at(text, at); }
char32_t point_at(std::u32string_view text, std::size_t at) { return text[at]; }
std::size_t point_length(std::string_view text, std::size_t at) { return utf8_length_at(text, at); }
std::size_t point_length(std::u32string_view, std::size_t) { return 1; }
std::size_t point_before(std::string_view text, std::size_t at) {
  std::size_t lead = at - 1;
  while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
  return lead;
}
std::size_t point_before(std::u32string_view, std::size_t at) { return at - 1; }
std::size_t low_byte(char c) { return static_cast<unsigned char>(c); }
std::size_t low_byte(char32_t c) { return c & 0xFF; }

// Splits `text` on the added tokens of `m` as tokenizers' AddedVocabulary does (find_matches): the
// leftmost match, the longest there, and the search goes on after it, also after a match that single_word
// rejects (a word character just before or after it); lstrip and rstrip take the whitespace before and
// after along (not whitespace that an earlier token took). Appends each token's id to `ids`, calls
// token(begin, end) with the text it takes, and piece(begin, end) for the text between tokens.
template <class Char, class Token, class Piece>
void split_added(std::basic_string_view<Char> text, const AddedMatcher<Char>& m, std::vector<std::int32_t>& ids,
                 Token&& token, Piece&& piece) {
  std::size_t taken = 0;  // where the last token taken ends, with its whitespace
  for (std::size_t i = 0; i < text.size();) {
    const auto* entry = m.first[low_byte(text[i])] ? m.longest_at(text, i) : nullptr;
    if (entry == nullptr) {
      ++i;
      continue;
    }
    const AddedToken* match = &entry->token;
    const std::size_t length = entry->content.size();
    std::size_t start = i, stop = i + length;
    i = stop;
    if (match->single_word && ((start > 0 && is_word_char(point_at(text, point_before(text, start)))) ||
                               (stop < text.size() && is_word_char(point_at(text, stop)))))
      continue;
    if (match->lstrip) {
      std::size_t left = start;
      while (left > 0 && is_whitespace(point_at(text, point_before(text, left)))) left = point_before(text, left);
      start = std::max(left, taken);
    }
    if (match->rstrip)
      while (stop < text.size() && is_whitespace(point_at(text, stop))) stop += point_length(text, stop);
    if (start > taken) piece(taken, start);
    ids.push_back(match->id);
    token(start, stop);
    taken = stop;
  }
  if (text.size() > taken) piece(taken, text.size());
}

// The whitespace (tokenizers' char::is_whitespace, and ByteLevel's 'Ġ') a token's text starts and ends with,
// for trim_offsets; counted each way over the whole text, as tokenizers counts them (a token all spaces
// has both). Once per token with offsets: ASCII and 'Ġ' are decided inline, and the common token (a letter
// first and last, or 'Ġ' then a letter) costs two or three comparisons.
inline bool trim_space(char32_t c) {
  return c < 0x80 ? c == ' ' || (c >= 0x09 && c <= 0x0D) : c == U'\u0120' || is_whitespace(c);
}
inline void count_trimmed(const char32_t* text, std::size_t size, TokenPlace& place) {
  std::size_t i = 0, j = size;
  while (i < j && trim_space(text[i])) ++i;
  while (j > 0 && trim_space(text[j - 1])) --j;
  place.lead = static_cast<std::uint32_t>(i);
  place.trail = static_cast<std::uint32_t>(size - j);
}
TokenPlace trimmed(Align chars, std::u32string_view text) {
  TokenPlace place{chars};
  count_trimmed(text.data(), text.size(), place);
  return place;
}

// Out of line and cold, so that the check costs the hot path one comparison.
[[noreturn, gnu::noinline, gnu::cold]] void refuse_text_bytes(const std::string& file, std::size_t bytes) {
  throw Error(fmt::format("tokenizer '{}': the text is refused: {} bytes, over the bound of {} bytes per text", file,
                          bytes, kMaxTextBytes));
}

Align join(const Places& align, std::size_t begin, std::size_t end) { return {align[begin].begin, align[end - 1].end}; }

}  // namespace

// Added tokens with normalized: false are matched in the raw text; each stretch between them is normalized,
// then those with normalized: true are matched in it (tokenizers' extract_and_normalize).
// Places count code points of the text: `chars` is how many lie before the stretch or token at hand (the
// callbacks come in the text's order, back to back).
void Normalizer::refuse_normalized(const Scratch& s, std::size_t made) const {
  refuse(origin,
         fmt::format("the text is refused: normalizing makes more than {} code points of a stretch of {} "
                     "(the bound: {} per code point plus {}, at most {}); {} so far",
                     s.max_chars, s.stretch_chars, kNormalizedPerChar, kNormalizedFloor, kMaxNormalizedChars, made));
}

void Pipeline::tokens(std::string_view text, std::vector<std::int32_t>& ids, PlaceSink* places) const {
  if (text.size() > kMaxTextBytes) refuse_text_bytes(file, text.size());
  Scratch& s = scratch();
  s.track = places != nullptr;
  std::size_t chars = 0;
  split_added(
      text, raw_added, ids,
      [&](std::size_t begin, std::size_t end) {
        if (places == nullptr) return;
        decode_utf8(text.substr(begin, end - begin), s.other);
        const Align here{static_cast<std::uint32_t>(chars), static_cast<std::uint32_t>(chars + s.other.size())};
        places->push_back(trimmed(here, std::u32string_view(s.other)));
        chars += s.other.size();
      },
      [&](std::size_t begin, std::size_t end) {
        tokens_of_stretch(text, begin, end, chars, ids, places);
        chars += s.stretch_chars;
      });
}

void Pipeline::tokens_of_stretch(std::string_view text, std::size_t begin, std::size_t end, std::size_t chars,
                                 std::vector<std::int32_t>& ids, PlaceSink* places) const {
  Scratch& s = scratch();
  const std::string_view stretch = text.substr(begin, end - begin);
  decode_utf8(stretch, s.text);
  s.identity = s.deferred = s.track;  // the places decode_utf8 would give, written once a step reads them
  s.base = static_cast<std::uint32_t>(chars);
  s.identity_chars = s.text.size();
  s.shifts.clear();
  s.stretch_chars = s.text.size();
  s.head = begin == 0 && !s.text.empty() ? 1 : 0;
  s.max_chars = normalized_bound(s.stretch_chars);
  for (const auto& n : normalizers) {
    if (s.identity && !n->keeps_places()) end_identity(s);
    n->normalize(s);
    n->past_bound(s, s.text.size());
  }
  if (norm_added.entries.empty()) {
    s.origin = s.head;
    tokens_of_piece(s, ids, places);
    return;
  }
  if (s.track) end_identity(s);  // the pieces' places are cut from the stretch's
  s.normalized.swap(s.text);
  s.normalized_align.swap(s.align);
  const std::u32string_view normalized = s.normalized;
  const std::size_t head = s.head;
  split_added(
      normalized, norm_added, ids,
      [&](std::size_t from, std::size_t to) {
        if (places != nullptr)
          places->push_back(trimmed(join(s.normalized_align, from, to), normalized.substr(from, to - from)));
      },
      [&](std::size_t from, std::size_t to) {
        s.text.assign(normalized.substr(from, to - from));
        if (s.track)
          s.align.assign(s.normalized_align.begin() + static_cast<std::ptrdiff_t>(from),
                         s.normalized_align.begin() + static_cast<std::ptrdiff_t>(to));
        s.origin = head > from ? head - from : 0;
        tokens_of_piece(s, ids, places);
      });
}

void Pipeline::tokens_of_piece(Scratch& s, std::vector<std::int32_t>& ids, PlaceSink* places) const {
  s.words.assign(1, Span{0, s.text.size()});
  if (s.text.empty()) s.words.clear();
  const bool shaped = places != nullptr && !model->shapes.empty();
  // Places left unwritten (Scratch::identity) only as far as ids placed from their shapes, through pre-tokenizers
  // that keep the text but for the last (ByteLevel and Metaspace as the last leave s.align as it is).
  bool unwritten = shaped;
  for (std::size_t i = 0; i + 1 < pre_tokenizers.size(); ++i) unwritten = unwritten && pre_tokenizers[i]->keeps_text();
  if (s.identity && !unwritten) end_identity(s);
  s.bytes_lazy = false;
  for (std::size_t i = 0; i < pre_tokenizers.size(); ++i) {
    s.bytes_later = shaped && i + 1 == pre_tokenizers.size();
    pre_tokenizers[i]->pre_tokenize(s);
  }
  s.bytes_later = false;
  if (!shaped) {
    s.cut_places = places != nullptr;
    s.pieces.clear();
    for (const Span word : s.words)
      if (word.end > word.begin) model->tokenize(s, word, ids);
    s.cut_places = false;
    if (places != nullptr) append_places(s, WordPlaces{s.align.data()}, places);
    return;
  }
  // With shapes: the words cut first, as without offsets (the ids-only word cache, nothing else between the
  // look-ups), then each id's place read from its shape, one after the other from its word's start; a word whose
  // ids' shapes do not say it (chars 0, or not summing to the word) is cut again with places (the same ids).
  const std::size_t ids_begin = ids.size();
  s.word_ids.resize(s.words.size());  // written by index (a push a word cost more); the model leaves both as they are
  std::uint32_t* const word_ids = s.word_ids.data();
  const Span* const words = s.words.data();
  for (std::size_t w = 0, count = s.words.size(); w < count; ++w) {
    if (words[w].end > words[w].begin) model->tokenize(s, words[w], ids);
    word_ids[w] = static_cast<std::uint32_t>(ids.size() - ids_begin);
  }
  if (places->places == nullptr)
    s.bytes_lazy ? place_offsets<true>(s, ids.data() + ids_begin, *places)
                 : place_offsets<false>(s, ids.data() + ids_begin, *places);
  else
    s.bytes_lazy ? keep_places<true>(s, ids.data() + ids_begin, *places)
                 : keep_places<false>(s, ids.data() + ids_begin, *places);
}

namespace {

// Whether the shapes of a word's ids [first, last) add up to it (else: it is cut again with places). place(k, j,
// shape) is called for each id k, in order, j its first character in s.text, until one does not fit.
template <class Place>
bool shaped_word(const PieceShape* shapes, std::size_t known, const std::int32_t* ids, std::size_t first,
                 std::size_t last, Span word, Place&& place) {
  std::size_t at = word.begin;
  for (std::size_t k = first; k < last; ++k) {
    const auto id = static_cast<std::uint32_t>(ids[k]);
    const PieceShape shape = id < known ? shapes[id] : PieceShape{};
    if (shape.chars == 0 || at + shape.chars > word.end) return false;
    place(k, at, shape);
    at += shape.chars;
  }
  return at == word.end;
}

// Where a word's characters' places are one a character: character j of s.text in the place places[j + distance].
// own: a lazy word not prefixed, one character a byte (s.align at its source, unwritten while Scratch::identity), or
// any word where the places are not lazy (s.align); bytes: a lazy word of several bytes a character
// (s.other_align, written for it); prefixed: a prefixed lazy word, none (WordPlaces or IdentityPlaces).
struct OneEach {
  enum Kind : std::uint8_t { prefixed, own, bytes };
  const Align* places;
  std::ptrdiff_t distance;
  Kind kind;
  const Align& operator[](std::size_t j) const {
    return places[static_cast<std::size_t>(static_cast<std::ptrdiff_t>(j) + distance)];
  }
};

template <bool Lazy>
[[gnu::always_inline]] inline OneEach one_each(const Scratch& s, std::size_t w) {  // a call a word cost 2%
  if constexpr (!Lazy) return OneEach{s.align.data(), 0, OneEach::own};
  const Scratch::WordSource source = s.sources[w];
  if (!source.ascii) return OneEach{s.other_align.data(), 0, OneEach::bytes};
  if (source.shifted) return OneEach{nullptr, 0, OneEach::prefixed};
  return OneEach{s.align.data(), source.distance, OneEach::own};
}

// A lazy word's places while Scratch::identity (own or prefixed, OneEach), written or not: character j of s.text in
// the place base + j, but in a prefixed word (its prefix space at `begin`) each character after the prefix space in
// the place of the one before it (the prefix space in that of the word's first).
struct IdentityPlaces {
  std::size_t base;
  std::size_t begin;
  bool shifted;
  Align operator[](std::size_t j) const {
    const auto at = static_cast<std::uint32_t>(base + j - static_cast<std::size_t>(shifted & (j > begin)));
    return Align{at, at + 1};
  }
};
IdentityPlaces identity_places(const Scratch& s, std::size_t w) {
  const Scratch::WordSource source = s.sources[w];  // modulo 2^64: the place is right
  return IdentityPlaces{s.base + source.shift + static_cast<std::size_t>(source.distance), s.words[w].begin,
                        source.shifted != 0};
}

// Writes the offsets of a piece's ids (`out[k]` for the k-th, `ids[k]` its id) from their shapes.
struct OffsetWriter {
  TokenOffsets* out;
  const TokenOffsets* sequence_first;  // its sequence's first token (trim_offsets keeps its prefix space)
  const std::int32_t* ids;
  const PieceShape* shapes;
  std::size_t known;
  bool trim, prefix;

  PieceShape shape_of(std::size_t k) const {
    const auto id = static_cast<std::uint32_t>(ids[k]);
    return id < known ? shapes[id] : PieceShape{};
  }
  void write(std::size_t k, Align chars, std::uint32_t lead, std::uint32_t trail) const {
    out[k] = trim ? trimmed_offsets(TokenPlace{chars, lead, trail}, out + k == sequence_first, prefix)
                  : TokenOffsets{chars.begin, chars.end};
  }
  // A run: the ids [first, last) of words back to back from character j to `end` of s.text, one place a character
  // at `at`. Their offsets follow one after the other, with no test per word (how many ids a word has was a
  // mispredicted branch a word). Whether the shapes add up to the run (else its words are placed one by one).
  bool run(const OneEach& at, std::size_t j, std::size_t end, std::size_t first, std::size_t last) const {
    bool fits = true;
    for (std::size_t k = first; k < last; ++k) {
      const PieceShape shape = shape_of(k);
      fits &= (shape.chars != 0) & (j + shape.chars <= end);
      const std::size_t past = std::min(j + std::max<std::size_t>(shape.chars, 1), end);  // in the run, whatever
      write(k, Align{at[std::min(j, end - 1)].begin, at[past - 1].end}, shape.lead, shape.trail);
      j += shape.chars;
    }
    return fits && j == end;
  }
  // The same where character j's place is base + j (Scratch::identity): each id's offsets from its shape alone, no
  // place read; with trim_offsets, the sequence's first token (which keeps a prefix space) written again as such.
  // The shapes add up to the run only if every id has one: one without (chars 0) covers a character at least.
  bool run_identity(std::size_t base, std::size_t j, std::size_t end, std::size_t first, std::size_t last) const {
    const std::size_t start = j;
    if (trim) {
      for (std::size_t k = first; k < last; ++k) {
        const PieceShape shape = shape_of(k);
        out[k] = TokenOffsets{base + j + shape.lead, base + j + shape.trimmed_end};
        j += shape.chars;
      }
      if (out + first == sequence_first || base + start == 0) {
        const PieceShape shape = shape_of(first);
        write(first,
              Align{static_cast<std::uint32_t>(base + start), static_cast<std::uint32_t>(base + start + shape.chars)},
              shape.lead, shape.trail);
      }
    } else {
      for (std::size_t k = first; k < last; ++k) {
        const PieceShape shape = shape_of(k);
        out[k] = TokenOffsets{base + j, base + j + shape.chars};
        j += shape.chars;
      }
    }
    return j == end;
  }
  // One word's ids [first, last), its places `place` (OneEach or WordPlaces); whether their shapes add up to it.
  template <class Places>
  bool word(const Places& place, Span word, std::size_t first, std::size_t last) const {
    return shaped_word(shapes, known, ids, first, last, word, [&](std::size_t k, std::size_t j, PieceShape shape) {
      write(k, Align{place[j].begin, place[j + shape.chars - 1].end}, shape.lead, shape.trail);
    });
  }
};

}  // namespace

// The offsets of s.words' ids (`ids`, s.word_ids) written straight into the sink's vector, sized for them once:
// runs of words at once where it can, else word by word, else cut again with places.
// Lazy: the places are ByteLevel's or Metaspace's lazy ones (Scratch::bytes_lazy).
template <bool Lazy>
void Pipeline::place_offsets(Scratch& s, const std::int32_t* ids, PlaceSink& sink) const {
  if (!Lazy) write_places(s);  // read as they are
  std::vector<TokenOffsets>& offsets = *sink.offsets;
  const std::size_t before = offsets.size();
  offsets.resize(before + (s.word_ids.empty() ? 0 : s.word_ids.back()));
  const OffsetWriter writer{offsets.data() + before, offsets.data() + sink.first, ids,        model->shapes.data(),
                            model->shapes.size(),    post.trim_offsets,           sink.prefix};
  const Span* const words = s.words.data();
  const std::uint32_t* const word_ids = s.word_ids.data();
  const std::size_t count = s.words.size();
  // Whether each character's place is its index plus a run's distance (own words): decode_utf8's places, moved by
  // no normalizer and rewritten by nothing but the lazy last pre-tokenizer (Scratch::identity).
  const bool identity = Lazy && s.identity;
  // The end of the run from word w: lazy words lie back to back (Scratch::WordSource), those of one source side by
  // side are a run; others must be back to back.
  const auto run_from = [&](std::size_t w, const OneEach& run) {
    std::size_t v = w;
    if constexpr (Lazy) {
      const Scratch::WordSource* const sources = s.sources.data();
      if (run.kind != OneEach::prefixed)
        while (v < count && sources[v] == sources[w]) ++v;
    } else {
      while (v < count && words[v].end > words[v].begin && (v == w || words[v].begin == words[v - 1].end)) ++v;
    }
    return v;
  };
  std::size_t alone_until = 0;  // the words of a run whose shapes did not add up
  std::size_t first = 0;
  for (std::size_t w = 0; w < count; first = word_ids[w++]) {
    if (w >= alone_until) {
      const OneEach run = one_each<Lazy>(s, w);
      const std::size_t run_end = run_from(w, run);
      if (run_end > w + 1) {
        const std::size_t j = words[w].begin, end = words[run_end - 1].end, last = word_ids[run_end - 1];
        if (identity && run.kind == OneEach::own
                ? writer.run_identity(s.base + s.sources[w].shift + static_cast<std::size_t>(run.distance), j, end,
                                      first, last)
                : writer.run(run, j, end, first, last)) {
          first = last;
          w = run_end - 1;
          continue;
        }
      }
      alone_until = run_end;
    }
    const Span word = words[w];
    const std::size_t last = word_ids[w];
    if (last == first) continue;
    const OneEach at = one_each<Lazy>(s, w);
    if (identity && at.kind != OneEach::bytes) {
      if (writer.word(identity_places(s, w), word, first, last)) continue;
    } else if (at.kind != OneEach::prefixed && writer.word(at, word, first, last)) {
      continue;
    }
    // A prefixed word (its places through WordPlaces), or one cut again with places.
    write_places(s);
    WordPlaces place{s.align.data(), s.other_align.data()};
    if constexpr (Lazy) place.lazy = true, place.source = s.sources[w], place.begin = word.begin;
    if (!identity && at.kind == OneEach::prefixed && writer.word(place, word, first, last)) continue;
    recut(s, word);
    for (std::size_t i = 0; i < std::min(s.pieces.size(), last - first); ++i) {  // as many (the same ids)
      const Span piece = s.pieces[i];
      TokenPlace token{{place[piece.begin].begin, place[piece.end - 1].end}, 0, 0};
      if (writer.trim) count_trimmed(s.text.data() + piece.begin, piece.end - piece.begin, token);
      writer.write(first + i, token.chars, token.lead, token.trail);
    }
  }
}

// The same into the sink's places (kept for truncation from the left), one word at a time.
template <bool Lazy>
void Pipeline::keep_places(Scratch& s, const std::int32_t* ids, PlaceSink& sink) const {
  write_places(s);  // read as they are
  const PieceShape* const shapes = model->shapes.data();
  const std::size_t known = model->shapes.size();
  WordPlaces place{s.align.data(), s.other_align.data()};
  place.lazy = Lazy;
  std::size_t first = 0;
  for (std::size_t w = 0; w < s.words.size(); first = s.word_ids[w++]) {
    const Span word = s.words[w];
    const std::size_t last = s.word_ids[w];
    if (last == first) continue;
    if constexpr (Lazy) place.source = s.sources[w], place.begin = word.begin;
    const std::size_t first_place = sink.size();
    if (shaped_word(shapes, known, ids, first, last, word, [&](std::size_t, std::size_t j, const PieceShape& shape) {
          sink.push_back(TokenPlace{{place[j].begin, place[j + shape.chars - 1].end}, shape.lead, shape.trail});
        }))
      continue;
    sink.resize(first_place);
    recut(s, word);
    append_places(s, place, &sink);
  }
}

// s.pieces: the code points of each id of `word`, cut again with places (the ids are the same).
void Pipeline::recut(Scratch& s, Span word) const {
  s.recut.clear();
  s.pieces.clear();
  s.cut_places = true;
  model->tokenize(s, word, s.recut);
  s.cut_places = false;
}

// Each of s.pieces' places, with its spaces where the post-processor trims offsets; offsets written straight into the
// sink's vector, sized for them once, where it takes offsets (not a call a token).
void Pipeline::append_places(Scratch& s, const WordPlaces& at, PlaceSink* places) const {
  const char32_t* const text = s.text.data();
  const bool trim = post.trim_offsets;
  if (places->places != nullptr) {
    for (const Span piece : s.pieces) {
      TokenPlace place{{at[piece.begin].begin, at[piece.end - 1].end}, 0, 0};
      if (trim) count_trimmed(text + piece.begin, piece.end - piece.begin, place);
      places->push_back(place);
    }
    return;
  }
  std::vector<TokenOffsets>& offsets = *places->offsets;
  const std::size_t before = offsets.size();
  offsets.resize(before + s.pieces.size());
  TokenOffsets* const out = offsets.data() + before;
  const TokenOffsets* const sequence_first = offsets.data() + places->first;
  for (std::size_t i = 0; i < s.pieces.size(); ++i) {
    const Span piece = s.pieces[i];
    TokenPlace place{{at[piece.begin].begin, at[piece.end - 1].end}, 0, 0};
    if (!trim) {
      out[i] = TokenOffsets{place.chars.begin, place.chars.end};
      continue;
    }
    count_trimmed(text + piece.begin, piece.end - piece.begin, place);
    out[i] = trimmed_offsets(place, out + i == sequence_first, places->prefix);
  }
}

PieceShape piece_shape(std::string_view token, std::size_t skip) {
  std::u32string text;
  decode_utf8(token, text);
  if (skip > text.size() || text.size() - skip > 255) return {};
  TokenPlace place{};
  count_trimmed(text.data() + skip, text.size() - skip, place);
  const std::size_t chars = text.size() - skip;
  return PieceShape{static_cast<std::uint8_t>(chars), static_cast<std::uint8_t>(place.lead),
                    static_cast<std::uint8_t>(place.trail),
                    static_cast<std::uint8_t>(std::max<std::size_t>(chars - place.trail, place.lead))};
}

void set_shape(std::vector<PieceShape>& shapes, std::int32_t id, PieceShape shape) {
  if (id < 0) return;
  constexpr PieceShape kNone{0, 0xFF, 0, 0};  // no shape, whatever is set later (unset cells are all zeros)
  const auto i = static_cast<std::size_t>(id);
  if (i >= shapes.size()) shapes.resize(i + 1);
  PieceShape& old = shapes[i];
  const bool none = old.chars == 0 && old.lead == kNone.lead;
  const bool differs =
      old.chars != 0 && (old.chars != shape.chars || old.lead != shape.lead || old.trail != shape.trail);
  old = none || differs || shape.chars == 0 ? kNone : shape;
}

std::size_t Pipeline::frame(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>* b,
                            std::vector<std::int32_t>& ids, std::vector<std::int32_t>* type_ids) const {
  const std::size_t before = ids.size();
  for (const TemplatePiece& piece : b == nullptr ? post.single : post.pair) {
    const std::vector<std::int32_t>& part = !piece.is_sequence ? piece.ids : piece.sequence == 0 ? a : *b;
    ids.insert(ids.end(), part.begin(), part.end());
    if (type_ids != nullptr) type_ids->insert(type_ids->end(), part.size(), piece.type_id);
  }
  return ids.size() - before;
}

std::string Pipeline::describe() const {
  std::vector<std::string> parts;
  for (const auto& n : normalizers) parts.push_back(n->name());
  for (const auto& p : pre_tokenizers) parts.push_back(p->name());
  parts.push_back(post.name);
  return fmt::format("{} ({})", model->name(), fmt::join(parts, ", "));
}

}  // namespace flowline::models::tokenizers
