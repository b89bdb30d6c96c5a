// The npy and safetensors inputs (input_arrays.hpp): a header read and checked once, then rows read in blocks
// with pread as documents are handed out, each row a float32 embedding; ids, texts and tags from the sidecar
// when there is one.
#include "input_arrays.hpp"
#include "input_lines.hpp"

#include "flowline/error.hpp"
#include "flowline/safetensors_header.hpp"
#include "flowline/writers.hpp"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::detail {

namespace {

// The element types a row may have; every one is handed out as float32.
enum class Element { F16, BF16, F32, F64 };

std::size_t element_bytes(Element e) {
  switch (e) {
    case Element::F16:
    case Element::BF16:
      return 2;
    case Element::F32:
      return 4;
    case Element::F64:
      return 8;
  }
  return 4;
}

at::ScalarType scalar_type(Element e) {
  switch (e) {
    case Element::F16:
      return at::kHalf;
    case Element::BF16:
      return at::kBFloat16;
    case Element::F32:
      return at::kFloat;
    case Element::F64:
      return at::kDouble;
  }
  return at::kFloat;
}

// The element types by the name each format gives them.
struct NamedElement {
  std::string_view name;
  Element element;
};
constexpr NamedElement kNpyElements[] = {{"<f2", Element::F16}, {"<f4", Element::F32}, {"<f8", Element::F64}};
constexpr NamedElement kSafetensorsElements[] = {
    {"F16", Element::F16}, {"BF16", Element::BF16}, {"F32", Element::F32}, {"F64", Element::F64}};

template <std::size_t N>
std::optional<Element> element_named(std::string_view name, const NamedElement (&table)[N]) {
  for (const NamedElement& known : table) {
    if (known.name == name) return known.element;
  }
  return std::nullopt;
}

// Where the rows are: `rows` rows of `dim` elements from byte `offset` of the file on.
struct Layout {
  Element element = Element::F32;
  std::uint64_t rows = 0, dim = 0, offset = 0;
};

// An open file read at given offsets; closed with the source.
class File {
 public:
  File(const std::filesystem::path& path, const std::string& name) : name_(name) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw InputError(SourceLocation{name_}, "is a folder; --input-format npy and safetensors read one file");
    do {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw InputError(SourceLocation{name_}, fmt::format("cannot open file: {}", std::strerror(errno)));
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) {
      ::close(fd_);
      throw InputError(SourceLocation{name_}, "not a regular file (its size cannot be known)");
    }
    size_ = static_cast<std::uint64_t>(end);
  }
  ~File() { ::close(fd_); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::uint64_t size() const noexcept { return size_; }

  // Reads exactly `bytes` bytes at `offset`; a file that ends first (cut while being read) is an InputError.
  void read_at(void* into, std::uint64_t bytes, std::uint64_t offset) const {
    auto* out = static_cast<char*>(into);
    while (bytes > 0) {
      const ssize_t got = ::pread(fd_, out, static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 1u << 30)),
                                  static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw InputError(SourceLocation{name_}, fmt::format("read failed: {}", std::strerror(errno)));
      if (got == 0)
        throw InputError(SourceLocation{name_},
                         fmt::format("the file ended at byte {}, before the rows its header declares (it was {} "
                                     "bytes when opened): it was cut while being read",
                                     offset, size_));
      out += got;
      bytes -= static_cast<std::uint64_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
  }

 private:
  std::string name_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

std::uint64_t little_endian(const unsigned char* bytes, int n) {
  std::uint64_t value = 0;
  for (int i = n - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// The Python dict literal of an .npy header: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class NpyHeader {
 public:
  NpyHeader(std::string_view text, std::string name) : text_(text), name_(std::move(name)) {}

  // Fills descr, fortran_order and shape; throws InputError for anything else.
  void parse() {
    expect('{');
    while (!peek('}')) {
      const std::string key = string_literal();
      expect(':');
      if (key == "descr") {
        descr = string_literal();
      } else if (key == "fortran_order") {
        fortran_order = boolean();
      } else if (key == "shape") {
        shape = tuple();
      } else {
        fail(fmt::format("unexpected key '{}' (an .npy header holds 'descr', 'fortran_order' and 'shape')", key));
      }
      if (!peek('}')) expect(',');
    }
    expect('}');
    if (!descr || !fortran_order || !shape) fail("it lacks one of 'descr', 'fortran_order' and 'shape'");
  }

  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::uint64_t>> shape;

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(SourceLocation{name_},
                     fmt::format("not a readable .npy header at its character {}: {}", at_, what));
  }
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\t')) ++at_;
  }
  bool peek(char c) {
    skip_space();
    return at_ < text_.size() && text_[at_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(fmt::format("expected '{}'", c));
    ++at_;
  }
  std::string string_literal() {
    skip_space();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) fail("expected a quoted string");
    const char quote = text_[at_++];
    const std::size_t end = text_.find(quote, at_);
    if (end == std::string_view::npos) fail("a string is not closed");
    std::string value(text_.substr(at_, end - at_));
    at_ = end + 1;
    return value;
  }
  bool boolean() {
    skip_space();
    for (const auto& [word, value] : {std::pair{std::string_view("True"), true}, {std::string_view("False"), false}}) {
      if (text_.substr(at_, word.size()) == word) {
        at_ += word.size();
        return value;
      }
    }
    fail("expected True or False");
  }
  std::vector<std::uint64_t> tuple() {
    expect('(');
    std::vector<std::uint64_t> values;
    while (!peek(')')) {
      skip_space();
      std::uint64_t value = 0;
      const std::size_t start = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        const std::uint64_t digit = static_cast<std::uint64_t>(text_[at_] - '0');
        if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) fail("a dimension is too large");
        value = value * 10 + digit;
        ++at_;
      }
      if (at_ == start) fail("expected a non-negative integer in 'shape'");
      if (at_ < text_.size() && text_[at_] == 'L') ++at_;  // Python 2's long literals
      values.push_back(value);
      if (values.size() > 32) fail("'shape' has more than 32 dimensions");
      if (!peek(')')) expect(',');
    }
    expect(')');
    return values;
  }

  std::string_view text_;
  std::string name_;
  std::size_t at_ = 0;
};

