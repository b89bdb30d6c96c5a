// Building the tokenizer's pipeline (pipeline.hpp) from tokenizer.json, private to flowline::tokenizers: the
// builders of the components that live in files of their own, the component tables' entry points, and the
// readers of tokenizer.json's fields, which name the JSON path of what they refuse. Called while a Tokenizer
// is built (one thread); the components built are immutable.
#pragma once

#include "pipeline.hpp"

#include <boost/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::models::tokenizers {

// Builders of the components that live in files of their own; components.cpp's tables name them. Each reads
// its tokenizer.json object and refuses (refuse()) what it cannot run exactly.
std::unique_ptr<Model> make_bpe(const boost::json::object& o, const Origin& origin);                 // bpe.cpp
std::unique_ptr<PreTokenizer> make_byte_level(const boost::json::object& o, const Origin& origin);   // byte_level.cpp
std::unique_ptr<PreTokenizer> make_split(const boost::json::object& o, const Origin& origin);        // byte_level.cpp
std::unique_ptr<Normalizer> make_regex_replace(const boost::json::object& o, const Origin& origin);  // byte_level.cpp
// GPT-2's bytes_to_unicode: the character standing for each byte (byte_level.cpp). regex_pattern_of(): a
// component's {"String": literal} or {"Regex": pattern} as a Regex pattern (a literal escaped; empty refused).
const std::array<char32_t, 256>& byte_level_chars();
std::string regex_pattern_of(const boost::json::object& o, const Origin& origin);

// Fills normalizers, pre-tokenizers, model and post-processor from tokenizer.json's object (components.cpp).
void build_components(const boost::json::object& root, const std::string& file, Pipeline& pipeline);
// The component tables, each in its own file: a normalizer object (a Sequence: all of its list) appended to
// `out` (normalizers.cpp), a pre-tokenizer object likewise (pre_tokenizers.cpp), a post-processor object as
// a template (post_processors.cpp; plain_post_processor(): none, sequences alone). Each refuses a type it
// does not know, naming those it does.
void add_normalizer(const boost::json::value& v, const Origin& origin, std::vector<std::unique_ptr<Normalizer>>& out);
void add_pre_tokenizer(const boost::json::value& v, const Origin& origin,
                       std::vector<std::unique_ptr<PreTokenizer>>& out);
PostProcessor make_post_processor(const boost::json::object& o, const Origin& origin);
PostProcessor plain_post_processor();
// A component object's "type" (json_fields.cpp), and a table's names for "supported: ..." in errors.
std::string type_of(const boost::json::object& o, const Origin& origin);
template <class Table>
std::string names_of(const Table& table) {
  std::string names;
  for (const auto& entry : table) names += (names.empty() ? "" : ", ") + entry.first;
  return names;
}

// Reading tokenizer.json's fields (json_fields.cpp); errors name `origin`. field() is null when the key is
// absent or null; the others refuse a value of the wrong type.
const boost::json::value* field(const boost::json::object& o, std::string_view key);
bool flag(const boost::json::object& o, std::string_view key, bool fallback, const Origin& origin);
std::string text_field(const boost::json::object& o, std::string_view key, const Origin& origin);
// Integers as tokenizers reads them (ids and type ids are u32, counts usize): a JSON integer in 0..max, else
// refused naming the JSON path — "model.vocab[\"foo\"]: expected an id in 0..4294967295, got -1". flowline's ids
// are int32: id_value() refuses one past 2147483647 too. count_field() appends ".key" to the path.
inline constexpr std::uint64_t kMaxTokenizersId = 4294967295u;
std::uint64_t count_value(const boost::json::value& v, std::uint64_t max, const Origin& origin, std::string_view what);
std::int32_t id_value(const boost::json::value& v, const Origin& origin, std::string_view what = "an id");
std::uint64_t count_field(const boost::json::object& o, std::string_view key, std::uint64_t fallback, std::uint64_t max,
                          const Origin& origin);
const boost::json::object& object_of(const boost::json::value& v, const Origin& origin);
// A model's "vocab" object of token -> id (WordPiece, BPE).
Vocabulary read_vocab_object(const boost::json::object& o, const Origin& origin);

// Components in files of their own, built from their tokenizer.json object; components.cpp's tables name them.
std::unique_ptr<Normalizer> make_precompiled(const boost::json::object& o, const Origin& origin);  // sentencepiece.cpp
std::unique_ptr<PreTokenizer> make_metaspace(const boost::json::object& o, const Origin& origin);  // sentencepiece.cpp
std::unique_ptr<Model> make_unigram(const boost::json::object& o, const Origin& origin);           // unigram.cpp
std::unique_ptr<Model> make_wordpiece(const boost::json::object& o, const Origin& origin);         // wordpiece.cpp

}  // namespace flowline::models::tokenizers
