// Document and DocumentArray (document.hpp) and the table of Document fields (document_fields.hpp).
#include "flowline/document.hpp"
#include "flowline/document_fields.hpp"
#include "flowline/error.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/stack.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>

namespace flowline {

namespace {
// splitmix64: a tiny, fast generator; seeded per thread from std::random_device.
struct IdGenerator {
  std::uint64_t state;
  IdGenerator() {
    std::random_device device;
    state = (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};
}  // namespace

std::string generate_id() {
  thread_local IdGenerator generator;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    std::uint64_t bits = generator.next();
    for (int i = 0; i < 16; ++i) {
      id[half * 16 + i] = kHex[bits & 0xF];
      bits >>= 4;
    }
  }
  return id;
}

// ---- DocumentArray ----

DocumentArray::DocumentArray(std::vector<Document> docs) : docs_(std::move(docs)) {}
DocumentArray::DocumentArray(const DocumentArray& other) : docs_(other.docs_) {}
DocumentArray::DocumentArray(DocumentArray&& other) noexcept : docs_(std::move(other.docs_)) {}
DocumentArray& DocumentArray::operator=(const DocumentArray& other) {
  if (this != &other) {
    docs_ = other.docs_;
    index_.clear();
  }
  return *this;
}
DocumentArray& DocumentArray::operator=(DocumentArray&& other) noexcept {
  docs_ = std::move(other.docs_);
  index_.clear();
  other.index_.clear();
  return *this;
}
DocumentArray::~DocumentArray() = default;

Document& DocumentArray::operator[](std::size_t i) { return docs_[i]; }
const Document& DocumentArray::operator[](std::size_t i) const { return docs_[i]; }
void DocumentArray::reserve(std::size_t n) { docs_.reserve(n); }
void DocumentArray::clear() noexcept {
  docs_.clear();
  index_.clear();
}
Document& DocumentArray::push_back(Document doc) { return docs_.emplace_back(std::move(doc)); }

void DocumentArray::append(DocumentArray&& other) {
  if (docs_.empty()) {
    docs_ = std::move(other.docs_);
  } else {
    // Grown geometrically, not to the exact size: a caller that appends answer after answer (Flow::post
    // collecting a large input's responses) would otherwise move every document already here on every append,
    // O(n^2) in all — 300,000 texts in requests of 1,024 moved ~44M documents, 6x the encoding's own time on a GPU.
    const std::size_t need = docs_.size() + other.docs_.size();
    if (need > docs_.capacity()) docs_.reserve(std::max(need, 2 * docs_.capacity()));
    docs_.insert(docs_.end(), std::make_move_iterator(other.docs_.begin()), std::make_move_iterator(other.docs_.end()));
  }
  other.clear();
}

DocumentArray DocumentArray::take(std::size_t first, std::size_t count) {
  if (first > docs_.size() || count > docs_.size() - first) {
    throw Error(fmt::format("DocumentArray::take({}, {}) out of range for {} documents", first, count, docs_.size()));
  }
  std::vector<Document> taken(std::make_move_iterator(docs_.begin() + first),
                              std::make_move_iterator(docs_.begin() + first + count));
  docs_.erase(docs_.begin() + first, docs_.begin() + first + count);
  index_.clear();
  return DocumentArray(std::move(taken));
}

std::vector<std::string_view> DocumentArray::texts() const {
  std::vector<std::string_view> out;
  out.reserve(docs_.size());
  for (const auto& d : docs_) out.emplace_back(d.text);
  return out;
}

at::Tensor DocumentArray::embeddings() const {
  if (docs_.empty()) throw Error("DocumentArray::embeddings(): the array is empty");
  std::vector<at::Tensor> rows;
  rows.reserve(docs_.size());
  const auto& first = docs_.front().embedding;
  for (std::size_t i = 0; i < docs_.size(); ++i) {
    const auto& e = docs_[i].embedding;
    if (!e.defined()) {
      throw Error(fmt::format("DocumentArray::embeddings(): document {} (id {}) has no embedding", i, docs_[i].id));
    }
    if (e.sizes() != first.sizes() || e.scalar_type() != first.scalar_type() || e.device() != first.device()) {
      throw Error(
          fmt::format("DocumentArray::embeddings(): document {} (id {}) has an embedding of another shape, dtype or "
                      "device than document 0",
                      i, docs_[i].id));
    }
    rows.push_back(e);
  }
  if (!first.device().is_cpu()) return at::stack(rows);
  // On the CPU the rows are copied straight into one tensor, over the intra-op threads: at::stack checks and
  // dispatches each input on one thread, ~1 us a row (300,000 rows: 0.3 s, a sixth of encoding them on a GPU).
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(rows.size())};
  shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
  at::Tensor out = at::empty(shape, first.options());
  const std::size_t row_bytes = static_cast<std::size_t>(first.numel()) * first.element_size();
  auto* base = static_cast<std::uint8_t*>(out.data_ptr());
  at::parallel_for(0, static_cast<std::int64_t>(rows.size()), 4096, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const at::Tensor& row = rows[static_cast<std::size_t>(i)];
      if (row.is_contiguous()) {
        std::memcpy(base + static_cast<std::size_t>(i) * row_bytes, row.data_ptr(), row_bytes);
      } else {
        out.select(0, i).copy_(row);
      }
    }
  });
  return out;
}

