// Mongo-like filters on stored documents (filter.hpp): a tree of AND/OR nodes over (path, operator, value)
// tests; $in and $nin lists are hash sets.
#include "filter.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"

#include <boost/json/serialize.hpp>
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <unordered_set>
#include <utility>
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

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

}  // namespace

// The items of an $in/$nin list, for one lookup per document with equal()'s meaning: numbers by value across
// int64, uint64 and double (an integer equals the same double; compare() finds a NaN equal to every number),
// strings by bytes, true, false and null by kind, lists and objects structurally (few: scanned).
class ValueSet {
 public:
  void add(const json::value& item) {
    switch (item.kind()) {
      case json::kind::string:
        strings_.emplace(item.get_string());
        return;
      case json::kind::int64:
        add_integer(item.get_int64());
        return;
      case json::kind::uint64:
        if (item.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
          add_integer(static_cast<std::int64_t>(item.get_uint64()));
        } else {
          large_.insert(item.get_uint64());
          integers_as_doubles_.insert(static_cast<double>(item.get_uint64()));
        }
        any_number_ = true;
        return;
      case json::kind::double_:
        if (std::isnan(item.get_double())) nan_ = true;
        doubles_.insert(item.get_double());
        any_number_ = true;
        return;
      case json::kind::bool_:
        (item.get_bool() ? true_ : false_) = true;
        return;
      case json::kind::null:
        null_ = true;
        return;
      default:
        others_.push_back(item);
    }
  }

  bool contains(std::string_view s) const { return strings_.find(s) != strings_.end(); }

  bool contains(const json::value& v) const {
    switch (v.kind()) {
      case json::kind::string:
        return contains(std::string_view(v.get_string()));
      case json::kind::int64:
        return nan_ || integers_.contains(v.get_int64()) || doubles_.contains(static_cast<double>(v.get_int64()));
      case json::kind::uint64: {
        const std::uint64_t u = v.get_uint64();
        const bool exact = u <= static_cast<std::uint64_t>(INT64_MAX) ? integers_.contains(static_cast<std::int64_t>(u))
                                                                      : large_.contains(u);
        return nan_ || exact || doubles_.contains(static_cast<double>(u));
      }
      case json::kind::double_: {
        const double d = v.get_double();
        if (std::isnan(d)) return any_number_;
        return nan_ || doubles_.contains(d) || integers_as_doubles_.contains(d);
      }
      case json::kind::bool_:
        return v.get_bool() ? true_ : false_;
      case json::kind::null:
        return null_;
      default:
        for (const json::value& item : others_) {
          if (item == v) return true;
        }
        return false;
    }
  }

 private:
  void add_integer(std::int64_t i) {
    integers_.insert(i);
    integers_as_doubles_.insert(static_cast<double>(i));
    any_number_ = true;
  }

  std::unordered_set<std::string, StringHash, std::equal_to<>> strings_;
  std::unordered_set<std::int64_t> integers_;       // int64 items, and uint64 items that fit one
  std::unordered_set<std::uint64_t> large_;         // uint64 items above INT64_MAX
  std::unordered_set<double> doubles_;              // double items
  std::unordered_set<double> integers_as_doubles_;  // integer items as doubles, for a double's lookup
  bool nan_ = false, any_number_ = false, true_ = false, false_ = false, null_ = false;
  std::vector<json::value> others_;  // lists and objects
};

struct Filter::Node {
  enum class Kind { all, any, test } kind = Kind::all;
  std::vector<Node> children;  // all / any
  // test:
  Root root = Root::tags;
  std::vector<std::string> path;  // within the tags
  Op op = Op::eq;
  json::value operand;                    // $in/$nin: the list
  std::shared_ptr<const ValueSet> items;  // $in/$nin: the list's items as a set

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
  const auto listed = [&] { return items->contains(v); };
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

// A value as an error message shows it: its JSON, cut after 60 characters.
std::string shown(const json::value& v) {
  std::string text = json::serialize(v);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

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
    if (part.empty()) throw RequestError(fmt::format("{}: '{}' has an empty key in its path", where, key));
  }
}

Node parse_node(const json::value& spec, const std::string& where, std::size_t depth);

// An $or's tests of equality or membership on one field become one $in of all their values: one set lookup
// per document instead of one test per value ({"$or": [{"n": 1}, {"n": 2}]} is {"n": {"$in": [1, 2]}}).
void merge_equalities(Node& any) {
  std::map<std::pair<Root, std::vector<std::string>>, std::size_t> field_at;  // field -> its $in in `kept`
  std::vector<Node> kept;
  for (Node& child : any.children) {
    const bool listed = child.kind == Node::Kind::test && (child.op == Op::eq || child.op == Op::in);
    if (!listed) {
      kept.push_back(std::move(child));
      continue;
    }
    const auto [at, first] = field_at.try_emplace({child.root, child.path}, kept.size());
    if (first) {
      kept.push_back(std::move(child));
      continue;
    }
    Node& merged = kept[at->second];
    merged.items.reset();  // made again below, of every value
    if (merged.op == Op::eq) {
      merged.operand = json::array{std::move(merged.operand)};
      merged.op = Op::in;
    }
    json::array& values = merged.operand.get_array();
    if (child.op == Op::eq) {
      values.push_back(std::move(child.operand));
    } else {
      for (json::value& v : child.operand.get_array()) values.push_back(std::move(v));
    }
  }
  for (Node& node : kept) {
    if (node.kind != Node::Kind::test || node.op != Op::in || node.items) continue;
    auto items = std::make_shared<ValueSet>();
    for (const json::value& v : node.operand.get_array()) items->add(v);
    node.items = std::move(items);
  }
  any.children = std::move(kept);
}

