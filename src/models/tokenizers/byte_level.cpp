// The pre-tokenizers that cut text with a regular expression -- ByteLevel (GPT-2's pattern, then every
// UTF-8 byte as one of 256 printable characters) and Split (a tokenizer.json pattern and a delimiter
// behaviour) -- and the Replace normalizer with a Regex pattern. Each is immutable once built; the
// per-thread buffers are the Scratch's and this file's thread_local ones.
#include "builders.hpp"
#include "regex.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
#include <utility>
#include <vector>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

// GPT-2's bytes_to_unicode: the printable bytes (! to ~, ¡ to ¬, ® to ÿ) stand for themselves, the other
// 68 bytes for U+0100 onwards, in byte order.
std::array<char32_t, 256> make_byte_chars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 0x100;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    chars[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return chars;
}
const std::array<char32_t, 256> k_byte_chars = make_byte_chars();

// Appends the byte-level form of `piece` to `out`: each byte of its UTF-8 as one character.
void append_byte_level(std::u32string_view piece, std::u32string& out) {
  for (const char32_t c : piece) {
    if (c < 0x80) {
      out.push_back(k_byte_chars[c]);
    } else if (c < 0x800) {
      out.push_back(k_byte_chars[0xC0 | (c >> 6)]);
      out.push_back(k_byte_chars[0x80 | (c & 0x3F)]);
    } else if (c < 0x10000) {
      out.push_back(k_byte_chars[0xE0 | (c >> 12)]);
      out.push_back(k_byte_chars[0x80 | ((c >> 6) & 0x3F)]);
      out.push_back(k_byte_chars[0x80 | (c & 0x3F)]);
    } else {
      out.push_back(k_byte_chars[0xF0 | (c >> 18)]);
      out.push_back(k_byte_chars[0x80 | ((c >> 12) & 0x3F)]);
      out.push_back(k_byte_chars[0x80 | ((c >> 6) & 0x3F)]);
      out.push_back(k_byte_chars[0x80 | (c & 0x3F)]);
    }
  }
}

