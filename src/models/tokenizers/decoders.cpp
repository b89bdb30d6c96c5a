// tokenizer.json's decoders (pipeline.hpp's Decoder): tokens back into text exactly as Python `tokenizers`
// 0.23 decodes them (its decoders' decode_chain, read from the Rust source): WordPiece, Metaspace, ByteLevel,
// BPEDecoder, ByteFallback, Fuse, Strip, Replace, CTC and Sequence. Rust's string operations are reproduced
// where they differ from the obvious: str::replace with an empty pattern puts the replacement around every
// character, String::from_utf8_lossy gives one U+FFFD per maximal ill-formed prefix, and a Strip that would
// cut past a token's characters (a panic there) is an error here.
#include "flowline/error.hpp"
#include "builders.hpp"
#include "regex.hpp"

#include <fmt/format.h>

#include <functional>
#include <limits>
#include <map>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

std::size_t utf8_width(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead & 0xE0) == 0xC0 ? 2 : (lead & 0xF0) == 0xE0 ? 3 : (lead & 0xF8) == 0xF0 ? 4 : 1;
}

// Rust's str::replace: every non-overlapping `from`, left to right; an empty `from` matches before each
// character and at the end.
std::string replaced(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) {
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t n = std::min(utf8_width(static_cast<unsigned char>(s[i])), s.size() - i);
      out.append(to).append(s.substr(i, n));
      i += n;
    }
    return out.append(to);
  }
  std::size_t at = 0;
  for (std::size_t hit = s.find(from); hit != std::string_view::npos; hit = s.find(from, at)) {
    out.append(s.substr(at, hit - at)).append(to);
    at = hit + from.size();
  }
  return out.append(s.substr(at));
}

// How many bytes at `p` (of `n` left) form a prefix of a well-formed UTF-8 sequence that is not complete: the
// run Rust's from_utf8_lossy replaces by one U+FFFD (at least 1). 0: a whole character starts there.
std::size_t ill_formed_run(const unsigned char* p, std::size_t n) {
  const unsigned char b = p[0];
  if (b < 0x80) return 0;
  std::size_t width = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (b >= 0xC2 && b <= 0xDF) {
    width = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    width = 3;
    if (b == 0xE0) low = 0xA0;
    if (b == 0xED) high = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    width = 4;
    if (b == 0xF0) low = 0x90;
    if (b == 0xF4) high = 0x8F;
  } else {
    return 1;
  }
  if (n < 2 || p[1] < low || p[1] > high) return 1;
  for (std::size_t k = 2; k < width; ++k)
    if (n <= k || (p[k] & 0xC0) != 0x80) return k;
  return 0;
}

// Rust's String::from_utf8_lossy.
std::string lossy_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::size_t i = 0; i < bytes.size();) {
    const std::size_t bad = ill_formed_run(p + i, bytes.size() - i);
    if (bad != 0) {
      out.append("\xEF\xBF\xBD");
      i += bad;
      continue;
    }
    const std::size_t n = utf8_width(p[i]);
    out.append(bytes.substr(i, n));
    i += n;
  }
  return out;
}

bool valid_utf8(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::size_t i = 0; i < bytes.size(); i += utf8_width(p[i]))
    if (ill_formed_run(p + i, bytes.size() - i) != 0) return false;
  return true;
}

std::string utf8_of(char32_t c) {
  std::string out;
  encode_utf8(std::u32string_view(&c, 1), out);
  return out;
}

// One character of a field ("replacement", "content").
char32_t character_field(const json::object& o, std::string_view key, const Origin& origin) {
  std::u32string chars;
  decode_utf8(text_field(o, key, origin), chars);
  if (chars.size() != 1) refuse(origin, fmt::format("'{}' must be one character", key));
  return chars[0];
}

// tokenizers' wordpiece::cleanup: spaces before punctuation and English contractions.
std::string cleanup(std::string token) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},           {" !", "!"},   {" ,", ","},     {" ' ", "'"},   {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) token = replaced(token, from, to);
  return token;
}

class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      if (i != 0) token = token.starts_with(prefix_) ? token.substr(prefix_.size()) : " " + token;
      if (cleanup_) token = cleanup(std::move(token));
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

// Every replacement character becomes a space; in the first token (unless prepend_scheme is never) it is
// dropped, wherever it stands.
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool prepends) : replacement_(utf8_of(replacement)), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replaced(tokens[i], replacement_, i == 0 && prepends_ ? "" : " ");
  }

 private:
  std::string replacement_;
  bool prepends_;
};