// Checks that `rows` x `dim` elements fit the file from `offset` on, without overflowing.
void check_fits(const Layout& layout, const File& file, const std::string& name) {
  const std::uint64_t element = element_bytes(layout.element);
  if (layout.dim == 0) throw InputError(SourceLocation{name}, "its rows have no values (a dimension of 0)");
  if (layout.dim > (1u << 24))
    throw InputError(SourceLocation{name},
                     fmt::format("rows of {} values: more than 16,777,216 (2^24) is not an embedding", layout.dim));
  const std::uint64_t row_bytes = layout.dim * element;
  const std::uint64_t room = file.size() > layout.offset ? file.size() - layout.offset : 0;
  if (layout.rows > room / row_bytes) {
    throw InputError(SourceLocation{name},
                     fmt::format("its header declares {} rows of {} values ({} bytes of data from byte {}), but the "
                                 "file holds {} bytes there: it is cut short",
                                 layout.rows, layout.dim,
                                 layout.rows <= std::numeric_limits<std::uint64_t>::max() / row_bytes
                                     ? fmt::format("{}", layout.rows * row_bytes)
                                     : std::string("more than 2^64"),
                                 layout.offset, room));
  }
}

Layout read_npy_layout(const File& file, const std::string& name) {
  unsigned char start[12] = {};
  if (file.size() < 10) throw InputError(SourceLocation{name}, "not an .npy file: shorter than its 10-byte preamble");
  file.read_at(start, std::min<std::uint64_t>(12, file.size()), 0);
  if (std::memcmp(start, "\x93NUMPY", 6) != 0)
    throw InputError(SourceLocation{name}, "not an .npy file: it does not start with \\x93NUMPY");
  const int major = start[6];
  if (major < 1 || major > 3)
    throw InputError(SourceLocation{name}, fmt::format("an .npy format version {}.{}: expected 1.0, 2.0 or 3.0", major,
                                                       static_cast<int>(start[7])));
  const std::uint64_t prefix = major == 1 ? 10 : 12;
  const std::uint64_t header_bytes = little_endian(start + 8, major == 1 ? 2 : 4);
  constexpr std::uint64_t kMaxHeader = 1 << 16;
  if (header_bytes > kMaxHeader)
    throw InputError(SourceLocation{name},
                     fmt::format("its .npy header is {} bytes: more than {} (a plain array's is under 200)",
                                 header_bytes, kMaxHeader));
  if (prefix + header_bytes > file.size())
    throw InputError(SourceLocation{name},
                     fmt::format("its .npy header of {} bytes runs past the end of the file", header_bytes));
  std::string text(static_cast<std::size_t>(header_bytes), '\0');
  file.read_at(text.data(), header_bytes, prefix);
  NpyHeader header(text, name);
  header.parse();
  Layout layout;
  const std::string& descr = *header.descr;
  if (const auto element = element_named(descr, kNpyElements)) {
    layout.element = *element;
  } else if (descr.size() == 3 && descr[0] == '>' && descr[1] == 'f') {
    throw InputError(SourceLocation{name}, fmt::format("its values are big-endian ('{}'): write it little-endian, e.g. "
                                                       "numpy.save(path, array.astype('<f4'))",
                                                       descr));
  } else {
    throw InputError(SourceLocation{name},
                     fmt::format("its values are '{}': expected floats ('<f2', '<f4' or '<f8'), e.g. "
                                 "numpy.save(path, array.astype('float32'))",
                                 descr));
  }
  if (*header.fortran_order)
    throw InputError(SourceLocation{name},
                     "it is in Fortran (column-major) order: save numpy.ascontiguousarray(array) instead");
  const auto& shape = *header.shape;
  if (shape.size() != 2)
    throw InputError(SourceLocation{name},
                     fmt::format("its array has {} dimensions: expected 2, [rows, values of a row]", shape.size()));
  layout.rows = shape[0];
  layout.dim = shape[1];
  layout.offset = prefix + header_bytes;
  check_fits(layout, file, name);
  return layout;
}

