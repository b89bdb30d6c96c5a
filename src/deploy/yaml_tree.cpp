// The ordered YAML tree of the export files (yaml_tree.hpp), emitted through yaml-cpp.
#include "yaml_tree.hpp"

#include <yaml-cpp/yaml.h>

#include <regex>
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
  // Whether YAML 1.1 or 1.2 would read this plain scalar as something other than a string.
  static bool needs_quotes(const std::string& s) {
    static const std::regex typed(
        R"(^([-+]?[0-9][0-9_.:eE+-]*|[-+]?\.?(inf|Inf|INF|nan|NaN|NAN)|~|null|Null|NULL|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$)");
    return s.empty() || std::regex_match(s, typed);
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