// ByteLevel: a space before each word that does not start with one (add_prefix_space), GPT-2's pattern
// isolating its pieces (use_regex), then the bytes of each piece as characters. It rewrites the text:
// s.other and s.other_words receive the pieces, then are swapped in.
class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, const Origin& origin)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(k_gpt2_pattern, origin) : nullptr) {}

  // With offsets, each byte's character takes the place of the character it is a byte of, and the prefix
  // space that of the word's first character (tokenizers' prepend).
  // The prefixed word's places are the word's own, shifted by one: emit() reads them through Places, not a copy.
  // Lazy (Scratch::bytes_later), s.align is left as it is, and may be unwritten (Scratch::identity): place_of().
  void pre_tokenize(Scratch& s) const override {
    thread_local std::u32string prefixed;
    s.other.clear();
    s.other_words.clear();
    s.other_align.clear();
    const bool lazy = s.track && s.bytes_later;
    if (s.track && (!lazy || !s.shifts.empty())) end_identity(s);  // the places rewritten beside the text, or read
    s.sources.clear();
    for (const Span word : s.words) {
      std::u32string_view piece = std::u32string_view(s.text).substr(word.begin, word.end - word.begin);
      Places places{s.track ? word.begin : Places::kNone};
      if (add_prefix_space_ && (piece.empty() || piece.front() != U' ')) {
        prefixed.assign(1, U' ');
        prefixed.append(piece);
        piece = prefixed;
        places.shifted = true;
        if (s.track && piece.size() > 1) places.first = place_of(s, word.begin);
      }
      if (!regex_) {
        emit(piece, places, s, lazy);
        continue;
      }
      std::size_t previous = 0;  // Isolated: the matches and what lies between them, each a word
      regex_->for_each_match(piece, [&](std::size_t begin, std::size_t end) {
        if (begin > previous) emit(piece.substr(previous, begin - previous), places.from(previous), s, lazy);
        if (end > begin) emit(piece.substr(begin, end - begin), places.from(begin), s, lazy);
        previous = end;
      });
      if (piece.size() > previous) emit(piece.substr(previous), places.from(previous), s, lazy);
    }
    s.text.swap(s.other);
    s.words.swap(s.other_words);
    if (s.track && !lazy) s.align.swap(s.other_align);
    s.bytes_lazy = lazy;
  }
  std::string name() const override { return "ByteLevel"; }

 private:
  // The places of a piece's characters: those of s.text from index `at` on (kNone: no offsets), or (shifted: the piece
  // starts with the prefix space) the prefix space in the place of the word's first character and each character after
  // it in the place of the one before it in the prefixed word. `first`: the prefix space's (none for an empty word:
  // Align{}).
  struct Places {
    static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
    std::size_t at = kNone;  // kNone: no offsets
    bool shifted = false;
    Align first{};
    Places from(std::size_t i) const {
      if (at == kNone || i == 0) return *this;
      return Places{at + i - (shifted ? 1 : 0), false};
    }
  };

  // `lazy` (Scratch::bytes_later): a piece of one character a byte keeps no places, only its source; another's
  // are written at its characters' indices in s.other_align.
  static void emit(std::u32string_view piece, Places places, Scratch& s, bool lazy) {
    const std::size_t begin = s.other.size();
    if (places.at == Places::kNone) {
      append_byte_level(piece, s.other);
      s.other_words.push_back({begin, s.other.size()});
      return;
    }
    if (lazy) {
      append_byte_level(piece, s.other);
      const std::size_t end = s.other.size();
      if (end - begin == piece.size() && !(places.shifted && piece.size() == 1)) {  // one character a byte
        const auto distance = static_cast<std::int32_t>(places.at) - static_cast<std::int32_t>(begin);
        s.sources.push_back(Scratch::WordSource{distance, 0, places.shifted, true});
        s.other_words.push_back({begin, end});
        return;
      }
      s.sources.push_back(Scratch::WordSource{0, 0, false, false});
      s.other.resize(begin);
      s.other_align.resize(begin);  // grown without zeros (Places' allocator); the lazy words' entries unread
    }
    std::size_t i = 0;  // the piece's characters from here are in the places of places.at[i - shift]
    std::size_t shift = 0;
    if (places.shifted) {  // the prefix space (ASCII)
      s.other.push_back(k_byte_chars[' ']);
      s.other_align.push_back(places.first);
      i = 1, shift = 1;
    }
    const std::u32string_view rest = piece.substr(i);
    const std::size_t rest_begin = s.other.size();
    if (append_byte_level(rest, s.other); s.other.size() - rest_begin == rest.size() && !s.deferred) {
      const Align* const rest_places = s.align.data() + places.at;  // all ASCII: one byte each
      s.other_align.insert(s.other_align.end(), rest_places, rest_places + rest.size());
    } else {
      s.other.resize(rest_begin);
      // An ASCII character is one byte: one character and its place, without the general path's calls.
      for (; i < piece.size(); ++i) {
        if (piece[i] < 0x80) {
          s.other.push_back(k_byte_chars[piece[i]]);
          s.other_align.push_back(place_of(s, places.at + i - shift));
          continue;
        }
        append_byte_level(piece.substr(i, 1), s.other);
        fill_places(s.other_align, s.other.size(), place_of(s, places.at + i - shift));
      }
    }
    s.other_words.push_back({begin, s.other.size()});
  }

  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Split: each word cut at a pattern's matches, the matches kept, dropped or merged as `behavior` says
// (Hugging Face's SplitDelimiterBehavior); invert swaps what counts as a match. The text stays as it is.
class Split final : public PreTokenizer {
 public:
  Split(std::string_view pattern, Behavior behavior, bool invert, const Origin& origin)
      : regex_(pattern, origin), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(Scratch& s) const override {
    thread_local std::vector<Piece> pieces, kept;
    s.other_words.clear();
    for (const Span word : s.words) {
      const std::u32string_view text = std::u32string_view(s.text).substr(word.begin, word.end - word.begin);
      pieces.clear();
      std::size_t previous = 0;
      regex_.for_each_match(text, [&](std::size_t begin, std::size_t end) {
        if (begin != previous) pieces.push_back({previous, begin, invert_});
        pieces.push_back({begin, end, !invert_});
        previous = end;
      });
      if (previous != text.size()) pieces.push_back({previous, text.size(), invert_});
      apply_behavior(pieces, kept);
      for (const Piece& p : kept)
        if (p.end > p.begin) s.other_words.push_back({word.begin + p.begin, word.begin + p.end});
    }
    s.words.swap(s.other_words);
  }
  std::string name() const override { return "Split"; }
  bool keeps_text() const override { return true; }

 private:
  struct Piece {
    std::size_t begin, end;
    bool match;
  };

