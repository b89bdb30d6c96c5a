// A small ordered YAML tree for the files `flowline export` writes: maps keep the order keys were set in,
// numbers and booleans stay typed, and a string that YAML would read as something else ("8080", "true",
// "1.30") is quoted, so compose and Kubernetes read back exactly the types written. Emitted through
// yaml-cpp's Emitter, which does the escaping.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace flowline::deploy {

class Yaml {
 public:
  enum class Kind { String, Int, Bool, List, Map };

  Yaml() : kind_(Kind::Map) {}  // an empty map
  Yaml(std::string s) : kind_(Kind::String), text_(std::move(s)) {}
  Yaml(const char* s) : kind_(Kind::String), text_(s) {}
  Yaml(int i) : kind_(Kind::Int), number_(i) {}
  Yaml(long long i) : kind_(Kind::Int), number_(i) {}
  Yaml(bool b) : kind_(Kind::Bool), flag_(b) {}

  static Yaml list(std::initializer_list<Yaml> items = {});
  static Yaml map(std::initializer_list<std::pair<std::string, Yaml>> items = {});

  // Map: the value under `key`, added (as an empty map) when missing.
  Yaml& operator[](const std::string& key);
  // List: appends and returns the list.
  Yaml& push(Yaml item);
  bool empty() const { return kind_ == Kind::Map ? entries_.empty() : kind_ == Kind::List ? items_.empty() : false; }

  // The tree as YAML text, `comment` (lines without '#') above it.
  std::string to_text(const std::string& comment = "") const;

 private:
  friend struct YamlWriter;
  Kind kind_;
  std::string text_;
  long long number_ = 0;
  bool flag_ = false;
  std::vector<Yaml> items_;
  std::vector<std::pair<std::string, Yaml>> entries_;
};

}  // namespace flowline::deploy
