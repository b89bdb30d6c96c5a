// The tokenizer's pipeline, private to flowline::tokenizers: added tokens are split out of the raw text,
// each remaining stretch is normalized, the added tokens matched in normalized text are split out of it,
// and each piece left is pre-tokenized into words and cut into ids by the model; then the post-processor
// frames the sequences with special tokens. Each step is a small class behind its own
// interface, built from its tokenizer.json object by a table (components.cpp: type name -> builder), so a
// new component is one class and one table line. Components are immutable after construction and
// called from many threads at once; the working buffers live in a thread_local Scratch.
#pragma once

#include "flowline/models/tokenizer.hpp"

#include <boost/json.hpp>

#include <cstddef>
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flowline::models::tokenizers {

// A word: [begin, end) in the normalized text's code points.
struct Span {
  std::size_t begin = 0;
  std::size_t end = 0;
};

// A code point's place in the input: the code points [begin, end) of the text given to encode that it comes
// from (tokenizers' alignments, which count bytes, converted as its char offsets are: the same at character
// boundaries, where every place starts and ends). A character a normalizer inserts takes the place of the one it
// follows (of the one it replaces first when it starts the text), a decomposition's characters all take the place of
// the one decomposed, a removed character leaves no place. A trivial type (no member initializers: Align{} is
// zero), so that copying a text's places is one memmove, not a loop of constructors.
struct Align {
  std::uint32_t begin;
  std::uint32_t end;
};

// An allocator whose vectors leave a trivial element uninitialized where they grow (std::allocator's
// value-initialize it: a pass of zeros before the places are written over them, each text).
template <class T>
struct Uninitialized : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = Uninitialized<U>;
  };
  Uninitialized() = default;
  template <class U>
  Uninitialized(const Uninitialized<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// A text's places, one per code point.
using Places = std::vector<Align, Uninitialized<Align>>;

// One thread's working buffers, reused call after call.
struct Scratch {
  std::u32string text;        // the stretch (then the piece) being tokenized, code points
  std::u32string other;       // a normalizer's output before it is swapped into `text`
  std::u32string normalized;  // the normalized stretch while its pieces are tokenized one by one
  // Offsets into the original text, as far as Metaspace's prepend scheme "first" needs them. head: how many
  // code points at the start of `text` tokenizers' alignments put at offset 0 of the original text (none
  // in a stretch after an added token; each normalizer carries it over: one that drops the first character
  // leaves none, NFKC's "⑴" -> "(1)" or BERT's CJK padding make several). origin: the same for the piece
  // being pre-tokenized.
  std::size_t head = 0;
  std::size_t origin = 0;
  std::vector<Span> words, other_words;
  std::string utf8;                         // a word in UTF-8, for vocabulary look-ups
  std::vector<std::int32_t> first, second;  // a pair's two sequences before truncation
  // Unigram's Viterbi over a word's characters: the best path's score and the trie unit of its last piece
  // at each character.
  std::vector<double> best_score;
  std::vector<std::int32_t> best_unit;
  std::vector<std::uint32_t> labels;  // the word's characters as Unigram's trie labels, then 0
  // Offsets, only while `track` (an encode that reports them): `align` holds the place of each code point of
  // `text` and every step that rewrites `text` rewrites it alike (`other_align` beside `other`,
  // `normalized_align` beside `normalized`). While `cut_places` (a word whose ids' shapes cannot say where each
  // id lies: Model::shapes), a model appends, for each id, the code points of `text` it covers to `pieces`.
  bool track = false;
  bool cut_places = false;
  // ByteLevel or Metaspace as the last pre-tokenizer, with offsets and a model with shapes (`bytes_later`, set for
  // it): it leaves `align` the text's before it, says in `sources` (one per word) where each word's characters
  // came from, and (ByteLevel) writes `other_align` only for a word whose characters are not one a byte
  // (`bytes_lazy` once it has): most text then has no places per byte. WordPlaces reads them. Its words lie back to
  // back in `text`, so that words of one source side by side are a run (Pipeline::place_offsets).
  // Eight bytes, compared as one (a word's test for a run).
  struct WordSource {
    std::int32_t distance;      // character j of the word in the place align[j + distance] (ascii; else 0)
    std::uint32_t shift : 30;   // while `identity`: the place of align[i] is base + i + shift (Metaspace; else 0;
                                // less than the normalized text's bound of 2^24 code points)
    std::uint32_t shifted : 1;  // it starts with the prefix space, in the place of the character after it: the
                                // characters after it at align[j + distance - 1] (ascii; else 0)
    std::uint32_t ascii : 1;    // one character a byte; else its places are in `other_align`
    bool operator==(const WordSource& o) const {
      return std::bit_cast<std::uint64_t>(*this) == std::bit_cast<std::uint64_t>(o);
    }
  };
  bool bytes_later = false, bytes_lazy = false;
  std::vector<WordSource> sources;
  std::size_t stretch_chars = 0;  // the code points of the stretch tokenized last
  // With offsets, while no step has moved a place (`identity`): the places in `align` are decode_utf8's,
  // [base + i, base + i + 1) for the i-th of the stretch's `identity_chars` code points, and until a step reads them
  // they are not written at all (`deferred`: write_places() writes them). A normalizer that leaves the text as it is
  // keeps them so (Precompiled, NFC, a Replace: most text); one that moves a place writes them first and ends
  // `identity` (end_identity()). Where it holds to the model, each id is placed from its shape alone.
  // A Replace of matches by one character each keeps `identity` too (XLM-R's "  " -> " "): each match moves the
  // places after it by what it took less one, kept in `shifts` (place base + i + shift from index `at` on), not
  // written (replaced_places()).
  bool identity = false, deferred = false;
  std::uint32_t base = 0;
  std::size_t identity_chars = 0;
  struct Shift {
    std::uint32_t at, shift;
  };
  std::vector<Shift> shifts;
  Places align, other_align, normalized_align;
  std::vector<Span> pieces;
  // With offsets and a model with shapes: word_ids[w], how many ids s.words[0..w] were cut into (all words are cut
  // before any id is placed: Pipeline::tokens_of_piece); recut, a word's ids cut again with places (Pipeline::recut).
  std::vector<std::uint32_t, Uninitialized<std::uint32_t>> word_ids;
  std::vector<std::int32_t> recut;
  // The most code points normalizing the stretch at hand may make (Pipeline::tokens sets it; normalized_bound()).
  std::size_t max_chars = static_cast<std::size_t>(-1);
};
Scratch& scratch();

// Writes s.align's places if they are still deferred (Scratch::identity): before a step reads them.
void write_identity_places(Scratch& s);  // utf8.cpp
inline void write_places(Scratch& s) {
  if (s.deferred) write_identity_places(s);
}
// Before a step that moves places (or may: one not known to keep them) rewrites s.align.
inline void end_identity(Scratch& s) {
  write_places(s);
  s.identity = false;
}
// The place of code point i of the text s.align is for, written or not (with no Scratch::shifts).
inline Align place_of(const Scratch& s, std::size_t i) {
  if (!s.deferred) return s.align[i];
  const auto at = static_cast<std::uint32_t>(s.base + i);
  return Align{at, at + 1};
}

// The places of one word's characters after the pre-tokenizers (by their index in s.text): s.align's, or where
// ByteLevel left them lazy (Scratch::bytes_lazy) its source's.
struct WordPlaces {
  const Align* align;
  const Align* bytes = nullptr;  // s.other_align: a lazy word's places that are not one a character
  Scratch::WordSource source{0, 0, false, false};
  std::size_t begin = 0;  // the word's first character in s.text
  bool lazy = false;
  Align operator[](std::size_t j) const {
    if (!lazy) return align[j];  // a constant where the caller's loop is made for one case
    if (!source.ascii) return bytes[j];
    const std::size_t moved = j + static_cast<std::size_t>(source.distance);  // modulo 2^64: the index is right
    return align[moved - static_cast<std::size_t>(source.shifted & (j > begin))];
  }
};

// The work bounds per text (Pipeline::tokens refuses a text past them with a flowline::Error naming the limit,
// the file and, for normalizing, the component's JSON path): the bytes of one text, and the code points a
// stretch may have after each normalizer (kNormalizedPerChar per code point it had, plus kNormalizedFloor,
// at most kMaxNormalizedChars). NFKC makes at most 18 of one; a chain of Replace rules can make millions.
// The regex-step bound is regex.hpp's.
inline constexpr std::size_t kMaxTextBytes = std::size_t{8} << 20;
inline constexpr std::size_t kNormalizedPerChar = 32;
inline constexpr std::size_t kNormalizedFloor = 4096;
inline constexpr std::size_t kMaxNormalizedChars = std::size_t{16} << 20;
inline std::size_t normalized_bound(std::size_t chars) {
  return std::min(kNormalizedPerChar * chars + kNormalizedFloor, kMaxNormalizedChars);
}

// Where a component came from in error messages: the file and the JSON path ("normalizer.normalizers[1]").
struct Origin {
  std::string file;
  std::string path;
  std::string at(const std::string& sub) const { return path + sub; }
};
[[noreturn]] void refuse(const Origin& origin, const std::string& what);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites s.text in place (or through s.other) and carries s.head over.
  virtual void normalize(Scratch& s) const = 0;
  virtual std::string name() const = 0;
  // Whether it reads and writes s.align only through replaced_aligned(), replaced_places() and transform_aligned()
  // (which end Scratch::identity or keep it exactly) or keeps each place where it is: text it leaves alone keeps its
  // places unwritten.
  virtual bool keeps_places() const { return false; }
  // Where it came from (add_normalizer sets it), for the bound's error; past_bound() refuses a text whose
  // normalized form in `made` has outgrown s.max_chars.
  Origin origin;
  void past_bound(const Scratch& s, std::size_t made) const {
    if (made > s.max_chars) refuse_normalized(s, made);
  }

 private:
  [[noreturn]] void refuse_normalized(const Scratch& s, std::size_t made) const;  // pipeline.cpp
};

