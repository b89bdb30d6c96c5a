// The .npy and .safetensors DocumentWriters (writers.hpp): embeddings as one [N, D] array behind a header of
// fixed size that is patched with N at the end, written to PATH.partial (an OutputFile) and renamed; ids,
// texts and tags go to a JSONL sidecar through the JSONL writer.
#include "flowline/error.hpp"
#include "flowline/writers.hpp"
#include "flowline/output_file.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <optional>

namespace flowline {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr std::size_t kBlockBytes = 1 << 20;

// How a format lays out its header for N rows of D values of `element_bytes` each.
class BinaryLayout {
 public:
  virtual ~BinaryLayout() = default;
  virtual std::string format_name() const = 0;
  // The header, exactly header_bytes() long (padded), for the final (or a provisional) N.
  virtual std::string header(std::uint64_t rows, std::uint64_t dim, bool half) const = 0;
  virtual std::size_t header_bytes() const = 0;
};

// NPY format version 1.0: magic, version, a little-endian uint16 length, then a Python dict literal padded
// with spaces and ending in a newline; 128 bytes in all (a multiple of 64 keeps the data aligned).
class NpyLayout final : public BinaryLayout {
 public:
  std::string format_name() const override { return ".npy"; }
  std::size_t header_bytes() const override { return 128; }
  std::string header(std::uint64_t rows, std::uint64_t dim, bool half) const override {
    std::string dict =
        fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}, {}), }}", half ? "<f2" : "<f4", rows, dim);
    const std::size_t dict_bytes = header_bytes() - 10;
    dict.resize(dict_bytes - 1, ' ');
    dict += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += static_cast<char>(dict_bytes & 0xFF);
    out += static_cast<char>(dict_bytes >> 8);
    return out + dict;
  }
};

// safetensors: a little-endian uint64 length, then a JSON header padded with spaces (256 bytes in all, so
// the data stays aligned), then the data of the one tensor "embedding".
class SafetensorsLayout final : public BinaryLayout {
 public:
  std::string format_name() const override { return ".safetensors"; }
  std::size_t header_bytes() const override { return 256; }
  std::string header(std::uint64_t rows, std::uint64_t dim, bool half) const override {
    const std::uint64_t data_bytes = rows * dim * (half ? 2 : 4);
    std::string json = fmt::format(R"({{"embedding":{{"dtype":"{}","shape":[{},{}],"data_offsets":[0,{}]}}}})",
                                   half ? "F16" : "F32", rows, dim, data_bytes);
    const std::uint64_t json_bytes = header_bytes() - 8;
    json.resize(json_bytes, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json_bytes >> (8 * i)) & 0xFF);
    return out + json;
  }
};

class EmbeddingFileWriter final : public DocumentWriter {
 public:
  EmbeddingFileWriter(const std::filesystem::path& path, const WriterOptions& options,
                      std::unique_ptr<BinaryLayout> layout)
      : path_(path),
        sidecar_(sidecar_path_for(path)),
        layout_(std::move(layout)),
        half_(check_dtype(options.dtype)),
        file_(options.resume_from ? OutputFile(path, OutputFile::Resume{options.resume_from->bytes})
                                  : OutputFile(path)) {
    WriterOptions sidecar_options;
    sidecar_options.threads = options.threads;
    sidecar_options.fields = FieldSet().insert(DocumentField::id).insert(DocumentField::text);
    if (options.sidecar_tags) sidecar_options.fields.insert(DocumentField::tags);
    if (options.resume_from) {
      resume_rows(*options.resume_from);
      sidecar_options.resume_from = SyncPoint{rows_, options.resume_from->sidecar_bytes, 0};
    }
    sidecar_writer_ = open_jsonl_writer(sidecar_, sidecar_options);
    if (!options.resume_from) fail_on(file_.write(layout_->header(0, 0, half_)));
  }

  ~EmbeddingFileWriter() override { abandon(); }

  void write(const DocumentArray& docs) override {
    append_embeddings(docs);
    sidecar_writer_->write(docs);
  }
  void write(DocumentArray&& docs) override {
    append_embeddings(docs);
    sidecar_writer_->write(std::move(docs));
  }

  void close() override {
    if (done_) return;
    done_ = true;
    const auto start = Clock::now();
    try {
      finish_writing();
      sidecar_writer_->close();
      file_.commit();
    } catch (...) {
      leave_partial();
      throw;
    }
    write_seconds_ += seconds_since(start);
  }

  std::filesystem::path close_partial() override {
    if (done_) return {};
    done_ = true;
    try {
      finish_writing();
      sidecar_writer_->close_partial();
    } catch (...) {
      leave_partial();
      throw;
    }
    return leave_partial();
  }

  void abandon() noexcept override {
    if (done_) return;
    done_ = true;
    try {
      flush();
      patch_header();
    } catch (...) {
      // The rows already in the file stay; the header may then count none of them.
    }
    leave_partial();
  }

  SyncPoint sync() override {
    if (done_) throw Error(fmt::format("'{}': sync after close", path_.string()));
    finish_writing();
    const SyncPoint sidecar = sidecar_writer_->sync();
    const auto start = Clock::now();
    fail_on(file_.sync());
    write_seconds_ += seconds_since(start);
    return SyncPoint{rows_in_file_, file_.bytes(), sidecar.bytes};
  }