  // Hugging Face's NormalizedString::split, piece by piece: `kept` receives the words.
  void apply_behavior(const std::vector<Piece>& pieces, std::vector<Piece>& kept) const {
    kept.clear();
    bool previous_match = false;
    switch (behavior_) {
      case Behavior::isolated:
        kept = pieces;
        break;
      case Behavior::removed:
        for (const Piece& p : pieces)
          if (!p.match) kept.push_back(p);
        break;
      case Behavior::contiguous:
        for (const Piece& p : pieces) {
          if (p.match == previous_match && !kept.empty())
            kept.back().end = p.end;
          else
            kept.push_back(p);
          previous_match = p.match;
        }
        break;
      case Behavior::merged_with_previous:
        for (const Piece& p : pieces) {
          if (p.match && !previous_match && !kept.empty())
            kept.back().end = p.end;
          else
            kept.push_back(p);
          previous_match = p.match;
        }
        break;
      case Behavior::merged_with_next:
        for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
          if (it->match && !previous_match && !kept.empty())
            kept.back().begin = it->begin;
          else
            kept.push_back(*it);
          previous_match = it->match;
        }
        std::reverse(kept.begin(), kept.end());
        break;
    }
  }

  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

// Replace with a Regex pattern: every match (Oniguruma's find_iter) replaced by `content`.
class RegexReplace final : public Normalizer {
 public:
  RegexReplace(std::string_view pattern, const std::string& content, const Origin& origin) : regex_(pattern, origin) {
    decode_utf8(content, content_);
  }
  void normalize(Scratch& s) const override {
    thread_local std::vector<Span> matches;  // with offsets, for their places
    s.other.clear();
    matches.clear();
    std::size_t previous = 0;
    bool matched = false;
    HeadCount head{s.head};
    regex_.for_each_match(s.text, [&](std::size_t begin, std::size_t end) {
      head.copied(previous, begin);
      head.replaced(end, content_.size());
      s.other.append(s.text, previous, begin - previous);
      s.other.append(content_);
      past_bound(s, s.other.size());
      if (s.track) matches.push_back({begin, end});
      previous = end;
      matched = true;
    });
    if (!matched) return;
    head.copied(previous, s.text.size());
    s.head = head.kept;
    s.other.append(s.text, previous);
    if (s.track) replaced_places(s, matches, content_.size());
    s.text.swap(s.other);
  }
  std::string name() const override { return "Replace"; }
  bool keeps_places() const override { return true; }

 private:
  Regex regex_;
  std::u32string content_;
};

// A literal as a pattern that matches it exactly (Hugging Face escapes String patterns the same way).
std::string escaped_literal(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Behavior behavior_of(const std::string& name, const Origin& origin) {
  if (name == "Removed") return Behavior::removed;
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  refuse(origin, fmt::format("behavior '{}' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                             "Contiguous",
                             name));
}

// {"String": literal} or {"Regex": pattern} as a pattern for Regex.
std::string pattern_of(const json::object& o, const Origin& origin) {
  const json::value* v = field(o, "pattern");
  if (v == nullptr || !v->is_object()) refuse(origin, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
  const json::object& p = v->as_object();
  if (field(p, "Regex") != nullptr) return text_field(p, "Regex", origin);
  if (field(p, "String") != nullptr) {
    const std::string literal = text_field(p, "String", origin);
    if (literal.empty()) refuse(origin, "an empty pattern");
    return escaped_literal(literal);
  }
  refuse(origin, "'pattern' must be {\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace

const std::array<char32_t, 256>& byte_level_chars() { return k_byte_chars; }

std::string regex_pattern_of(const json::object& o, const Origin& origin) { return pattern_of(o, origin); }

std::unique_ptr<PreTokenizer> make_byte_level(const json::object& o, const Origin& origin) {
  // trim_offsets is the post-processor's (post_processors.cpp); here it changes nothing, as in tokenizers.
  return std::make_unique<ByteLevel>(flag(o, "add_prefix_space", true, origin), flag(o, "use_regex", true, origin),
                                     origin);
}

std::unique_ptr<PreTokenizer> make_split(const json::object& o, const Origin& origin) {
  return std::make_unique<Split>(pattern_of(o, origin), behavior_of(text_field(o, "behavior", origin), origin),
                                 flag(o, "invert", false, origin), origin);
}

std::unique_ptr<Normalizer> make_regex_replace(const json::object& o, const Origin& origin) {
  return std::make_unique<RegexReplace>(pattern_of(o, origin), text_field(o, "content", origin), origin);
}

}  // namespace flowline::models::tokenizers
