// The two components sentencepiece checkpoints (XLM-RoBERTa, multilingual-e5, T5, ...) bring into
// tokenizer.json, as Hugging Face `tokenizers` runs them:
// - Precompiled: sentencepiece's normalization rules (e.g. nmt_nfkc) compiled into a darts-clone double
//   array trie over UTF-8 plus a blob of NUL-terminated replacements, base64 in the JSON. Applied per
//   grapheme cluster: a cluster shorter than 6 bytes is replaced whole when the trie matches a prefix of
//   it (the shortest match, as tokenizers' spm_precompiled takes it); otherwise each character on its own.
// - Metaspace: spaces become the replacement character (▁), a ▁ is put in front of each word (prepend
//   scheme "always"; "first": only in front of a word that starts at offset 0 of the original text, so not
//   after an added token nor where a normalizer or an earlier pre-tokenizer dropped the first character;
//   "never" leaves it), and words are split before every ▁.
#include "flowline/error.hpp"
#include "builders.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <array>
#include <unordered_map>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

std::string decode_base64(std::string_view in, const Origin& origin) {
  std::string out;
  out.reserve(in.size() / 4 * 3);
  std::uint32_t bits = 0;
  int count = 0;
  for (const char c : in) {
    int v;
    if (c >= 'A' && c <= 'Z')
      v = c - 'A';
    else if (c >= 'a' && c <= 'z')
      v = c - 'a' + 26;
    else if (c >= '0' && c <= '9')
      v = c - '0' + 52;
    else if (c == '+')
      v = 62;
    else if (c == '/')
      v = 63;
    else if (c == '=')
      break;
    else
      refuse(origin, "'precompiled_charsmap' is not base64");
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    if ((count += 6) >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xFF));
    }
  }
  return out;
}

class Precompiled final : public Normalizer {
 public:
  Precompiled(const std::string& charsmap, const Origin& origin) {
    if (charsmap.size() < 4) refuse(origin, "'precompiled_charsmap' is too short");
    const auto byte = [&](std::size_t i) {
      return static_cast<std::uint32_t>(static_cast<unsigned char>(charsmap[i]));
    };
    const std::uint32_t trie_bytes = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
    if (trie_bytes % 4 != 0 || trie_bytes == 0 || 4 + std::size_t{trie_bytes} > charsmap.size())
      refuse(origin, fmt::format("'precompiled_charsmap': a trie of {} bytes does not fit in {} bytes", trie_bytes,
                                 charsmap.size()));
    units_.resize(trie_bytes / 4);
    for (std::size_t i = 0; i < units_.size(); ++i) {
      const std::size_t at = 4 + 4 * i;
      units_[i] = byte(at) | byte(at + 1) << 8 | byte(at + 2) << 16 | byte(at + 3) << 24;
    }
    const std::string_view blob = std::string_view(charsmap).substr(4 + trie_bytes);
    // Every replacement decoded once, by its offset in the blob.
    for (std::size_t at = 0; at < blob.size();) {
      const std::size_t end = std::min(blob.find('\0', at), blob.size());
      for (std::size_t start = at; start < end; ++start) {  // a value may point inside a string too
        if ((static_cast<unsigned char>(blob[start]) & 0xC0) == 0x80) continue;
        std::u32string text;
        decode_utf8(blob.substr(start, end - start), text);
        replacements_.emplace(static_cast<std::uint32_t>(start), std::move(text));
      }
      replacements_.emplace(static_cast<std::uint32_t>(end), std::u32string());
      at = end + 1;
    }
    for (std::size_t c = 0; c < ascii_.size(); ++c) {
      const char ch = static_cast<char>(c);
      ascii_[c] = transform(std::string_view(&ch, 1));
    }
  }