// A Replace normalizer's new s.head: the text it copies from inside the old head, and a replacement whose
// match ends inside it (tokenizers gives a replacement the offsets of the match's last character).
struct HeadCount {
  std::size_t head;
  std::size_t kept = 0;
  void copied(std::size_t from, std::size_t to) {
    if (from < head) kept += std::min(to, head) - from;
  }
  void replaced(std::size_t end, std::size_t content) {
    if (head > 0 && end <= head) kept += content;
  }
};

// Offsets of a Replace (s.track): appends to s.other_align the places of s.text[from, to), copied, then
// `content` places for a replacement of a match ending at `match_end` (tokenizers gives each of its
// characters the place of the match's last one, or of the character before an empty match; at the start,
// an empty place where the text starts).
void replaced_aligned(Scratch& s, std::size_t from, std::size_t to, std::size_t match_end, std::size_t content);
// The places of a Replace of each of `matches` in s.text by `content` characters, s.other the new text (s.track),
// before the two are swapped: as Scratch::shifts where they can be (Scratch::identity, one character a match), else
// written into s.align by replaced_aligned.
void replaced_places(Scratch& s, const std::vector<Span>& matches, std::size_t content);
// Appends `place` to `align` until it is `size` long (a character's pieces, all in one place).
inline void fill_places(Places& align, std::size_t size, Align place) {
  while (align.size() < size) align.push_back(place);
}
// tokenizers' NormalizedString::transform for s.align: s.other holds the new text and changes[i] says what
// its character i does (0: it takes the next old character's place; n > 0: inserted, it takes the place of
// the old character taken last; -n: it takes the next one's place and n more are dropped). Sets s.align to
// the new text's places.
void transform_aligned(Scratch& s, const std::vector<int>& changes);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each of s.words further (the first pre-tokenizer sees one word: the whole text).
  virtual void pre_tokenize(Scratch& s) const = 0;
  virtual std::string name() const = 0;
  // Whether it only splits the words, leaving s.text and s.align as they are (ByteLevel and Metaspace rewrite them).
  virtual bool keeps_text() const { return false; }
};

