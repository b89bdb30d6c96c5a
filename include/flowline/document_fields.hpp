// flowline/document_fields.hpp — the one table of Document fields: name, member and kind of each field.
//
// Every place that needs "all the fields of a Document" walks this table instead of listing them by hand:
// Document::merge_from, the JSON reader and writer (io.hpp) and every writer's `fields:` selection
// (writers.hpp, JsonlWriter, TsvWriter). Adding a field to Document means adding one row here, and the
// compiler then asks for its handling wherever the field's type is new.
//
// The table is constant and the functions are pure: callable from any thread.
#pragma once

#include "flowline/document.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace flowline {

// The fields, in the order the JSON form writes them.
enum class DocumentField : std::uint8_t {
  id,
  text,
  blob,
  tensor,
  embedding,
  tags,
  mime_type,
  uri,
  scores,
  chunks,
  matches,
  parent_id
};

inline constexpr std::array<std::string_view, 12> kDocumentFieldNames = {
    "id",        "text", "blob",   "tensor", "embedding", "tags",
    "mime_type", "uri",  "scores", "chunks", "matches",   "parent_id"};

// The members, in the same order as DocumentField and kDocumentFieldNames.
inline constexpr auto kDocumentFieldMembers =
    std::make_tuple(&Document::id, &Document::text, &Document::blob, &Document::tensor, &Document::embedding,
                    &Document::tags, &Document::mime_type, &Document::uri, &Document::scores, &Document::chunks,
                    &Document::matches, &Document::parent_id);
static_assert(std::tuple_size_v<decltype(kDocumentFieldMembers)> == kDocumentFieldNames.size());

// Calls f(DocumentField, std::string_view name, member pointer) for every field, in table order.
template <class F>
constexpr void for_each_document_field(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (f(static_cast<DocumentField>(I), kDocumentFieldNames[I], std::get<I>(kDocumentFieldMembers)), ...);
  }
  (std::make_index_sequence<kDocumentFieldNames.size()>{});
}

// Whether a field's value is "unset": an empty string, blob, map or array, or an undefined tensor.
template <class T>
bool field_is_empty(const T& value) {
  if constexpr (std::is_same_v<T, at::Tensor>) {
    return !value.defined();
  } else {
    return value.empty();
  }
}

constexpr std::string_view field_name(DocumentField field) {
  return kDocumentFieldNames[static_cast<std::size_t>(field)];
}

// The field of this name, or nothing.
std::optional<DocumentField> find_document_field(std::string_view name) noexcept;

// A set of fields (a bit per field), e.g. what a writer's `fields:` parameter selects.
class FieldSet {
 public:
  constexpr FieldSet() = default;
  static constexpr FieldSet all() { return FieldSet((1u << kDocumentFieldNames.size()) - 1); }
  constexpr bool contains(DocumentField f) const { return bits_ & bit(f); }
  constexpr FieldSet& insert(DocumentField f) {
    bits_ |= bit(f);
    return *this;
  }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr bool operator==(const FieldSet&) const = default;

  // Parses field names (as in a `fields:` parameter). An empty list means all fields; `id` is always in the
  // set. An unknown name throws flowline::Error: "unknown document field 'txt' (did you mean 'text'?);
  // expected one of id, text, ...".
  static FieldSet parse(const std::vector<std::string>& names);

 private:
  constexpr explicit FieldSet(std::uint32_t bits) : bits_(bits) {}
  static constexpr std::uint32_t bit(DocumentField f) { return 1u << static_cast<unsigned>(f); }
  std::uint32_t bits_ = 0;
};

// "id, text, blob, ..." for messages.
std::string document_field_list();

}  // namespace flowline
