// The WordPiece tokenizer of BERT checkpoints (vocab.txt): normalization, basic and subword splitting.
#include "flowline/sentence_encoder/wordpiece_tokenizer.hpp"

#include "flowline/error.hpp"
#include "flowline/io.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <utf8proc.h>

#include <fstream>

namespace flowline::sentence_encoder {

namespace {

bool is_white_space(utf8proc_int32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto category = utf8proc_category(c);
  return category == UTF8PROC_CATEGORY_ZS || category == UTF8PROC_CATEGORY_ZL || category == UTF8PROC_CATEGORY_ZP;
}

bool is_other(utf8proc_int32_t c) {  // general category C*
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

bool is_control(utf8proc_int32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return is_other(c);
}

bool is_punctuation(utf8proc_int32_t c) {
  if (c < 0x80) {
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
  }
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_chinese_char(utf8proc_int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_utf8(std::string& out, utf8proc_int32_t c) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(c, buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<std::size_t>(n));
}

}  // namespace

WordPieceTokenizer::WordPieceTokenizer(const std::filesystem::path& vocab_file, WordPieceOptions options)
    : options_(std::move(options)) {
  std::ifstream in(vocab_file, std::ios::binary);
  if (!in) throw Error(fmt::format("tokenizer: cannot open vocabulary '{}'", vocab_file.string()));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto id = static_cast<std::int32_t>(id_to_token_.size());
    vocab_.emplace(line, id);  // a duplicate line keeps its first id, as the Python tokenizers do
    id_to_token_.push_back(line);
  }
  auto special = [&](const std::string& token) {
    const std::int32_t id = token_id(token);
    if (id < 0) throw Error(fmt::format("tokenizer: vocabulary '{}' has no token '{}'", vocab_file.string(), token));
    return id;
  };
  unk_id_ = special(options_.unk_token);
  cls_id_ = special(options_.cls_token);
  sep_id_ = special(options_.sep_token);
  pad_id_ = special(options_.pad_token);
}

WordPieceTokenizer WordPieceTokenizer::from_model_folder(const std::filesystem::path& folder) {
  WordPieceOptions options;
  const auto config_path = folder / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    boost::system::error_code ec;
    const auto config = boost::json::parse(read_file(config_path), ec);
    if (ec || !config.is_object()) throw Error(fmt::format("tokenizer: '{}' is not valid JSON", config_path.string()));
    const auto& o = config.get_object();
    auto flag = [&](const char* key, bool fallback) {
      const auto* v = o.if_contains(key);
      return v && v->is_bool() ? v->get_bool() : fallback;
    };
    auto text = [&](const char* key, const std::string& fallback) {
      const auto* v = o.if_contains(key);
      return v && v->is_string() ? std::string(v->get_string()) : fallback;
    };
    if (const auto* cls = o.if_contains("tokenizer_class"); cls && cls->is_string()) {
      const std::string name(cls->get_string());
      if (name != "BertTokenizer" && name != "BertTokenizerFast") {
        throw Error(fmt::format("tokenizer: '{}' names {}, but only BERT WordPiece tokenizers are supported",
                                config_path.string(), name));
      }
    }
    options.lowercase = flag("do_lower_case", true);
    const auto* strip = o.if_contains("strip_accents");
    options.strip_accents = strip && strip->is_bool() ? strip->get_bool() : options.lowercase;
    options.handle_chinese_chars = flag("tokenize_chinese_chars", true);
    options.unk_token = text("unk_token", options.unk_token);
    options.cls_token = text("cls_token", options.cls_token);
    options.sep_token = text("sep_token", options.sep_token);
    options.pad_token = text("pad_token", options.pad_token);
  }
  return WordPieceTokenizer(folder / "vocab.txt", options);
}

std::int32_t WordPieceTokenizer::token_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  return it == vocab_.end() ? -1 : it->second;
}