// Hash for look-ups by string_view without building a string.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocabulary = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// Tokens by id (id_to_token), views into strings that stay in place (a Vocabulary's keys: its nodes never
// move). Dense ids in a vector; an id far past the others (a sparse vocabulary) in a map.
class TokensById {
 public:
  TokensById() = default;
  explicit TokensById(const Vocabulary& vocab) {
    for (const auto& [token, id] : vocab) add(id, token);
  }
  // A later token for the same id replaces the earlier one.
  void add(std::int32_t id, std::string_view token);
  std::string_view operator()(std::int32_t id) const;

 private:
  std::vector<std::string_view> dense_;
  std::unordered_map<std::int32_t, std::string_view> sparse_;
};

// What an id's token covers of a word wherever the model cuts it out (offsets without places kept per id):
// `chars` code points, its text starting with `lead` and ending with `trail` spaces (trim_offsets, counted as
// Pipeline counts them). chars 0: it depends on the word (the unknown token, byte fallback's <0xNN>, a token
// longer than 255 code points, an id two different tokens share): a word with such an id is cut again with
// places (Scratch::cut_places).
struct PieceShape {
  std::uint8_t chars = 0, lead = 0, trail = 0;
  std::uint8_t trimmed_end = 0;  // where trim_offsets ends it, from its start: max(chars - trail, lead)
};
// The shape of a token whose text in the word is `token` (UTF-8) less its first `skip` code points.
PieceShape piece_shape(std::string_view token, std::size_t skip = 0);  // pipeline.cpp
// Sets shapes[id] to `shape`, growing `shapes`; an id given two different shapes gets chars 0.
void set_shape(std::vector<PieceShape>& shapes, std::int32_t id, PieceShape shape);

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one word (text[word.begin, word.end)) to `ids`; with s.cut_places, each id's code points
  // of s.text to s.pieces (an id made of a character's bytes, or of a fused unknown run, covers all of it).
  virtual void tokenize(Scratch& s, Span word, std::vector<std::int32_t>& ids) const = 0;
  virtual std::int32_t token_id(std::string_view token) const = 0;
  // The vocabulary's token of `id` (tokenizers' Model::id_to_token), empty when it has none: a view into the
  // model. continuing_subword_prefix(): what marks a word's later pieces ("##"), empty when nothing does.
  virtual std::string_view id_to_token(std::int32_t id) const = 0;
  virtual std::string_view continuing_subword_prefix() const { return {}; }
  virtual std::int32_t unk_id() const = 0;
  virtual std::size_t size() const = 0;
  virtual std::string name() const = 0;
  // Each id's shape, where the model's tokens are the very code points they cover (BPE without a prefix or
  // suffix, Unigram): with offsets, a word is cut as without (the ids-only word cache) and its ids' places
  // follow from their shapes. Empty: every word is cut with places (s.cut_places).
  std::vector<PieceShape> shapes;
};

