// flowline/io.hpp — documents in and out: JSONL, text files, and DocumentSources that feed Flow::post().
//
// JSON form of a Document (one per line in JSONL): {"id": ..., "text": ..., "blob": base64, "tensor" and
// "embedding": {"dtype": "float32", "shape": [2, 3], "data": [[...], [...]]}, "tags": {...},
// "mime_type", "uri", "scores": {name: number}, "chunks": [...], "matches": [...], "parent_id"}.
// Empty fields are left out when writing. Floats are written in their shortest exact form, so reading
// back gives the same bits. Integers in tags stay integers.
//
// Sources are used by one thread at a time (the thread calling Flow::post).
#pragma once

#include "flowline/document.hpp"
#include "flowline/document_fields.hpp"

#include <boost/json/value.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace flowline {

// Appends the JSON form of `doc` to `out` (no newline). With `fields`, only those fields (and always the id).
// Thread-safe for distinct `out` strings (writers format documents on several threads).
void append_json(std::string& out, const Document& doc);
void append_json(std::string& out, const Document& doc, FieldSet fields);
std::string to_json(const Document& doc);
// Building blocks of the JSON form, for servers and writers that shape their own JSON around documents:
// `text` as a quoted, escaped JSON string (UTF-8 passes through); `n` floats as a JSON array in their
// shortest exact form (non-finite values as "nan", "inf", "-inf"); `size` bytes as a quoted base64 string.
void append_json_text(std::string& out, std::string_view text);
void append_json_floats(std::string& out, const float* values, std::size_t n);
void append_json_base64(std::string& out, const void* data, std::size_t size);
// A tensor's values alone, as nested JSON lists (a number for a 0-d tensor), without its dtype and shape: the
// form Jina's and docarray's JSON give a tensor (the "data" of flowline's {"dtype", "shape", "data"}).
void append_json_tensor_values(std::string& out, const at::Tensor& tensor);
// One field's value in the JSON form, for codecs that name or shape some fields their own way (the gateway's
// Jina codec) and take the rest as they are: append_json_field appends the value only (no name);
// read_json_field sets the field from `value`, throwing flowline::Error as document_from_json does.
void append_json_field(std::string& out, const Document& doc, DocumentField field);
void read_json_field(Document& doc, DocumentField field, const boost::json::value& value);
// Parses a document from JSON. Throws flowline::Error describing the bad field ("field 'tensor.shape':
// expected a list of integers").
Document document_from_json(const boost::json::value& json);
Document document_from_json(std::string_view json_text);

// Reads a whole JSONL file. Throws InputError with file:line for a bad line.
DocumentArray read_jsonl(const std::filesystem::path& path);
// Writes documents as JSONL (truncating). Throws flowline::Error when the file cannot be written.
void write_jsonl(const std::filesystem::path& path, const DocumentArray& docs);

// Checks that `text` is valid UTF-8. Returns the byte offset of the first bad sequence, or npos.
std::size_t find_invalid_utf8(std::string_view text) noexcept;

// Reads a file into a string. Throws InputError ("cannot open 'x': No such file or directory").
std::string read_file(const std::filesystem::path& path);

// What DocumentSource::skip() passed over.
struct Skipped {
  std::uint64_t documents = 0;  // fewer than asked only where the input ended
  // The last skipped document's id where documents carry their own (jsonl: the id read() would have given it,
  // a generated one for a line without); empty where a source's documents have none (lines, paragraphs, text,
  // images) or nothing was skipped.
  std::string last_id;
};

// A stream of documents for Flow::post().
class DocumentSource {
 public:
  virtual ~DocumentSource() = default;
  // Appends up to `max` documents to `out`; returns how many (0 at the end). Throws InputError.
  virtual std::size_t read(DocumentArray& out, std::size_t max) = 0;
  // Passes over the next `n` documents (fewer where the input ends first) without handing them out: read()
  // continues after them. The default reads and drops them; the file sources (open_file_source) find their
  // documents' boundaries without building documents. Skipping checks less than reading: a file source
  // neither checks the UTF-8 of a line or file it passes over unread nor parses a jsonl line other than the
  // last one skipped — `flowline run --resume`, its caller, checks the input's hash first, so the skipped
  // part is byte for byte what an earlier run read and accepted. Throws InputError (file:line) for what it
  // does read.
  virtual Skipped skip(std::uint64_t n);
  // How many documents read() has still to hand out, counted without building them and without moving this
  // source (the file sources scan the rest of the input again from where they stand, so a pipe cannot be
  // counted); std::nullopt where the source cannot tell without handing them out (the default).
  virtual std::optional<std::uint64_t> count_left();
  // Whether the documents carry ids of their own, the same on every read of this input (a jsonl input's, an
  // array input's sidecar's): `flowline run --resume` then keeps them, where it gives the other inputs' documents
  // ids made of the input's hash and their position.
  virtual bool carries_ids() const { return false; }
};

