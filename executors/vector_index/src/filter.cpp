// Mongo-like filters on stored documents (filter.hpp): a tree of AND/OR nodes over (path, operator, value)
// tests.
#include "filter.hpp"

#include "flowline/error.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <array>
#include <vector>

namespace flowline::vector_index {

namespace json = boost::json;

namespace {

enum class Op { eq, ne, gt, gte, lt, lte, in, nin };

constexpr std::array<std::pair<std::string_view, Op>, 8> kOps = {{{"$eq", Op::eq},
                                                                  {"$ne", Op::ne},
                                                                  {"$gt", Op::gt},
                                                                  {"$gte", Op::gte},
                                                                  {"$lt", Op::lt},
                                                                  {"$lte", Op::lte},
                                                                  {"$in", Op::in},
                                                                  {"$nin", Op::nin}}};

// Where a path points: one of the document's string fields, or a path into its tags.
enum class Root { id, text, uri, tags };

// -1, 0, 1, or nothing when the two values have no order (different types, or neither numbers nor strings).
std::optional<int> compare(const json::value& a, const json::value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_double() || b.is_double()) {
      const double x = a.to_number<double>(), y = b.to_number<double>();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_int64() && b.is_int64()) {
      const auto x = a.get_int64(), y = b.get_int64();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_uint64() && b.is_uint64()) {
      const auto x = a.get_uint64(), y = b.get_uint64();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    // One int64, one uint64: a negative int64 is the smaller; otherwise both fit a uint64.
    const bool a_signed = a.is_int64();
    const std::int64_t s = a_signed ? a.get_int64() : b.get_int64();
    const std::uint64_t u = a_signed ? b.get_uint64() : a.get_uint64();
    const int signed_vs_unsigned =
        s < 0 ? -1 : (static_cast<std::uint64_t>(s) < u ? -1 : (static_cast<std::uint64_t>(s) > u ? 1 : 0));
    return a_signed ? signed_vs_unsigned : -signed_vs_unsigned;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.get_string().compare(b.get_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  return std::nullopt;
}

bool equal(const json::value& a, const json::value& b) {
  if (const auto c = compare(a, b)) return *c == 0;
  if (a.is_number() != b.is_number() || a.is_string() != b.is_string()) return false;
  return a == b;  // bools, null, lists and objects: structural equality
}

// The same for a document's string field (id, text, uri), read in place rather than copied into JSON.
std::optional<int> compare(std::string_view a, const json::value& b) {
  if (!b.is_string()) return std::nullopt;
  const int c = a.compare(std::string_view(b.get_string()));
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

bool equal(std::string_view a, const json::value& b) { return b.is_string() && std::string_view(b.get_string()) == a; }

}  // namespace

struct Filter::Node {
  enum class Kind { all, any, test } kind = Kind::all;
  std::vector<Node> children;  // all / any
  // test:
  Root root = Root::tags;
  std::vector<std::string> path;  // within the tags
  Op op = Op::eq;
  json::value operand;

  bool matches(const FilterTarget& doc) const;
  const json::value* lookup(const FilterTarget& doc) const;  // the tag at `path`, or nullptr
  template <class V>
  bool test(const V& v) const;  // `op` on a present value: a JSON value or a string field
};

const json::value* Filter::Node::lookup(const FilterTarget& doc) const {
  const json::object* object = &doc.tags;
  const json::value* v = nullptr;
  for (const std::string& key : path) {
    if (!object) return nullptr;
    v = object->if_contains(key);
    if (!v) return nullptr;
    object = v->if_object();
  }
  return v;
}

bool Filter::Node::matches(const FilterTarget& doc) const {
  switch (kind) {
    case Kind::all:
      for (const Node& child : children) {
        if (!child.matches(doc)) return false;
      }
      return true;
    case Kind::any:
      for (const Node& child : children) {
        if (child.matches(doc)) return true;
      }
      return false;
    case Kind::test:
      break;
  }
  switch (root) {
    case Root::id:
      return test(doc.id);
    case Root::text:
      return test(doc.text);
    case Root::uri:
      return test(doc.uri);
    case Root::tags:
      break;
  }
  const json::value* v = lookup(doc);
  if (!v) return op == Op::ne || op == Op::nin;
  return test(*v);
}

template <class V>
bool Filter::Node::test(const V& v) const {
  const auto ordered = [&](auto accept) {
    const auto c = compare(v, operand);
    return c && accept(*c);
  };
  const auto listed = [&] {
    for (const json::value& item : operand.get_array()) {
      if (equal(v, item)) return true;
    }
    return false;
  };
  switch (op) {
    case Op::eq:
      return equal(v, operand);
    case Op::ne:
      return !equal(v, operand);
    case Op::gt:
      return ordered([](int c) { return c > 0; });
    case Op::gte:
      return ordered([](int c) { return c >= 0; });
    case Op::lt:
      return ordered([](int c) { return c < 0; });
    case Op::lte:
      return ordered([](int c) { return c <= 0; });
    case Op::in:
      return listed();
    case Op::nin:
      return !listed();
  }
  return false;
}

namespace {

using Node = Filter::Node;

std::string op_list() {
  std::string out;
  for (const auto& [name, op] : kOps) out += fmt::format("{}{}", out.empty() ? "" : " ", name);
  return out;
}

std::vector<std::string> split(std::string_view text, std::string_view separator) {
  std::vector<std::string> parts;
  for (std::size_t start = 0;;) {
    const std::size_t at = text.find(separator, start);
    parts.emplace_back(text.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + separator.size();
  }
}

// A path's root and tag keys: "id", "tags.a.b", "tags__a__b", "a.b".
void parse_path(std::string_view key, Node& test, const std::string& where) {
  if (key == "id" || key == "text" || key == "uri" || key == "url") {
    test.root = key == "id" ? Root::id : (key == "text" ? Root::text : Root::uri);
    return;
  }
  test.root = Root::tags;
  if (key.starts_with("tags__")) {
    test.path = split(key.substr(6), "__");
  } else {
    test.path = split(key.starts_with("tags.") ? key.substr(5) : key, ".");
  }
  for (const std::string& part : test.path) {
    if (part.empty()) throw Error(fmt::format("{}: '{}' has an empty key in its path", where, key));
  }
}

Node parse_node(const json::value& spec, const std::string& where, std::size_t depth);

Node parse_logical(std::string_view name, const json::value& list, const std::string& where, std::size_t depth) {
  Node node;
  node.kind = name == "$and" ? Node::Kind::all : Node::Kind::any;
  const json::array* items = list.if_array();
  if (!items || items->empty()) throw Error(fmt::format("{}: expected a non-empty list of filters", where));
  for (std::size_t i = 0; i < items->size(); ++i) {
    node.children.push_back(parse_node((*items)[i], fmt::format("{}[{}]", where, i), depth + 1));
  }
  return node;
}

Node parse_test(std::string_view key, Op op, const json::value& operand, const std::string& where) {
  Node test;
  test.kind = Node::Kind::test;
  parse_path(key, test, where);
  test.op = op;
  if ((op == Op::in || op == Op::nin) && !operand.is_array())
    throw Error(fmt::format("{}: expected a list of values", where));
  if ((op == Op::gt || op == Op::gte || op == Op::lt || op == Op::lte) && !operand.is_number() && !operand.is_string())
    throw Error(
        fmt::format("{}: expected a number or a string to compare with, not {}", where, json::serialize(operand)));
  test.operand = operand;
  return test;
}

Node parse_field(std::string_view key, const json::value& value, const std::string& where) {
  const json::object* ops = value.if_object();
  const bool operator_object = ops && !ops->empty() && ops->begin()->key().starts_with("$");
  if (!operator_object) return parse_test(key, Op::eq, value, where);
  Node all;
  for (const auto& kv : *ops) {
    const auto found = std::find_if(kOps.begin(), kOps.end(), [&](const auto& o) { return o.first == kv.key(); });
    if (found == kOps.end()) {
      throw Error(
          fmt::format("{}: unknown operator '{}'; expected one of {}", where, std::string_view(kv.key()), op_list()));
    }
    all.children.push_back(parse_test(key, found->second, kv.value(), fmt::format("{}.{}", where, found->first)));
  }
  return all.children.size() == 1 ? std::move(all.children.front()) : all;
}

Node parse_node(const json::value& spec, const std::string& where, std::size_t depth) {
  if (depth > 32) throw Error(fmt::format("{}: nested deeper than 32 levels", where));
  const json::object* o = spec.if_object();
  if (!o) throw Error(fmt::format("{}: expected an object, not {}", where, json::serialize(spec)));
  Node all;
  for (const auto& kv : *o) {
    const std::string_view key = kv.key();
    const std::string at = fmt::format("{}.{}", where, key);
    if (key == "$and" || key == "$or") {
      all.children.push_back(parse_logical(key, kv.value(), at, depth));
    } else if (key.starts_with("$")) {
      throw Error(
          fmt::format("{}: unknown operator '{}' at the top of a filter; expected $and, $or or a field", at, key));
    } else {
      all.children.push_back(parse_field(key, kv.value(), at));
    }
  }
  return all.children.size() == 1 ? std::move(all.children.front()) : all;
}

}  // namespace

Filter Filter::parse(const json::value& spec, std::string_view where) {
  Filter filter;
  filter.root_ = std::make_shared<const Node>(parse_node(spec, std::string(where), 0));
  return filter;
}

bool Filter::matches(const FilterTarget& doc) const { return !root_ || root_->matches(doc); }

bool Filter::empty() const noexcept { return !root_ || (root_->kind == Node::Kind::all && root_->children.empty()); }

}  // namespace flowline::vector_index