Node parse_logical(std::string_view name, const json::value& list, const std::string& where, std::size_t depth) {
  Node node;
  node.kind = name == "$and" ? Node::Kind::all : Node::Kind::any;
  const json::array* items = list.if_array();
  if (!items || items->empty()) throw RequestError(fmt::format("{}: expected a non-empty list of filters", where));
  for (std::size_t i = 0; i < items->size(); ++i) {
    node.children.push_back(parse_node((*items)[i], fmt::format("{}[{}]", where, i), depth + 1));
  }
  if (node.kind == Node::Kind::any) merge_equalities(node);
  return node;
}

Node parse_test(std::string_view key, Op op, const json::value& operand, const std::string& where) {
  Node test;
  test.kind = Node::Kind::test;
  parse_path(key, test, where);
  test.op = op;
  if ((op == Op::in || op == Op::nin) && !operand.is_array())
    throw RequestError(fmt::format("{}: expected a list of values", where));
  if ((op == Op::gt || op == Op::gte || op == Op::lt || op == Op::lte) && !operand.is_number() && !operand.is_string())
    throw RequestError(fmt::format("{}: expected a number or a string to compare with, not {}", where, shown(operand)));
  test.operand = operand;
  if (op == Op::in || op == Op::nin) {
    auto items = std::make_shared<ValueSet>();
    for (const json::value& v : operand.get_array()) items->add(v);
    test.items = std::move(items);
  }
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
      throw RequestError(
          fmt::format("{}: unknown operator '{}'; expected one of {}", where, std::string_view(kv.key()), op_list()));
    }
    all.children.push_back(parse_test(key, found->second, kv.value(), fmt::format("{}.{}", where, found->first)));
  }
  return all.children.size() == 1 ? std::move(all.children.front()) : all;
}

Node parse_node(const json::value& spec, const std::string& where, std::size_t depth) {
  if (depth > 32) throw RequestError(fmt::format("{}: nested deeper than 32 levels", where));
  const json::object* o = spec.if_object();
  if (!o) throw RequestError(fmt::format("{}: expected an object, not {}", where, shown(spec)));
  Node all;
  for (const auto& kv : *o) {
    const std::string_view key = kv.key();
    const std::string at = fmt::format("{}.{}", where, key);
    if (key == "$and" || key == "$or") {
      all.children.push_back(parse_logical(key, kv.value(), at, depth));
    } else if (key.starts_with("$")) {
      throw RequestError(
          fmt::format("{}: unknown operator '{}' at the top of a filter; expected $and, $or or a field", at, key));
    } else {
      all.children.push_back(parse_field(key, kv.value(), at));
    }
  }
  return all.children.size() == 1 ? std::move(all.children.front()) : all;
}

// The JSON values `spec` holds, itself included, counted without recursion; stops past `bound`.
std::size_t values_in(const json::value& spec, std::size_t bound) {
  std::size_t count = 0;
  std::vector<const json::value*> pending{&spec};
  while (!pending.empty() && count <= bound) {
    const json::value* v = pending.back();
    pending.pop_back();
    ++count;
    if (const json::object* o = v->if_object()) {
      for (const auto& kv : *o) pending.push_back(&kv.value());
    } else if (const json::array* a = v->if_array()) {
      for (const json::value& item : *a) pending.push_back(&item);
    }
  }
  return count;
}

// The conditions a document is tested against: the tests of fields (an $in list is one).
std::size_t conditions_in(const Node& node) {
  std::size_t count = node.kind == Node::Kind::test ? 1 : 0;
  for (const Node& child : node.children) count += conditions_in(child);
  return count;
}

}  // namespace

Filter Filter::parse(const json::value& spec, std::string_view where, const FilterLimits& limits) {
  if (values_in(spec, limits.max_size) > limits.max_size) {
    throw RequestError(fmt::format(
        "{}: holds more than {} values (keys' values, list items and operands), this index's max_filter_size: "
        "send a shorter filter, or raise max_filter_size in the index's `with:`",
        where, limits.max_size));
  }
  Filter filter;
  filter.cancellation_ = this_thread_cancellation();
  auto root = std::make_shared<const Node>(parse_node(spec, std::string(where), 0));
  if (const std::size_t conditions = conditions_in(*root); conditions > limits.max_conditions) {
    throw RequestError(fmt::format(
        "{}: {} conditions, more than this index's max_filter_conditions ({}): each is tested on every document "
        "(an $in list, or an $or of equalities on one field, is one); send fewer, or raise max_filter_conditions "
        "in the index's `with:`",
        where, conditions, limits.max_conditions));
  }
  filter.root_ = std::move(root);
  return filter;
}

bool Filter::matches(const FilterTarget& doc) const {
  // Per document: a large filter over many documents may run for seconds, and a request given up (its
  // deadline passed) must free the index within one document's test. A load or two: no call, no TLS.
  if (cancellation_ && cancellation_->requested()) throw_if_cancelled("the filter's evaluation");
  return !root_ || root_->matches(doc);
}

bool Filter::empty() const noexcept { return !root_ || (root_->kind == Node::Kind::all && root_->children.empty()); }

}  // namespace flowline::vector_index