void DocumentArray::set_embeddings(const at::Tensor& matrix) {
  if (!matrix.defined() || matrix.dim() < 1 || matrix.size(0) != static_cast<int64_t>(docs_.size())) {
    throw Error(fmt::format("DocumentArray::set_embeddings(): expected a tensor with {} rows, got {}", docs_.size(),
                            matrix.defined() ? c10::str(matrix.sizes()) : std::string("none")));
  }
  for (std::size_t i = 0; i < docs_.size(); ++i) docs_[i].embedding = matrix.select(0, static_cast<int64_t>(i));
}

void DocumentArray::rebuild_index() const {
  index_.clear();
  index_.reserve(docs_.size());
  for (std::size_t i = 0; i < docs_.size(); ++i) index_.emplace(docs_[i].id, i);
}

const Document* DocumentArray::find(std::string_view id) const {
  const std::string key(id);
  // A hit is checked against the document, so a stale index never returns a wrong document; a miss
  // rebuilds the index once, so documents whose ids changed since are found too.
  auto lookup = [&]() -> const Document* {
    auto it = index_.find(key);
    if (it != index_.end() && it->second < docs_.size() && docs_[it->second].id == id) return &docs_[it->second];
    return nullptr;
  };
  if (index_.size() == docs_.size()) {
    if (const Document* doc = lookup()) return doc;
  }
  rebuild_index();
  return lookup();
}

Document* DocumentArray::find(std::string_view id) {
  return const_cast<Document*>(static_cast<const DocumentArray*>(this)->find(id));
}

// ---- Document ----

Document::Document() : id(generate_id()) {}
Document::Document(std::string text_) : id(generate_id()), text(std::move(text_)) {}
Document::Document(WithId with) : id(std::move(with.id)) {}

void Document::merge_from(Document&& other) {
  for_each_document_field([&](DocumentField field, std::string_view, auto member) {
    auto& mine = this->*member;
    auto& theirs = other.*member;
    using T = std::remove_reference_t<decltype(mine)>;
    if (field == DocumentField::id) return;  // the same document: its id stays
    if constexpr (std::is_same_v<T, Tags>) {
      for (auto& [key, value] : theirs) mine[key] = std::move(value);
    } else if constexpr (std::is_same_v<T, decltype(scores)>) {
      for (auto& [name, score] : theirs) mine[name] = score;
    } else if constexpr (std::is_same_v<T, DocumentArray>) {
      for (auto& doc : theirs) {
        if (!mine.find(doc.id)) mine.push_back(std::move(doc));
      }
    } else {
      if (field_is_empty(mine)) mine = std::move(theirs);
    }
  });
}

// ---- the table of fields ----

std::optional<DocumentField> find_document_field(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kDocumentFieldNames.size(); ++i) {
    if (kDocumentFieldNames[i] == name) return static_cast<DocumentField>(i);
  }
  return std::nullopt;
}

std::string document_field_list() { return fmt::format("{}", fmt::join(kDocumentFieldNames, ", ")); }

FieldSet FieldSet::parse(const std::vector<std::string>& names) {
  if (names.empty()) return all();
  FieldSet set;
  set.insert(DocumentField::id);
  for (const auto& name : names) {
    const auto field = find_document_field(name);
    if (!field) {
      const std::string hint =
          closest_match(name, std::vector<std::string>(kDocumentFieldNames.begin(), kDocumentFieldNames.end()));
      throw Error(fmt::format("unknown document field '{}'{}; expected one of {}", name,
                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), document_field_list()));
    }
    set.insert(*field);
  }
  return set;
}

Document deep_copy(const Document& doc) {
  Document copy = doc;
  if (copy.tensor.defined()) copy.tensor = doc.tensor.clone();
  if (copy.embedding.defined()) copy.embedding = doc.embedding.clone();
  copy.chunks = deep_copy(doc.chunks);
  copy.matches = deep_copy(doc.matches);
  return copy;
}

DocumentArray deep_copy(const DocumentArray& docs) {
  std::vector<Document> out;
  out.reserve(docs.size());
  for (const auto& d : docs) out.push_back(deep_copy(d));
  return DocumentArray(std::move(out));
}

}  // namespace flowline
