// Filters on stored documents: a subset of Jina's/DocArray's Mongo-like query language, parsed once per
// request and evaluated per document. Private to the VectorIndex.
//
//   {"tags.year": {"$gte": 1850}, "$or": [{"book": "moby-dick"}, {"book": {"$in": ["emma", "persuasion"]}}]}
//
// A filter is an object; its keys are ANDed. A key is a field path — "id", "text", "uri", or a tag:
// "tags.a.b", DocArray v1's "tags__a__b", or a bare "a.b" (a tag) — or a logical operator: "$and" and "$or"
// take a list of filters. A path's value is an operator object ({"$gt": 3, "$lt": 9}, ANDed) or a plain
// value ($eq). Operators: $eq $ne $gt $gte $lt $lte $in $nin. Numbers compare as numbers (an integer equals
// the same double), strings by bytes, and other types only by $eq/$ne/$in/$nin; an ordering between
// mismatched types is false. A missing field satisfies only $ne and $nin.
//
// Parsing throws flowline::Error naming the place ("filter.$or[1].book: unknown operator '$regex'; expected
// one of ..."). A parsed filter is immutable: evaluate it from any thread.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace flowline::vector_index {

// What a filter looks at in a stored document.
struct FilterTarget {
  std::string_view id;
  std::string_view text;
  std::string_view uri;
  const boost::json::object& tags;
};

class Filter {
 public:
  // Parses `spec` (a JSON object; an empty object matches everything). `where` names it in errors.
  static Filter parse(const boost::json::value& spec, std::string_view where = "filter");

  bool matches(const FilterTarget& doc) const;
  // Whether the filter is empty (matches everything without looking).
  bool empty() const noexcept;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace flowline::vector_index