// The post-processor as a template: special tokens and the sequences A and B, each with its type id.
struct TemplatePiece {
  bool is_sequence = false;
  int sequence = 0;               // 0: A, 1: B
  std::vector<std::int32_t> ids;  // a special token's ids
  std::int32_t type_id = 0;
};
struct PostProcessor {
  std::string name = "none";
  std::vector<TemplatePiece> single, pair;
  // ByteLevel's (or RobertaProcessing's) trim_offsets: a token's offsets leave out the spaces ('Ġ' or
  // whitespace) it starts or ends with, but the one add_prefix_space put before a sequence's first token.
  bool trim_offsets = false;
  bool add_prefix_space = false;
  std::size_t added(bool for_pair) const;
};

// One of tokenizer.json's added_tokens. normalized: false, matched in the raw text before normalization;
// true, its content normalized is matched in each normalized stretch. lstrip/rstrip: it takes the
// whitespace before/after it along. single_word: a match with a word character (Rust regex's \w) right
// before or after it is no match.
struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// The added tokens matched in one kind of text, longest first: in the raw text (UTF-8 bytes) or in the
// normalized text (code points). first[c]: some token starts with c (a code point's low byte). longest_at()
// finds the longest token at a place: a few tokens compared one by one, more walked in a trie (edges: a node
// and a code unit to the next node; ends: a node's entry, the first of the file's tokens with that content),
// so 100,000 added tokens cost what the longest of them does, not what all of them do. index() builds the trie
// once the entries are sorted.
template <class Char>
struct AddedMatcher {
  struct Entry {
    std::basic_string<Char> content;
    AddedToken token;
  };
  static constexpr std::size_t kCompared = 4;  // up to this many tokens, compared one by one
  std::vector<Entry> entries;
  bool first[256] = {};
  std::unordered_map<std::uint64_t, std::uint32_t> edges;
  std::vector<std::int32_t> ends;