  void normalize(Scratch& s) const override {
    const std::u32string& text = s.text;
    thread_local std::vector<int> changes;  // with offsets: tokenizers' transformation of each new character
    changes.clear();
    // tokenizers' replace(): old characters replaced by `r`, each new one taking an old one's place; more
    // new ones are inserted, fewer drop the rest (counted on the last change made, even a grapheme's before).
    // Kept characters change nothing (0): their entries are filled in only when a replacement follows them, so
    // text the rules leave alone (most) records nothing. Called after `r` is appended to s.other.
    const auto replaced = [&](std::size_t old, const std::u32string& r) {
      if (!s.track) return;
      changes.resize(s.other.size() - r.size(), 0);
      changes.insert(changes.end(), r.size(), 0);
      if (r.size() > old) std::fill(changes.end() - static_cast<std::ptrdiff_t>(r.size() - old), changes.end(), 1);
      if (r.size() < old && !changes.empty()) changes.back() -= static_cast<int>(old - r.size());
    };
    s.other.clear();
    bool modified = false;
    utf8proc_int32_t state = 0;
    std::size_t head = s.head == 0 ? 0 : std::string::npos;  // what the head becomes (Scratch::head)
    for (std::size_t begin = 0; begin < text.size();) {
      if (head == std::string::npos && begin >= s.head) head = s.other.size();
      // An ASCII character followed by another (not CR LF) is a grapheme of its own: its rule is looked up
      // once, at construction.
      if (text[begin] < 0x80 && (begin + 1 == text.size() || (text[begin + 1] < 0x80 && text[begin] != U'\r'))) {
        if (const std::u32string* r = ascii_[text[begin]]) {
          s.other.append(*r);
          replaced(1, *r);
          modified = true;
        } else {
          s.other.push_back(text[begin]);
        }
        ++begin;
        state = 0;
        continue;
      }
      std::size_t end = begin + 1;
      while (end < text.size() && !utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(text[end - 1]),
                                                                    static_cast<utf8proc_int32_t>(text[end]), &state))
        ++end;
      const std::u32string_view grapheme = std::u32string_view(text).substr(begin, end - begin);
      begin = end;
      encode_utf8(grapheme, s.utf8);
      if (s.utf8.size() < 6) {
        if (const std::u32string* r = transform(s.utf8)) {
          s.other.append(*r);
          replaced(grapheme.size(), *r);
          modified = true;
          continue;
        }
      }
      for (const char32_t c : grapheme) {
        encode_utf8(std::u32string_view(&c, 1), s.utf8);
        if (const std::u32string* r = transform(s.utf8)) {
          s.other.append(*r);
          replaced(1, *r);
          modified = true;
        } else {
          s.other.push_back(c);
        }
      }
    }
    if (!modified) return;
    // A character replaced by nothing leaves no trace in tokenizers' alignments, so the next one takes
    // its offsets: a first character dropped leaves the head where it was.
    head = std::min(head, s.other.size());
    s.head = head == 0 && s.head > 0 ? std::min<std::size_t>(1, s.other.size()) : head;
    s.text.swap(s.other);
    if (!s.track) return;
    changes.resize(s.text.size(), 0);
    transform_aligned(s, changes);
  }
  std::string name() const override { return "Precompiled"; }
  bool keeps_places() const override { return true; }

 private:
  // darts-clone's common prefix search, stopped at the first (shortest) match: its replacement, or null.
  const std::u32string* transform(std::string_view key) const {
    std::size_t pos = 0;
    std::uint32_t unit = units_[0];
    pos ^= offset(unit);
    for (const char ch : key) {
      const auto c = static_cast<unsigned char>(ch);
      pos ^= c;
      if (pos >= units_.size()) return nullptr;
      unit = units_[pos];
      if ((unit & ((1U << 31) | 0xFFU)) != c) return nullptr;  // label
      pos ^= offset(unit);
      if (pos >= units_.size()) return nullptr;
      if ((unit >> 8) & 1U) {  // has a leaf: its value is the replacement's offset
        const auto it = replacements_.find(units_[pos] & ((1U << 31) - 1));
        return it == replacements_.end() ? nullptr : &it->second;
      }
    }
    return nullptr;
  }
  static std::size_t offset(std::uint32_t unit) { return (unit >> 10) << ((unit & (1U << 9)) >> 6); }

  std::vector<std::uint32_t> units_;
  std::unordered_map<std::uint32_t, std::u32string> replacements_;
  std::array<const std::u32string*, 128> ascii_{};
};

