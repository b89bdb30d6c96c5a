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
// Cost: a document is tested against each condition once; an $in/$nin list is a hash set (one lookup per
// document, whatever its length), and an $or of equalities on one field ({"$or": [{"n": 1}, {"n": 2}]}) is
// read as one $in. FilterLimits bounds the filter's JSON values (its size) and its conditions after that
// (its cost per document).
//
// Parsing throws flowline::RequestError naming the place ("filter.$or[1].book: unknown operator '$regex';
// expected one of ...") or the bound passed. A parsed filter is immutable: evaluate it from any thread.
// Parsed inside a handler call, it belongs to that call (it must not outlive it): matches() throws
// RequestError once the call is cancelled (flowline::Cancellation), so a request given up stops its scan.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace flowline {
class Cancellation;
}

namespace flowline::vector_index {

// What a filter looks at in a stored document.
struct FilterTarget {
  std::string_view id;
  std::string_view text;
  std::string_view uri;
  const boost::json::object& tags;
};

// What a filter may hold; the names are the VectorIndex's `with:` parameters that set them.
struct FilterLimits {
  std::size_t max_size = 10000;      // max_filter_size: JSON values (keys' values, list items, operands)
  std::size_t max_conditions = 100;  // max_filter_conditions: tests of fields, each evaluated per document
};

class Filter {
 public:
  // Parses `spec` (a JSON object; an empty object matches everything). `where` names it in errors. Throws
  // flowline::RequestError.
  static Filter parse(const boost::json::value& spec, std::string_view where = "filter",
                      const FilterLimits& limits = {});

  bool matches(const FilterTarget& doc) const;
  // Whether the filter is empty (matches everything without looking).
  bool empty() const noexcept;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  const Cancellation* cancellation_ = nullptr;  // of the handler call that parsed it (null outside one)
};

}  // namespace flowline::vector_index