Layout read_safetensors_layout(const File& file, const std::string& name) {
  unsigned char start[8] = {};
  if (file.size() < 8) throw InputError(SourceLocation{name}, "not a .safetensors file: shorter than 8 bytes");
  file.read_at(start, 8, 0);
  SafetensorsHeader header;
  try {
    const std::uint64_t length = safetensors_header_length(start, file.size());
    std::string text(static_cast<std::size_t>(length), '\0');
    file.read_at(text.data(), length, 8);
    header = parse_safetensors_header(text, file.size());
  } catch (const Error& e) {
    throw InputError(SourceLocation{name}, e.what());
  }
  auto chosen = header.tensors.find("embedding");
  if (chosen == header.tensors.end()) {
    if (header.tensors.size() != 1) {
      std::vector<std::string> names;
      for (const auto& entry : header.tensors) names.push_back(entry.first);
      throw InputError(SourceLocation{name},
                       fmt::format("it holds {} tensors ({}) and none named 'embedding': name the rows' tensor "
                                   "'embedding'",
                                   names.size(), fmt::join(names, ", ")));
    }
    chosen = header.tensors.begin();
  }
  const std::string& tensor_name = chosen->first;
  const SafetensorsTensor& tensor = chosen->second;
  const auto bad = [&](const std::string& what) {
    return InputError(SourceLocation{name}, fmt::format("tensor '{}': {}", tensor_name, what));
  };
  Layout layout;
  if (const auto element = element_named(tensor.dtype, kSafetensorsElements)) {
    layout.element = *element;
  } else {
    throw bad(fmt::format("dtype \"{}\": expected F16, BF16, F32 or F64", tensor.dtype));
  }
  if (tensor.shape.size() != 2)
    throw bad(fmt::format("it has {} dimensions: expected 2, [rows, values of a row]", tensor.shape.size()));
  // The header's checks hold: the data_offsets span the shape's bytes, inside the file.
  layout.rows = static_cast<std::uint64_t>(tensor.shape[0]);
  layout.dim = static_cast<std::uint64_t>(tensor.shape[1]);
  layout.offset = header.data_offset + tensor.begin;
  check_fits(layout, file, name);
  return layout;
}