// Hands out the documents of an array (moved out of it as they are read).
class ArraySource : public DocumentSource {
 public:
  explicit ArraySource(DocumentArray docs) : docs_(std::move(docs)) {}
  std::size_t read(DocumentArray& out, std::size_t max) override;
  Skipped skip(std::uint64_t n) override;
  std::optional<std::uint64_t> count_left() override { return docs_.size() - next_; }
  bool carries_ids() const override { return true; }

 private:
  DocumentArray docs_;
  std::size_t next_ = 0;
};

// Wraps another source and reports the end of input as soon as `stop` is true (checked before every read),
// so a flow finishes the work in flight and returns, e.g. after Ctrl-C. Both are borrowed and must outlive it;
// `stop` may be set from any thread or a signal handler (it is lock-free).
class StoppableSource : public DocumentSource {
 public:
  StoppableSource(DocumentSource& inner, const std::atomic<bool>& stop) : inner_(inner), stop_(stop) {}
  std::size_t read(DocumentArray& out, std::size_t max) override;
  // Passed through (skipping and counting hand nothing to the flow, so `stop` does not cut them short).
  Skipped skip(std::uint64_t n) override { return inner_.skip(n); }
  std::optional<std::uint64_t> count_left() override { return inner_.count_left(); }
  bool carries_ids() const override { return inner_.carries_ids(); }
  // Whether a read found `stop` set (the input was cut short).
  bool stopped() const noexcept { return stopped_; }

 private:
  DocumentSource& inner_;
  const std::atomic<bool>& stop_;
  bool stopped_ = false;
};

enum class InputFormat {
  Lines,        // one document per non-empty line
  Paragraphs,   // one document per blank-line separated paragraph, trimmed
  Jsonl,        // one JSON document per line
  Text,         // the whole file as one document
  Images,       // one document per .jpg/.jpeg/.png/.webp file, its bytes as the blob (docs/images.md)
  Npy,          // one document per row of a 2-D .npy array, its embedding (ids, texts, tags from the sidecar)
  Safetensors,  // the same for a 2-D tensor of a .safetensors file
};

// The input formats by name, in the order they are documented: the one list the parser and the launcher's
// options use.
const std::vector<std::pair<std::string, InputFormat>>& input_formats();
// "lines", "paragraphs", "jsonl", "text", "images", "npy", "safetensors" → InputFormat; throws flowline::Error
// listing the choices.
InputFormat parse_input_format(std::string_view name);
// The format a file's extension implies when --input-format is not given: jsonl for .jsonl and .ndjson, npy
// for .npy, safetensors for .safetensors, else lines.
std::string default_input_format(const std::filesystem::path& path);

// A source reading a file (streamed line by line for lines and jsonl, so inputs larger than memory work),
// or every file of a folder in name order (hidden files skipped).
// Every document gets uri = the path; paragraphs and lines also get tags "line" (1-based first line); from a
// folder, documents of the text formats also get the tag "file" (the file's name without extension).
// Invalid UTF-8 or a bad JSONL line throws InputError with the line number.
// Images: one document per JPEG/PNG/WebP file (by extension, any case) of the folder and its subfolders
// (hidden ones skipped), sorted by path, or of the one file given: uri = the path, mime_type from the extension,
// blob = the file's bytes, read as the document is handed out (so no more files are held than the flow's request
// window asks for). The bytes are not decoded here: a bad image fails its document in the executor.
// Npy and Safetensors: one file (not a folder), read in blocks as documents are handed out: one document per
// row of its 2-D float array (.npy: little-endian float16/32/64, C order, format versions 1-3; .safetensors:
// the tensor `embedding`, or its only tensor, F16/BF16/F32/F64), the row as its float32 embedding. Where the
// sidecar a binary output writes beside it exists (sidecar_path_for: emb.npy -> emb.docs.jsonl), line i of
// it is row i's document (id, text, tags, ...; it must hold no embedding and exactly as many documents as the
// array has rows, checked when the file is opened); without one, each document gets a generated id, uri =
// the path and the tag "row" (0-based). A header that is not what it should be, data shorter than the header
// says, or a sidecar that does not match throws InputError naming the file and what was expected.
std::unique_ptr<DocumentSource> open_file_source(const std::filesystem::path& path, InputFormat format);
// The same for standard input (`flowline run --input -`), streamed as a pipe is; errors and documents' uri
// call it "<stdin>". Images are refused from standard input (they need a folder or a file).
std::unique_ptr<DocumentSource> open_stdin_source(InputFormat format);

}  // namespace flowline