  static std::uint64_t key(std::uint32_t node, Char c) {
    return (std::uint64_t{node} << 32) | static_cast<std::make_unsigned_t<Char>>(c);
  }
  void index() {
    edges.clear();
    ends.assign(1, -1);
    if (entries.size() <= kCompared) return;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      std::uint32_t node = 0;
      for (const Char c : entries[i].content) {
        const auto [it, added] = edges.try_emplace(key(node, c), static_cast<std::uint32_t>(ends.size()));
        if (added) ends.push_back(-1);
        node = it->second;
      }
      if (ends[node] < 0) ends[node] = static_cast<std::int32_t>(i);
    }
  }
  const Entry* longest_at(std::basic_string_view<Char> text, std::size_t i) const {
    if (entries.size() > kCompared) return walk(text, i);
    for (const Entry& e : entries)
      if (text.compare(i, e.content.size(), e.content) == 0) return &e;
    return nullptr;
  }
  // The trie's walk, out of line: the text's scan stays as small as it was before there was a trie.
  [[gnu::noinline]] const Entry* walk(std::basic_string_view<Char> text, std::size_t i) const {
    const Entry* found = nullptr;
    std::uint32_t node = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      const auto it = edges.find(key(node, text[j]));
      if (it == edges.end()) break;
      node = it->second;
      if (ends[node] >= 0) found = &entries[static_cast<std::size_t>(ends[node])];
    }
    return found;
  }
};

// Where a token came from: its code points of the input, and for trim_offsets the spaces its text starts and ends
// with (PostProcessor::trim_offsets).
struct TokenPlace {
  Align chars;
  std::uint32_t lead, trail;
};
using TokenPlaces = std::vector<TokenPlace, Uninitialized<TokenPlace>>;

// A place as Python `tokenizers` reports its offsets (process_offsets): with trim_offsets, past its leading spaces
// (not where add_prefix_space (`prefix`) put the one space before its sequence's `first` token, or any starting at
// 0; not past its end) and before its trailing ones (not before its start). Picked by masks: most of a byte-level
// BPE's tokens start with a space, some do not, and a branch on it was mispredicted often.
inline TokenOffsets trimmed_offsets(const TokenPlace& place, bool first, bool prefix) {
  const std::uint64_t begin = place.chars.begin, end = place.chars.end, lead = place.lead, trail = place.trail;
  const std::uint64_t keep = static_cast<std::uint64_t>(prefix & (lead == 1) & (first | (begin == 0)));
  const std::uint64_t moved = std::min(begin + (lead & (keep - 1)), end);
  const std::uint64_t led = 0 - static_cast<std::uint64_t>(lead != 0);
  const std::uint64_t start = (moved & led) | (begin & ~led);
  const std::uint64_t cut = std::max(end - trail, start);
  const std::uint64_t trailed = 0 - static_cast<std::uint64_t>((trail != 0) & (end >= trail));
  return TokenOffsets{start, (cut & trailed) | (end & ~trailed)};
}

// Where Pipeline::tokens puts each token's place: into `places`, to be made offsets once truncation has picked the
// sequence's first token (trim_offsets with truncation from the left); else straight into `offsets` as
// trimmed_offsets makes them, the first written at `first` being its sequence's first.
struct PlaceSink {
  TokenPlaces* places = nullptr;
  std::vector<TokenOffsets>* offsets = nullptr;
  std::size_t first = 0;
  bool trim = false, prefix = false;
  void push_back(const TokenPlace& place) {
    if (places != nullptr)
      places->push_back(place);
    else
      offsets->push_back(trim ? trimmed_offsets(place, offsets->size() == first, prefix)
                              : TokenOffsets{place.chars.begin, place.chars.end});
  }
  std::size_t size() const { return places != nullptr ? places->size() : offsets->size(); }
  void resize(std::size_t n) { places != nullptr ? places->resize(n) : offsets->resize(n); }
};

// tokenizer.json's decoder: tokens back into text, as tokenizers' Decoder::decode_chain (each decoder rewrites
// the list; Decoder::decode joins what the last one leaves). Immutable once built (decoders.cpp).
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
// The decoder of a tokenizer.json "decoder" object; refuses (refuse()) a type or option it cannot run exactly.
std::unique_ptr<Decoder> make_decoder(const boost::json::object& o, const Origin& origin);  // decoders.cpp

