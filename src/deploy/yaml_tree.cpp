// The ordered YAML tree of the export files (yaml_tree.hpp), emitted through yaml-cpp.
#include "yaml_tree.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <string_view>
#include <sstream>

namespace flowline::deploy {

Yaml Yaml::list(std::initializer_list<Yaml> items) {
  Yaml y;
  y.kind_ = Kind::List;
  y.items_.assign(items.begin(), items.end());
  return y;
}

Yaml Yaml::map(std::initializer_list<std::pair<std::string, Yaml>> items) {
  Yaml y;
  for (const auto& [key, value] : items) y[key] = value;
  return y;
}

Yaml& Yaml::operator[](const std::string& key) {
  for (auto& [k, v] : entries_)
    if (k == key) return v;
  entries_.emplace_back(key, Yaml());
  return entries_.back().second;
}

Yaml& Yaml::push(Yaml item) {
  items_.push_back(std::move(item));
  return *this;
}

struct YamlWriter {
  // Whether YAML 1.1 or 1.2 would read this plain scalar as something other than a string: a number-like
  // text ([-+]?[0-9][0-9_.:eE+-]*), an infinity or NaN, a null or a boolean. Linear in the text's length.
  static bool needs_quotes(std::string_view s) {
    static const std::set<std::string_view> words{
        "~",  "null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES",
        "no", "No",   "NO",   "on",   "On",   "ON",   "off",  "Off",   "OFF",   "y",     "Y",   "n",   "N"};
    if (s.empty() || words.count(s) != 0) return true;
    std::string_view rest = s;
    if (rest.front() == '-' || rest.front() == '+') rest.remove_prefix(1);
    if (!rest.empty() && rest.front() >= '0' && rest.front() <= '9') {
      return std::all_of(rest.begin(), rest.end(), [](char c) {
        return (c >= '0' && c <= '9') || std::string_view("_.:eE+-").find(c) != std::string_view::npos;
      });
    }
    if (!rest.empty() && rest.front() == '.') rest.remove_prefix(1);
    return rest == "inf" || rest == "Inf" || rest == "INF" || rest == "nan" || rest == "NaN" || rest == "NAN";
  }

  static void write(YAML::Emitter& out, const Yaml& y) {
    switch (y.kind_) {
      case Yaml::Kind::String:
        if (y.text_.find('\n') != std::string::npos)
          out << YAML::Literal;  // a file's text (the ConfigMap's flows) stays readable
        else if (needs_quotes(y.text_))
          out << YAML::DoubleQuoted;
        out << y.text_;
        break;
      case Yaml::Kind::Int:
        out << y.number_;
        break;
      case Yaml::Kind::Bool:
        out << YAML::TrueFalseBool << y.flag_;
        break;
      case Yaml::Kind::List:
        out << YAML::BeginSeq;
        for (const auto& item : y.items_) write(out, item);
        out << YAML::EndSeq;
        break;
      case Yaml::Kind::Map:
        out << YAML::BeginMap;
        for (const auto& [key, value] : y.entries_) {
          out << YAML::Key;
          if (needs_quotes(key)) out << YAML::DoubleQuoted;
          out << key << YAML::Value;
          write(out, value);
        }
        out << YAML::EndMap;
        break;
    }
  }
};

std::string Yaml::to_text(const std::string& comment) const {
  YAML::Emitter out;
  YamlWriter::write(out, *this);
  std::ostringstream text;
  std::istringstream lines(comment);
  for (std::string line; std::getline(lines, line);) text << (line.empty() ? "#" : "# " + line) << "\n";
  text << out.c_str() << "\n";
  return text.str();
}

}  // namespace flowline::deploy