// Each token's characters as GPT-2's byte characters, back to bytes (a token with any other character keeps
// its own bytes); all of them read as one lossy UTF-8 text.
class ByteLevelDecoder final : public Decoder {
 public:
  ByteLevelDecoder() {
    byte_of_.fill(-1);
    for (unsigned b = 0; b < 256; ++b) byte_of_[byte_level_chars()[b]] = static_cast<int>(b);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::u32string chars;
    for (const std::string& token : tokens) {
      decode_utf8(token, chars);
      const std::size_t before = bytes.size();
      bool mapped = true;
      for (const char32_t c : chars) {
        if (c >= byte_of_.size() || byte_of_[c] < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(byte_of_[c]));
      }
      if (!mapped) {
        bytes.resize(before);
        bytes.append(token);
      }
    }
    tokens.assign(1, lossy_utf8(bytes));
  }

 private:
  std::array<int, 0x144> byte_of_{};  // the byte characters all lie below U+0144
};

// The end-of-word suffix becomes a space, in the last token nothing.
class BpeDecoder final : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replaced(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

// Runs of <0xNN> tokens become their bytes when those are UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    std::size_t count = 0;
    const auto flush = [&] {
      if (count == 0) return;
      if (valid_utf8(bytes))
        out.push_back(bytes);
      else
        for (std::size_t k = 0; k < count; ++k) out.emplace_back("\xEF\xBF\xBD");
      bytes.clear();
      count = 0;
    };
    for (std::string& token : tokens) {
      if (const int b = byte_token(token); b >= 0) {
        bytes.push_back(static_cast<char>(b));
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  // Rust's u8::from_str_radix(&token[3..5], 16) of a six-byte "<0x..>" (a sign '+' is accepted there).
  static int byte_token(std::string_view token) {
    if (token.size() != 6 || !token.starts_with("<0x") || token.back() != '>') return -1;
    const auto digit = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    const int high = digit(token[3]), low = digit(token[4]);
    if (token[3] == '+' && low >= 0) return low;
    return high < 0 || low < 0 ? -1 : high * 16 + low;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& token : tokens) all += token;
    tokens.assign(1, std::move(all));
  }
};

// Up to `start` leading and `stop` trailing `content` characters off each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop, std::string file)
      : content_(content), start_(start), stop_(stop), file_(std::move(file)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::u32string chars;
    for (std::string& token : tokens) {
      decode_utf8(token, chars);
      std::size_t begin = 0, end = chars.size();
      while (begin < std::min(start_, chars.size()) && chars[begin] == content_) ++begin;
      for (std::size_t i = 0; i < stop_ && end == chars.size() - i; ++i) {
        // tokenizers indexes past the token's start here (a panic): no text to give.
        if (i >= chars.size())
          throw Error(
              fmt::format("tokenizer '{}': decoder Strip cannot strip {} characters off \"{}\"", file_, stop_, token));
        if (chars[end - 1] == content_) --end;
      }
      if (end < begin) throw Error(fmt::format("tokenizer '{}': decoder Strip cuts \"{}\" past itself", file_, token));
      encode_utf8(std::u32string_view(chars).substr(begin, end - begin), token);
    }
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
  std::string file_;
};

// The pattern's matches in each token replaced by `content`.
class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const std::string& pattern, const std::string& content, const Origin& origin)
      : regex_(pattern, origin) {
    decode_utf8(content, content_);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::u32string chars, out;
    for (std::string& token : tokens) {
      decode_utf8(token, chars);
      out.clear();
      std::size_t at = 0;
      regex_.for_each_match(chars, [&](std::size_t begin, std::size_t end) {
        out.append(chars, at, begin - at).append(content_);
        at = end;
      });
      out.append(chars, at);
      encode_utf8(out, token);
    }
  }

 private:
  Regex regex_;
  std::u32string content_;
};

// Repeats collapsed, the pad token removed, then (with cleanup) the word delimiter as a space; empty tokens
// dropped.
class CtcDecoder final : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delimiter, bool cleanup)
      : pad_(std::move(pad)), delimiter_(std::move(delimiter)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string token = replaced(tokens[i], pad_, "");
      if (cleanup_) token = replaced(cleanup(std::move(token)), delimiter_, " ");
      if (!token.empty()) out.push_back(std::move(token));
    }
    tokens = std::move(out);
  }

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> decoders) : decoders_(std::move(decoders)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : decoders_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> decoders_;
};

std::string text_or(const json::object& o, std::string_view key, std::string fallback, const Origin& origin) {
  return field(o, key) == nullptr ? fallback : text_field(o, key, origin);
}

using DecoderBuilder = std::function<std::unique_ptr<Decoder>(const json::object&, const Origin&)>;
const std::map<std::string, DecoderBuilder, std::less<>>& decoder_table();

