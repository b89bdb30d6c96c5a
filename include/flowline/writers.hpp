// flowline/writers.hpp — output files of documents that keep up with a GPU encoder: JSONL, .npy, .safetensors.
//
// One DocumentWriter owns one output file. Its owner (a writer executor, or the launcher's --output) calls
// write() from one thread at a time, in output order, then close() once. The writer may use its own threads
// (JSONL formats on a pool and writes on a writer thread), but never calls back into its owner.
//
//   JSONL        one JSON document per line (io.hpp's form, the `fields` chosen). Documents are formatted on
//                `threads` threads, in order, and written in blocks of at least 1 MiB that end on a newline, so
//                a crash leaves whole lines only.
//   .npy         an [N, D] float32 or float16 array of the embeddings (numpy.load), plus a sidecar JSONL
//                (PATH without .npy + ".docs.jsonl") with id, text and tags of each row, in the same order.
//   .safetensors one tensor "embedding" [N, D] (safetensors.numpy.load_file), plus the same sidecar.
// Every output is written under a temporary name, PATH.partial (and the sidecar SIDECAR.partial), through an
// OutputFile (flowline/output_file.hpp), and renamed to PATH when close() completes it. A run that ends
// badly calls close_partial() (everything handed over is written, the file stays PATH.partial, saying it
// is incomplete) or abandon(): either removes the file when no document reached it, so a run that fails
// before its first document leaves nothing. Every document of a binary output must have an embedding with
// D values; one without is an Error naming its id.
//
// Errors (a file that cannot be written, a missing embedding) are flowline::Error, thrown by write() or
// close(); a writer whose write() threw must not be written again (abandon() it).
#pragma once

#include "flowline/document.hpp"
#include "flowline/document_fields.hpp"
#include "flowline/output_file.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

// A point up to which an output is durable (DocumentWriter::sync()): the documents before it and the bytes
// they take in the file and, for binary outputs, in the sidecar. `flowline run --resume` reopens an output
// there (WriterOptions::resume_from).
struct SyncPoint {
  std::uint64_t documents = 0;
  std::uint64_t bytes = 0;
  std::uint64_t sidecar_bytes = 0;
};

struct WriterOptions {
  FieldSet fields = FieldSet::all();  // JSONL: the fields written (the id always)
  std::size_t threads = 0;            // JSONL: formatting threads; 0: one per hardware thread (at most 8)
  std::string dtype = "float32";      // .npy / .safetensors: float32 or float16
  bool sidecar_tags = true;           // .npy / .safetensors: write tags into the sidecar too
  // Continue PATH.partial (and the sidecar's) from this point instead of starting it anew: the files are cut
  // back to it and written on from there (a binary header then counts the rows before it too).
  std::optional<SyncPoint> resume_from;
};

// What a writer has done so far.
struct WriterStats {
  std::uint64_t documents = 0;  // documents written (or handed to the formatting threads)
  std::uint64_t bytes = 0;      // bytes written to the file(s) so far
  // Bytes formatted so far: written, or waiting in the block of whole lines a JSONL writer gathers.
  std::uint64_t formatted_bytes = 0;
  double format_seconds = 0;  // thread time spent formatting (summed over the formatting threads)
  double write_seconds = 0;   // time spent in write(2) and closing
};

class DocumentWriter {
 public:
  virtual ~DocumentWriter();  // abandons the output unless close() completed
  // Appends documents, in order. The const overload borrows `docs` until it returns; the rvalue one takes
  // them and may return before they are formatted (bounded: it waits when too much is queued).
  virtual void write(const DocumentArray& docs) = 0;
  virtual void write(DocumentArray&& docs) { write(static_cast<const DocumentArray&>(docs)); }
  // Completes the output: everything written reaches the file, binary files get their final header, and
  // the file its final name. Throws flowline::Error on failure (the file then stays PATH.partial).
  virtual void close() = 0;
  // Ends an output that is not complete (the run was interrupted, a request failed): everything handed
  // over is written as close() would, but the file stays PATH.partial, or is removed when no document
  // reached it. Returns the path left behind, empty when none. Throws flowline::Error when writing fails
  // (what was written stays in PATH.partial). No effect after close().
  virtual std::filesystem::path close_partial() = 0;
  // Writes everything handed over so far to the file(s) (a binary header patched to count the rows) and
  // makes it durable (fdatasync); returns the point reached. Waits for the writer's threads; called by the
  // owner between write() calls. Throws flowline::Error when writing or syncing fails.
  virtual SyncPoint sync() = 0;
  // Gives up at once (an error, the destructor): documents not yet written are dropped; JSONL keeps the
  // whole lines already in the file, a binary file the rows it holds (its header patched to count them),
  // under PATH.partial; nothing is left when no document was written. Never throws. No effect after
  // close() or close_partial().
  virtual void abandon() noexcept = 0;
  // What has been written so far; called by the owner, like write() (not from another thread at once).
  virtual WriterStats stats() const = 0;
  // The final path ("-" for standard output) and, for binary outputs, the sidecar's (else empty). While
  // the output is not complete it is at partial_path_for(path()).
  virtual const std::filesystem::path& path() const = 0;
  virtual std::filesystem::path sidecar_path() const { return {}; }
};

enum class OutputFormat { Jsonl, Npy, Safetensors };

// The format for a path's extension (.jsonl, .npy, .safetensors); throws flowline::Error naming the known
// extensions for any other.
OutputFormat output_format_for(const std::filesystem::path& path);
// ".jsonl, .npy, .safetensors"
std::string known_output_extensions();
// The sidecar of a binary output: "emb.npy" -> "emb.docs.jsonl".
std::filesystem::path sidecar_path_for(const std::filesystem::path& path);

// Opens (creating parent folders; PATH.partial truncated) a writer for `path` in the format its extension names.
// Throws flowline::Error when the extension is unknown, an option is bad or the file cannot be created.
std::unique_ptr<DocumentWriter> open_writer(const std::filesystem::path& path, const WriterOptions& options = {});
std::unique_ptr<DocumentWriter> open_jsonl_writer(const std::filesystem::path& path, const WriterOptions& options = {});
// JSONL on standard output (`flowline run --output -`): written in place, never renamed; close_partial()
// and abandon() leave what was written. Whoever uses it keeps everything else off standard output.
std::unique_ptr<DocumentWriter> open_jsonl_stdout_writer(const WriterOptions& options = {});
std::unique_ptr<DocumentWriter> open_npy_writer(const std::filesystem::path& path, const WriterOptions& options = {});
std::unique_ptr<DocumentWriter> open_safetensors_writer(const std::filesystem::path& path,
                                                        const WriterOptions& options = {});

}  // namespace flowline
