// flowline/document.hpp — Document and DocumentArray, the data that flows between executors.
//
// A Document is a plain value type: copy it to duplicate (tensors are shared, as at::Tensor copies are),
// move it to hand it on. A DocumentArray is an ordered sequence of Documents with batch accessors.
// Neither type is thread-safe: one thread owns a batch at a time, and the Flow hands batches from thread
// to thread by moving them.
//
// Fields follow Jina's Document: id, text, blob, tensor, embedding, tags, mime_type, uri, scores, chunks,
// matches, parent_id. Tensors may have any dtype and live on any device.
#pragma once

#include <ATen/core/Tensor.h>
#include <boost/json/object.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flowline {

class Document;

// JSON-like tags: null, bool, int64, uint64, double, string, array and object. Integers stay integers.
using Tags = boost::json::object;
// Raw bytes of a Document's blob.
using Bytes = std::vector<std::uint8_t>;

// A new random document id: 32 lowercase hex characters (128 random bits). Thread-safe and cheap
// (a per-thread generator), so it can run for every document of a million-document stream.
std::string generate_id();

// An ordered sequence of Documents.
class DocumentArray {
 public:
  using iterator = std::vector<Document>::iterator;
  using const_iterator = std::vector<Document>::const_iterator;

  DocumentArray() = default;
  explicit DocumentArray(std::vector<Document> docs);
  DocumentArray(const DocumentArray&);
  DocumentArray(DocumentArray&&) noexcept;
  DocumentArray& operator=(const DocumentArray&);
  DocumentArray& operator=(DocumentArray&&) noexcept;
  ~DocumentArray();

  // (Defined after Document, which they need complete: Clang instantiates them here otherwise.)
  std::size_t size() const noexcept;
  bool empty() const noexcept;
  Document& operator[](std::size_t i);
  const Document& operator[](std::size_t i) const;
  iterator begin() noexcept;
  iterator end() noexcept;
  const_iterator begin() const noexcept;
  const_iterator end() const noexcept;

  void reserve(std::size_t n);
  void clear() noexcept;
  Document& push_back(Document doc);
  // Moves every document of `other` to the end of this array.
  void append(DocumentArray&& other);
  // Removes and returns documents [first, first + count) as a new array (moved, not copied).
  DocumentArray take(std::size_t first, std::size_t count);
  // Removes every document for which `pred(const Document&)` is true, keeping the others in order: how a
  // filter executor drops documents. Returns how many were removed.
  template <class Pred>
  std::size_t erase_if(Pred pred);

  // The underlying storage, for algorithms that need a std::vector.
  std::vector<Document>& docs() noexcept { return docs_; }
  const std::vector<Document>& docs() const noexcept { return docs_; }

  // Views of every document's text, in order. No text is copied; the views live as long as the
  // documents are neither modified nor destroyed.
  std::vector<std::string_view> texts() const;

  // All embeddings as one [N, D] tensor (stacked; every document must have an embedding of the same shape,
  // dtype and device, otherwise flowline::Error names the first document that differs).
  at::Tensor embeddings() const;
  // Sets document i's embedding to row i of `matrix` ([N, ...], N == size()). Rows are views of `matrix`:
  // no data is copied per document.
  void set_embeddings(const at::Tensor& matrix);

  // The document with this id, or nullptr. Uses an index built on first use and rebuilt when the array
  // changed: look-ups that hit are O(1) on average, a miss costs one rebuild. The pointer is valid until the
  // array changes (an append, erase or reallocation). Not thread-safe even when const (the index is built
  // lazily): one thread at a time.
  Document* find(std::string_view id);
  const Document* find(std::string_view id) const;

 private:
  void rebuild_index() const;

  std::vector<Document> docs_;
  mutable std::unordered_map<std::string, std::size_t> index_;  // id -> position, see find()
};

class Document {
 public:
  // A document with a freshly generated id and nothing else.
  Document();
  // A text document with a freshly generated id.
  explicit Document(std::string text);
  // A document with this id and nothing else (no id generated): Document(Document::WithId{"doc-1"}).
  struct WithId {
    std::string id;
  };
  explicit Document(WithId with);

  std::string id;
  std::string text;
  Bytes blob;
  at::Tensor tensor;     // undefined when unset
  at::Tensor embedding;  // undefined when unset
  Tags tags;
  std::string mime_type;
  std::string uri;
  std::map<std::string, float, std::less<>> scores;
  DocumentArray chunks;
  DocumentArray matches;
  std::string parent_id;

  // Merges `other` (a version of the same document from another branch of a flow) into this one:
  // fields empty here are taken from `other`, tags and scores are united (other's value wins on a clash),
  // chunks and matches whose ids are not here yet are appended.
  void merge_from(Document&& other);
};

inline std::size_t DocumentArray::size() const noexcept { return docs_.size(); }
inline bool DocumentArray::empty() const noexcept { return docs_.empty(); }
inline DocumentArray::iterator DocumentArray::begin() noexcept { return docs_.begin(); }
inline DocumentArray::iterator DocumentArray::end() noexcept { return docs_.end(); }
inline DocumentArray::const_iterator DocumentArray::begin() const noexcept { return docs_.begin(); }
inline DocumentArray::const_iterator DocumentArray::end() const noexcept { return docs_.end(); }
template <class Pred>
std::size_t DocumentArray::erase_if(Pred pred) {
  const std::size_t removed = std::erase_if(docs_, [&pred](const Document& doc) { return pred(doc); });
  if (removed > 0) index_.clear();  // positions moved: find() rebuilds its index
  return removed;
}

// Deep copy: like a copy, but tensors and embeddings are cloned too.
Document deep_copy(const Document& doc);
DocumentArray deep_copy(const DocumentArray& docs);

}  // namespace flowline