std::unique_ptr<Decoder> make_sequence(const json::object& o, const Origin& origin) {
  const json::value* list = field(o, "decoders");
  if (list == nullptr || !list->is_array()) refuse(origin, "'decoders' must be a list");
  std::vector<std::unique_ptr<Decoder>> decoders;
  for (std::size_t i = 0; i < list->as_array().size(); ++i) {
    const Origin here{origin.file, origin.at(fmt::format(".decoders[{}]", i))};
    decoders.push_back(make_decoder(object_of(list->as_array()[i], here), here));
  }
  return std::make_unique<SequenceDecoder>(std::move(decoders));
}

// Metaspace's prepend scheme as the pre-tokenizer reads it (sentencepiece.cpp): only "never" keeps the
// first token's replacement characters.
std::unique_ptr<Decoder> make_metaspace_decoder(const json::object& o, const Origin& origin) {
  std::string scheme = flag(o, "add_prefix_space", true, origin) ? "always" : "never";
  if (field(o, "prepend_scheme") != nullptr) scheme = text_field(o, "prepend_scheme", origin);
  if (scheme != "always" && scheme != "first" && scheme != "never")
    refuse(origin, fmt::format("prepend_scheme '{}' is not one of always, first, never", scheme));
  return std::make_unique<MetaspaceDecoder>(character_field(o, "replacement", origin), scheme != "never");
}

const std::map<std::string, DecoderBuilder, std::less<>>& decoder_table() {
  static const std::map<std::string, DecoderBuilder, std::less<>> table = {
      {"WordPiece",
       [](const json::object& o, const Origin& origin) -> std::unique_ptr<Decoder> {
         return std::make_unique<WordPieceDecoder>(text_or(o, "prefix", "##", origin),
                                                   flag(o, "cleanup", true, origin));
       }},
      {"Metaspace", make_metaspace_decoder},
      {"ByteLevel",
       [](const json::object&, const Origin&) -> std::unique_ptr<Decoder> {
         return std::make_unique<ByteLevelDecoder>();
       }},
      {"BPEDecoder",
       [](const json::object& o, const Origin& origin) -> std::unique_ptr<Decoder> {
         return std::make_unique<BpeDecoder>(text_or(o, "suffix", "</w>", origin));
       }},
      {"ByteFallback",
       [](const json::object&, const Origin&) -> std::unique_ptr<Decoder> {
         return std::make_unique<ByteFallbackDecoder>();
       }},
      {"Fuse",
       [](const json::object&, const Origin&) -> std::unique_ptr<Decoder> { return std::make_unique<FuseDecoder>(); }},
      {"Strip",
       [](const json::object& o, const Origin& origin) -> std::unique_ptr<Decoder> {
         const auto max = std::numeric_limits<std::size_t>::max();
         return std::make_unique<StripDecoder>(character_field(o, "content", origin),
                                               count_field(o, "start", 0, max, origin),
                                               count_field(o, "stop", 0, max, origin), origin.file);
       }},
      {"Replace",
       [](const json::object& o, const Origin& origin) -> std::unique_ptr<Decoder> {
         return std::make_unique<ReplaceDecoder>(regex_pattern_of(o, origin), text_field(o, "content", origin), origin);
       }},
      {"CTC",
       [](const json::object& o, const Origin& origin) -> std::unique_ptr<Decoder> {
         return std::make_unique<CtcDecoder>(text_or(o, "pad_token", "<pad>", origin),
                                             text_or(o, "word_delimiter_token", "|", origin),
                                             flag(o, "cleanup", true, origin));
       }},
      {"Sequence", make_sequence},
  };
  return table;
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json::object& o, const Origin& origin) {
  const std::string type = type_of(o, origin);
  const auto it = decoder_table().find(type);
  if (it == decoder_table().end())
    refuse({origin.file, origin.at(".type")},
           fmt::format("decoder '{}' is not supported (supported: {})", type, names_of(decoder_table())));
  return it->second(o, origin);
}

void TokensById::add(std::int32_t id, std::string_view token) {
  if (id < 0) return;
  const auto at = static_cast<std::size_t>(id);
  if (at > 4 * dense_.size() + 65536) {
    sparse_[id] = token;
    return;
  }
  if (at >= dense_.size()) dense_.resize(at + 1);
  dense_[at] = token;
}

std::string_view TokensById::operator()(std::int32_t id) const {
  if (id < 0) return {};
  if (static_cast<std::size_t>(id) < dense_.size() && dense_[static_cast<std::size_t>(id)].data() != nullptr)
    return dense_[static_cast<std::size_t>(id)];
  const auto it = sparse_.find(id);
  return it == sparse_.end() ? std::string_view() : it->second;
}

}  // namespace flowline::models::tokenizers