enum class PrependScheme { always, first, never };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {}

  // As the last pre-tokenizer with offsets (Scratch::bytes_later), it writes no places: each word's characters are
  // one for one those of the text before it, but a prepended ▁ (in the place of the word's first character), so
  // each word says only where it starts there (Scratch::sources), as ByteLevel's lazy words do.
  void pre_tokenize(Scratch& s) const override {
    if (s.track && s.bytes_later) return lazy_pre_tokenize(s);
    if (s.track) end_identity(s);  // the places rewritten beside the text
    s.other_words.clear();
    // Written through a pointer into room for the text and one prepended ▁ a word, then cut to size; with
    // offsets, each character's place alike (null without: one loop serves both, the test hoisted by the
    // compiler since nothing it writes can change the pointers).
    s.other.resize(s.text.size() + s.words.size());
    if (s.track) s.other_align.resize(s.other.size());
    char32_t* const out = s.other.data();
    const char32_t* const text = s.text.data();
    Align* const out_align = s.track ? s.other_align.data() : nullptr;
    const Align* const align = s.track ? s.align.data() : nullptr;
    std::size_t size = 0;
    for (const Span word : s.words) {
      if (word.end == word.begin) continue;
      std::size_t start = size;
      const char32_t head = text[word.begin];
      const bool prepend =
          prepend_ == PrependScheme::always || (prepend_ == PrependScheme::first && word.begin < s.origin);
      if (prepend && head != U' ' && head != replacement_) {
        if (out_align != nullptr) out_align[size] = align[word.begin];  // the place of the word's first character
        out[size++] = replacement_;
      }
      for (std::size_t i = word.begin; i < word.end; ++i) {
        const char32_t c = text[i] == U' ' ? replacement_ : text[i];
        if (split_ && c == replacement_ && size > start) {  // a new word before every ▁
          s.other_words.push_back({start, size});
          start = size;
        }
        if (out_align != nullptr) out_align[size] = align[i];
        out[size++] = c;
      }
      s.other_words.push_back({start, size});
    }
    s.other.resize(size);
    s.text.swap(s.other);
    s.words.swap(s.other_words);
    if (s.track) {
      s.other_align.resize(size);
      s.align.swap(s.other_align);
    }
  }
  std::string name() const override { return "Metaspace"; }

 private:
  void lazy_pre_tokenize(Scratch& s) const {
    s.other_words.clear();
    s.sources.clear();
    s.other.resize(s.text.size() + s.words.size());
    char32_t* const out = s.other.data();
    const char32_t* const text = s.text.data();
    std::size_t size = 0;
    ShiftCursor shifts(s);
    for (const Span word : s.words) {
      if (word.end == word.begin) continue;
      std::size_t start = size;
      const char32_t head = text[word.begin];
      const bool prepend =
          prepend_ == PrependScheme::always || (prepend_ == PrependScheme::first && word.begin < s.origin);
      const bool shifted = prepend && head != U' ' && head != replacement_;
      if (shifted) out[size++] = replacement_;
      // Character j of a word starting at `start` that came from text[at] is in the place j + at - start.
      const auto distance = [](std::size_t at, std::size_t start) {
        return static_cast<std::int32_t>(at) - static_cast<std::int32_t>(start);
      };
      Scratch::WordSource source{distance(word.begin, start), shifts.to(word.begin), shifted, true};
      for (std::size_t i = word.begin; i < word.end; ++i) {
        const char32_t c = text[i] == U' ' ? replacement_ : text[i];
        if (split_ && c == replacement_ && size > start) {  // a new word before every ▁
          s.other_words.push_back({start, size});
          s.sources.push_back(source);
          shifts.inside |= shifts.next < i;  // the word, up to text[i], holds one
          source = Scratch::WordSource{distance(i, size), shifts.to(i), false, true};
          start = size;
        }
        out[size++] = c;
      }
      s.other_words.push_back({start, size});
      s.sources.push_back(source);
      shifts.inside |= shifts.next < word.end;
    }
    s.other.resize(size);
    s.text.swap(s.other);
    s.words.swap(s.other_words);
    s.bytes_lazy = true;
    if (shifts.inside) end_identity(s);  // a word's places not one shift: read, not made
  }

  // Scratch::shifts in the order of the text: the shift of a word starting at text[i] (to(i)), and whether one
  // starts inside a word (`next`, the next one's index, before the word's end once to() has passed its start).
  struct ShiftCursor {
    const Scratch::Shift* at;
    const Scratch::Shift* end;
    std::size_t next;
    std::uint32_t shift = 0;
    bool inside = false;
    explicit ShiftCursor(const Scratch& s)
        : at(s.shifts.data()), end(at + s.shifts.size()), next(at != end ? at->at : kNone) {}
    std::uint32_t to(std::size_t i) {
      for (; next <= i; next = at != end ? at->at : kNone) shift = (at++)->shift;
      return shift;
    }
    static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  };

  char32_t replacement_;
  PrependScheme prepend_;
  bool split_;
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const json::object& o, const Origin& origin) {
  return std::make_unique<Precompiled>(decode_base64(text_field(o, "precompiled_charsmap", origin), origin), origin);
}

std::unique_ptr<PreTokenizer> make_metaspace(const json::object& o, const Origin& origin) {
  std::u32string replacement;
  decode_utf8(text_field(o, "replacement", origin), replacement);
  if (replacement.size() != 1) refuse(origin, "'replacement' must be one character");
  // Older files say add_prefix_space; newer ones prepend_scheme.
  std::string scheme = flag(o, "add_prefix_space", true, origin) ? "always" : "never";
  if (field(o, "prepend_scheme") != nullptr) scheme = text_field(o, "prepend_scheme", origin);
  if (scheme != "always" && scheme != "first" && scheme != "never")
    refuse(origin, fmt::format("prepend_scheme '{}' is not one of always, first, never", scheme));
  const PrependScheme prepend = scheme == "always"  ? PrependScheme::always
                                : scheme == "first" ? PrependScheme::first
                                                    : PrependScheme::never;
  return std::make_unique<Metaspace>(replacement[0], prepend, flag(o, "split", true, origin));
}

}  // namespace flowline::models::tokenizers