class Pipeline {
 public:
  std::vector<std::unique_ptr<Normalizer>> normalizers;
  std::vector<std::unique_ptr<PreTokenizer>> pre_tokenizers;
  std::unique_ptr<Model> model;
  PostProcessor post;
  std::vector<AddedToken> added;      // in the file's order
  AddedMatcher<char> raw_added;       // those with normalized: false
  AddedMatcher<char32_t> norm_added;  // those with normalized: true, their content normalized
  // id_to_token's added tokens (they win over the model's): the content, or for a normalized one the content
  // normalized where that differs (tokenizers 0.23's simple_id_to_token); a later token for an id wins.
  std::unordered_map<std::int32_t, std::string> added_by_id;
  // The decoder; without one, `decoder_refusal` says why (a type or option flowline does not run: loading
  // goes on for encoding, decoding throws it) or is empty (the file has none).
  std::unique_ptr<Decoder> decoder;
  std::string decoder_refusal;
  std::int32_t pad = -1;
  std::size_t added_vocab = 0;  // added tokens whose ids lie outside the model's vocabulary
  // From the folder's tokenizer_config.json (Tokenizer::from_folder), as transformers reads it:
  bool truncate_left = false;  // truncation_side "left": a sequence loses tokens at its start
  bool type_ids = true;        // model_input_names lists token_type_ids (or the file names none)
  std::string file;            // tokenizer.json (or vocab.txt), for the bounds' errors

  // Appends the ids of `text` without special tokens; with `places`, each id's place too.
  void tokens(std::string_view text, std::vector<std::int32_t>& ids, PlaceSink* places = nullptr) const;
  // The post-processor's frame around one or two sequences; appends ids (and type ids when asked).
  std::size_t frame(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>* b,
                    std::vector<std::int32_t>& ids, std::vector<std::int32_t>* type_ids) const;
  std::string describe() const;

 private:
  // text[begin, end), a stretch between raw added tokens (begin 0: it starts at offset 0 of the text).
  // `chars`: the code points of `text` before the stretch.
  void tokens_of_stretch(std::string_view text, std::size_t begin, std::size_t end, std::size_t chars,
                         std::vector<std::int32_t>& ids, PlaceSink* places) const;
  // s.text, a piece of a normalized stretch without added tokens: pre-tokenized and cut into ids (with `places`,
  // each id's place: from the model's shapes where it has them, else from its cut with places).
  void tokens_of_piece(Scratch& s, std::vector<std::int32_t>& ids, PlaceSink* places) const;
  // Appends the place of each of s.pieces (a model's cut with places) to `places`.
  void append_places(Scratch& s, const WordPlaces& at, PlaceSink* places) const;
  // With shapes, after s.words are cut into `ids` (s.word_ids): each id's offsets into the sink's vector, or its
  // place into the sink's places (PlaceSink). Lazy: s.sources says where the words' characters came from.
  template <bool Lazy>
  void place_offsets(Scratch& s, const std::int32_t* ids, PlaceSink& sink) const;
  template <bool Lazy>
  void keep_places(Scratch& s, const std::int32_t* ids, PlaceSink& sink) const;
  // s.pieces: the code points of each id of `word` (s.recut: its ids, the same again), cut with places.
  void recut(Scratch& s, Span word) const;
};

// Cuts `tokens` to its first `n` (or, from the left, its last `n`).
template <class Vector>
void cut(Vector& tokens, std::size_t n, bool left) {
  if (tokens.size() <= n) return;
  if (left) tokens.erase(tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(n));
  tokens.resize(n);
}

// Truncation 'longest_first' of a pair of sequences of `a` and `b` tokens to `budget` tokens, as tokenizers'
// truncate_encodings does: how many each keeps.
inline std::pair<std::size_t, std::size_t> pair_lengths(std::size_t a, std::size_t b, std::size_t budget) {
  if (a + b <= budget) return {a, b};
  std::size_t n1 = a, n2 = b;
  const bool swap = n1 > n2;
  if (swap) std::swap(n1, n2);
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swap) std::swap(n1, n2);
  return {std::min(n1, a), std::min(n2, b)};
}

// UTF-8 to code points (invalid bytes read as U+FFFD) and back. Their places, with offsets: Scratch::identity.
void decode_utf8(std::string_view in, std::u32string& out);
void encode_utf8(std::u32string_view in, std::string& out);
// The first byte of each code point decode_utf8 reads in `in`, then in.size().
void utf8_starts(std::string_view in, std::vector<std::size_t>& starts);

}  // namespace flowline::models::tokenizers