  WriterStats stats() const override {
    WriterStats s = sidecar_writer_->stats();
    s.documents = rows_;
    s.bytes += file_.bytes();
    s.formatted_bytes += file_.bytes();
    s.format_seconds += convert_seconds_;
    s.write_seconds += write_seconds_;
    return s;
  }

  const std::filesystem::path& path() const override { return path_; }
  std::filesystem::path sidecar_path() const override { return sidecar_; }

 private:
  static bool check_dtype(const std::string& dtype) {
    if (dtype != "float32" && dtype != "float16") {
      throw Error(fmt::format("dtype: expected float32 or float16, got '{}'", dtype));
    }
    return dtype == "float16";
  }

  // The rows before a resume point, and their width from the bytes they take.
  void resume_rows(const SyncPoint& point) {
    const std::uint64_t header = layout_->header_bytes();
    const std::uint64_t element = half_ ? 2 : 4;
    rows_ = rows_in_file_ = point.documents;
    if (point.documents == 0) {
      if (point.bytes != header)
        throw Error(fmt::format("cannot resume '{}': no rows but {} bytes", path_.string(), point.bytes));
      return;
    }
    const std::uint64_t data = point.bytes < header ? 0 : point.bytes - header;
    if (data == 0 || data % (point.documents * element) != 0) {
      throw Error(fmt::format("cannot resume '{}': {} bytes do not hold {} rows", path_.string(), point.bytes,
                              point.documents));
    }
    dim_ = static_cast<std::int64_t>(data / (point.documents * element));
  }

  // Checks every document first, so a bad batch adds no row.
  void check(const DocumentArray& docs) {
    std::optional<std::int64_t> dim = dim_;
    for (const auto& doc : docs) {
      if (!doc.embedding.defined()) {
        throw Error(fmt::format("'{}': document '{}' has no embedding; every document written to a {} file needs one",
                                path_.string(), doc.id, layout_->format_name()));
      }
      const std::int64_t n = doc.embedding.numel();
      if (!dim) dim = n;
      if (n != *dim || n == 0) {
        throw Error(fmt::format("'{}': document '{}' has an embedding of {} values, the first document's has {}",
                                path_.string(), doc.id, n, *dim));
      }
    }
  }

  void append_embeddings(const DocumentArray& docs) {
    if (done_) throw Error(fmt::format("'{}': write after close", path_.string()));
    check(docs);
    const auto start = Clock::now();
    for (const auto& doc : docs) {
      at::Tensor e = doc.embedding;
      const at::ScalarType want = half_ ? at::kHalf : at::kFloat;
      if (!e.device().is_cpu() || e.scalar_type() != want || !e.is_contiguous()) {
        e = e.to(at::kCPU, want).contiguous();
      }
      const std::size_t bytes = static_cast<std::size_t>(e.numel()) * e.element_size();
      block_.append(static_cast<const char*>(e.data_ptr()), bytes);
    }
    if (!dim_ && !docs.empty()) dim_ = docs[0].embedding.numel();
    rows_ += docs.size();
    convert_seconds_ += seconds_since(start);
    if (block_.size() >= kBlockBytes) flush();
  }

  void flush() {
    const auto start = Clock::now();
    fail_on(file_.write(block_));
    rows_in_file_ = rows_;
    block_.clear();
    write_seconds_ += seconds_since(start);
  }

  // The header, counting the rows in the file.
  void patch_header() { fail_on(file_.write_at(0, layout_->header(rows_in_file_, dim_.value_or(0), half_))); }

  void finish_writing() {
    flush();
    patch_header();
  }

  // Leaves both files as .partial when rows reached the file (the sidecar keeps its own whole lines), else
  // removes both. Returns the binary file's path left behind, empty when none.
  std::filesystem::path leave_partial() noexcept {
    sidecar_writer_->abandon();
    return file_.leave_partial(rows_in_file_ > 0);
  }

  static void fail_on(const std::string& error) {
    if (!error.empty()) throw Error(error);
  }

  const std::filesystem::path path_, sidecar_;
  std::unique_ptr<BinaryLayout> layout_;
  const bool half_;
  OutputFile file_;
  std::unique_ptr<DocumentWriter> sidecar_writer_;
  std::string block_;
  std::optional<std::int64_t> dim_;
  std::uint64_t rows_ = 0;          // rows appended (some perhaps still in block_)
  std::uint64_t rows_in_file_ = 0;  // rows written to the file
  double convert_seconds_ = 0, write_seconds_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<DocumentWriter> open_npy_writer(const std::filesystem::path& path, const WriterOptions& options) {
  return std::make_unique<EmbeddingFileWriter>(path, options, std::make_unique<NpyLayout>());
}

std::unique_ptr<DocumentWriter> open_safetensors_writer(const std::filesystem::path& path,
                                                        const WriterOptions& options) {
  return std::make_unique<EmbeddingFileWriter>(path, options, std::make_unique<SafetensorsLayout>());
}

}  // namespace flowline
