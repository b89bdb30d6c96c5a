// The post-processors and the table that builds them from tokenizer.json's "post_processor" object:
// BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel (offsets only) and a Sequence of them, each
// as a PostProcessor template of special tokens and sequences. Adding one: a line in the table.
#include "builders.hpp"
#include "unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <utility>

namespace flowline::models::tokenizers {

namespace json = boost::json;

namespace {

TemplatePiece special(std::int32_t id, std::int32_t type_id) { return {false, 0, {id}, type_id}; }
TemplatePiece sequence(int which, std::int32_t type_id) { return {true, which, {}, type_id}; }

std::int32_t token_pair_id(const json::object& o, std::string_view key, const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr || !v->is_array() || v->as_array().size() != 2 || !v->as_array()[0].is_string())
    refuse(origin, fmt::format("'{}' must be [token, id]", key));
  return id_value(v->as_array()[1], {origin.file, origin.at(fmt::format(".{}[1]", key))});
}

// A template piece's type_id (tokenizers: u32; flowline's type ids are int32).
std::int32_t type_id(const json::object& o, const Origin& origin) {
  const json::value* v = field(o, "type_id");
  return v == nullptr ? 0 : id_value(*v, {origin.file, origin.at(".type_id")}, "a type id");
}

std::vector<TemplatePiece> template_list(const json::object& o, std::string_view key, const json::object& specials,
                                         const Origin& origin) {
  const json::value* v = field(o, key);
  if (v == nullptr || !v->is_array()) refuse(origin, fmt::format("'{}' must be a list", key));
  std::vector<TemplatePiece> out;
  for (std::size_t i = 0; i < v->as_array().size(); ++i) {
    const Origin here{origin.file, origin.at(fmt::format(".{}[{}]", key, i))};
    const json::object& piece = object_of(v->as_array()[i], here);
    if (const json::value* seq = field(piece, "Sequence")) {
      const json::object& so = object_of(*seq, here);
      const std::string id = text_field(so, "id", here);
      if (id != "A" && id != "B") refuse(here, fmt::format("sequence '{}' (A or B expected)", id));
      out.push_back(sequence(id == "A" ? 0 : 1, type_id(so, {here.file, here.at(".Sequence")})));
    } else if (const json::value* sp = field(piece, "SpecialToken")) {
      const json::object& so = object_of(*sp, here);
      const std::string name = text_field(so, "id", here);
      const auto found = specials.find(name);
      if (found == specials.end() || !found->value().is_object())
        refuse(here, fmt::format("special token '{}' is not in 'special_tokens'", name));
      const json::value* ids = field(found->value().as_object(), "ids");
      if (ids == nullptr || !ids->is_array()) refuse(here, fmt::format("special token '{}' has no ids", name));
      TemplatePiece p = special(0, type_id(so, {here.file, here.at(".SpecialToken")}));
      p.ids.clear();
      for (std::size_t k = 0; k < ids->as_array().size(); ++k) {
        const Origin at{origin.file, origin.at(fmt::format(".special_tokens[\"{}\"].ids[{}]", name, k))};
        p.ids.push_back(id_value(ids->as_array()[k], at));
      }
      out.push_back(std::move(p));
    } else {
      refuse(here, "a template piece is either {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return out;
}

// trim_offsets and add_prefix_space, tokenizers' defaults true (ByteLevel, RobertaProcessing).
void trimming(const json::object& o, const Origin& origin, PostProcessor& p) {
  p.trim_offsets = flag(o, "trim_offsets", true, origin);
  p.add_prefix_space = flag(o, "add_prefix_space", true, origin);
}

using PostBuilder = std::function<PostProcessor(const json::object&, const Origin&)>;
const std::map<std::string, PostBuilder, std::less<>>& post_table() {
  static const std::map<std::string, PostBuilder, std::less<>> table = {
      {"BertProcessing",
       [](const json::object& o, const Origin& origin) {
         const std::int32_t cls = token_pair_id(o, "cls", origin), sep = token_pair_id(o, "sep", origin);
         return PostProcessor{"BertProcessing",
                              {special(cls, 0), sequence(0, 0), special(sep, 0)},
                              {special(cls, 0), sequence(0, 0), special(sep, 0), sequence(1, 1), special(sep, 1)}};
       }},
      {"ByteLevel",  // it changes offsets only
       [](const json::object& o, const Origin& origin) {
         PostProcessor p{"ByteLevel", {sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
         trimming(o, origin, p);
         return p;
       }},
      {"Sequence",  // ByteLevel steps (offsets only) and at most one that adds special tokens
       [](const json::object& o, const Origin& origin) {
         const json::value* list = field(o, "processors");
         if (list == nullptr || !list->is_array()) refuse(origin, "'processors' must be a list");
         PostProcessor framing{"ByteLevel", {sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
         std::vector<std::string> names;
         for (std::size_t i = 0; i < list->as_array().size(); ++i) {
           const Origin here{origin.file, origin.at(fmt::format(".processors[{}]", i))};
           const json::object& po = object_of(list->as_array()[i], here);
           const std::string type = type_of(po, here);
           const auto found = post_table().find(type);
           if (found == post_table().end() || type == "Sequence")
             refuse(here, fmt::format("post-processor '{}' is not supported in a Sequence", type));
           PostProcessor p = found->second(po, here);
           if (type != "ByteLevel" && framing.name != "ByteLevel")
             refuse(here, "a Sequence with more than one post-processor that adds special tokens");
           const bool trim = framing.trim_offsets || p.trim_offsets;
           const bool prefix = framing.trim_offsets ? framing.add_prefix_space : p.add_prefix_space;
           if (type != "ByteLevel") framing = std::move(p);
           framing.trim_offsets = trim;
           framing.add_prefix_space = prefix;
           names.push_back(type);
         }
         framing.name = fmt::format("Sequence[{}]", fmt::join(names, ", "));
         return framing;
       }},
      {"RobertaProcessing",
       [](const json::object& o, const Origin& origin) {
         const std::int32_t cls = token_pair_id(o, "cls", origin), sep = token_pair_id(o, "sep", origin);
         PostProcessor p{
             "RobertaProcessing",
             {special(cls, 0), sequence(0, 0), special(sep, 0)},
             {special(cls, 0), sequence(0, 0), special(sep, 0), special(sep, 0), sequence(1, 0), special(sep, 0)}};
         trimming(o, origin, p);
         return p;
       }},
      {"TemplateProcessing",
       [](const json::object& o, const Origin& origin) {
         const json::value* specials = field(o, "special_tokens");
         static const json::object none;
         const json::object& sp = specials != nullptr && specials->is_object() ? specials->as_object() : none;
         return PostProcessor{"TemplateProcessing", template_list(o, "single", sp, origin),
                              template_list(o, "pair", sp, origin)};
       }},
  };
  return table;
}

}  // namespace

std::size_t PostProcessor::added(bool for_pair) const {
  std::size_t n = 0;
  for (const TemplatePiece& p : for_pair ? pair : single) n += p.ids.size();
  return n;
}

PostProcessor make_post_processor(const json::object& o, const Origin& origin) {
  const std::string type = type_of(o, origin);
  const auto found = post_table().find(type);
  if (found == post_table().end())
    refuse(origin, fmt::format("post-processor '{}' is not supported (supported: {})", type, names_of(post_table())));
  PostProcessor p = found->second(o, origin);
  const auto sequences =
      std::count_if(p.single.begin(), p.single.end(), [](const TemplatePiece& piece) { return piece.is_sequence; });
  const auto a = std::count_if(p.single.begin(), p.single.end(),
                               [](const TemplatePiece& piece) { return piece.is_sequence && piece.sequence == 0; });
  if (sequences != 1 || a != 1) refuse(origin, "the single template must hold the sequence A once, and not B");
  return p;
}

PostProcessor plain_post_processor() {
  return PostProcessor{"none", {sequence(0, 0)}, {sequence(0, 0), sequence(1, 1)}};
}

}  // namespace flowline::models::tokenizers