template <class F>
void WordPieceTokenizer::for_each_word(std::string_view text, F&& word) const {
  std::string current;  // the word being built, normalised, UTF-8
  auto flush = [&] {
    if (!current.empty()) {
      word(std::string_view(current));
      current.clear();
    }
  };
  // Handles one normalised character: white space ends a word, punctuation is a word of its own.
  auto emit = [&](utf8proc_int32_t c) {
    if (is_white_space(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      append_utf8(current, c);
      flush();
    } else {
      append_utf8(current, c);
    }
  };
  const auto* data = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  std::size_t i = 0;
  utf8proc_int32_t decomposed[8];
  while (i < text.size()) {
    utf8proc_int32_t c;
    if (data[i] < 0x80) {
      c = data[i++];
    } else {
      const auto n = utf8proc_iterate(data + i, static_cast<utf8proc_ssize_t>(text.size() - i), &c);
      if (n <= 0) {  // invalid UTF-8: treated as U+FFFD, which cleaning drops
        ++i;
        continue;
      }
      i += static_cast<std::size_t>(n);
    }
    // 1. clean
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_white_space(c)) {
      flush();
      continue;
    }
    // 2. CJK characters become words of their own (decided before decomposition, as the fast tokenizer
    //    pads them before its NFD step)
    const bool cjk = options_.handle_chinese_chars && is_chinese_char(c);
    if (cjk) flush();
    // 3. + 4. strip accents (NFD, drop Mn), lower-case
    int count = 1;
    decomposed[0] = c;
    if (options_.strip_accents && c >= 0x80) {
      int last_boundclass = 0;
      const auto n = utf8proc_decompose_char(c, decomposed, 8, UTF8PROC_DECOMPOSE, &last_boundclass);
      if (n > 0 && n <= 8) {
        count = static_cast<int>(n);
      } else {
        decomposed[0] = c;
      }
    }
    for (int k = 0; k < count; ++k) {
      utf8proc_int32_t d = decomposed[k];
      if (options_.strip_accents && d >= 0x80 && utf8proc_category(d) == UTF8PROC_CATEGORY_MN) continue;
      if (options_.lowercase) d = d < 0x80 ? (d >= 'A' && d <= 'Z' ? d + 32 : d) : utf8proc_tolower(d);
      if (cjk) {
        append_utf8(current, d);
      } else {
        emit(d);
      }
    }
    if (cjk) flush();
  }
  flush();
}

void WordPieceTokenizer::word_pieces(std::string_view word, std::vector<std::int32_t>& ids) const {
  // Character boundaries (byte offsets) of the word.
  std::size_t chars = 0;
  for (unsigned char b : word) chars += (b & 0xC0) != 0x80;
  if (chars > options_.max_input_chars_per_word) {
    ids.push_back(unk_id_);
    return;
  }
  const std::size_t mark = ids.size();
  std::string piece;
  std::size_t start = 0;
  while (start < word.size()) {
    std::size_t end = word.size();
    std::int32_t found = -1;
    while (end > start) {
      piece.clear();
      if (start > 0) piece = options_.continuing_subword_prefix;
      piece.append(word.data() + start, end - start);
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) {
        found = it->second;
        break;
      }
      // Step back one whole character.
      do {
        --end;
      } while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (found < 0) {
      ids.resize(mark);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(found);
    start = end;
  }
}

std::size_t WordPieceTokenizer::encode_into(std::string_view text, std::size_t max_length,
                                            std::vector<std::int32_t>& out) const {
  const std::size_t begin = out.size();
  out.push_back(cls_id_);
  const std::size_t limit = max_length >= 2 ? max_length - 2 : std::numeric_limits<std::size_t>::max();
  std::size_t pieces = 0;
  bool full = false;
  for_each_word(text, [&](std::string_view word) {
    if (full) return;
    const std::size_t before = out.size();
    word_pieces(word, out);
    pieces += out.size() - before;
    if (pieces >= limit) {
      out.resize(begin + 1 + limit);
      pieces = limit;
      full = true;
    }
  });
  out.push_back(sep_id_);
  return out.size() - begin;
}

std::vector<std::int32_t> WordPieceTokenizer::encode(std::string_view text, std::size_t max_length) const {
  std::vector<std::int32_t> ids;
  encode_into(text, max_length, ids);
  return ids;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::int32_t> ids;
  for_each_word(text, [&](std::string_view word) { word_pieces(word, ids); });
  std::vector<std::string> out;
  for (auto id : ids) out.push_back(id_to_token_[static_cast<std::size_t>(id)]);
  return out;
}

}  // namespace flowline::sentence_encoder