class ArrayFileSource : public DocumentSource {
 public:
  ArrayFileSource(const std::filesystem::path& path, bool npy)
      : name_(path.string()),
        file_(path, name_),
        layout_(npy ? read_npy_layout(file_, name_) : read_safetensors_layout(file_, name_)) {
    const std::filesystem::path sidecar = sidecar_path_for(path);
    std::error_code ec;
    if (std::filesystem::exists(sidecar, ec)) {
      sidecar_name_ = sidecar.string();
      sidecar_ = open_line_source(sidecar, true);
      const auto documents = sidecar_->count_left();
      if (!documents || *documents != layout_.rows) {
        throw InputError(SourceLocation{sidecar_name_},
                         fmt::format("the sidecar holds {} documents, but '{}' has {} rows: line i of the sidecar is "
                                     "row i's document, so the two must match (move the sidecar away to read the "
                                     "rows alone, with generated ids)",
                                     documents ? fmt::format("{}", *documents) : std::string("an unknown number of"),
                                     name_, layout_.rows));
      }
    }
  }

  std::size_t read(DocumentArray& out, std::size_t max) override {
    const std::uint64_t n = std::min<std::uint64_t>(max, layout_.rows - next_);
    if (n == 0) return 0;
    const std::uint64_t element = element_bytes(layout_.element);
    const std::uint64_t bytes = n * layout_.dim * element;
    const std::uint64_t at = layout_.offset + next_ * layout_.dim * element;
    const auto shape = std::vector<std::int64_t>{static_cast<std::int64_t>(n), static_cast<std::int64_t>(layout_.dim)};
    at::Tensor rows;
    if (layout_.element == Element::F32) {
      rows = at::empty(shape, at::kFloat);
      file_.read_at(rows.data_ptr(), bytes, at);
    } else {
      at::Tensor raw = at::empty(shape, scalar_type(layout_.element));
      file_.read_at(raw.data_ptr(), bytes, at);
      rows = raw.to(at::kFloat);
    }
    DocumentArray docs;
    if (sidecar_) {
      const std::size_t got = sidecar_->read(docs, static_cast<std::size_t>(n));
      if (got != n) throw sidecar_ended(next_ + got);
      for (Document& doc : docs) {
        if (doc.uri == sidecar_name_) doc.uri = name_;  // the input named on the command line, as for every format
        if (doc.embedding.defined())
          throw InputError(SourceLocation{sidecar_name_},
                           fmt::format("document '{}' has an embedding of its own; the sidecar of an array gives "
                                       "ids, texts and tags, and the array's row is the embedding",
                                       doc.id));
      }
    } else {
      docs.reserve(static_cast<std::size_t>(n));
      for (std::uint64_t i = 0; i < n; ++i) {
        Document& doc = docs.push_back(Document());
        doc.uri = name_;
        doc.tags["row"] = static_cast<std::int64_t>(next_ + i);
      }
    }
    docs.set_embeddings(rows);
    next_ += n;
    out.append(std::move(docs));
    return static_cast<std::size_t>(n);
  }

  // By position: no row is read; the sidecar skips its lines (and gives the last one's id).
  Skipped skip(std::uint64_t n) override {
    const std::uint64_t passed = std::min<std::uint64_t>(n, layout_.rows - next_);
    Skipped skipped{passed, {}};
    if (sidecar_ && passed > 0) {
      Skipped lines = sidecar_->skip(passed);
      if (lines.documents != passed) throw sidecar_ended(next_ + lines.documents);
      if (passed == n) skipped.last_id = std::move(lines.last_id);  // as every source: only when n were there
    }
    next_ += passed;
    return skipped;
  }

  std::optional<std::uint64_t> count_left() override { return layout_.rows - next_; }
  bool carries_ids() const override { return sidecar_ != nullptr; }

 private:
  // The sidecar held fewer documents than when it was counted at open.
  InputError sidecar_ended(std::uint64_t documents) const {
    return InputError(SourceLocation{sidecar_name_},
                      fmt::format("the sidecar ended after {} documents, but '{}' has {} rows (it changed while being "
                                  "read)",
                                  documents, name_, layout_.rows));
  }

  std::string name_;
  File file_;
  Layout layout_;
  std::string sidecar_name_;
  std::unique_ptr<DocumentSource> sidecar_;  // the jsonl sidecar's documents, or null
  std::uint64_t next_ = 0;
};

}  // namespace

std::unique_ptr<DocumentSource> open_array_source(const std::filesystem::path& path, bool npy) {
  return std::make_unique<ArrayFileSource>(path, npy);
}

}  // namespace flowline::detail
