// Reading .safetensors files: the JSON header, dtypes and shapes, tensors mapped from the file.
#include "flowline/models/safetensors.hpp"

#include "flowline/error.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowline::models {

struct SafetensorsFile::Mapping {
  void* address = MAP_FAILED;
  std::size_t size = 0;
  ~Mapping() {
    if (address != MAP_FAILED) munmap(address, size);
  }
};

namespace {

struct DtypeInfo {
  const char* name;
  c10::ScalarType type;
  std::size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", c10::kFloat, 4}, {"F16", c10::kHalf, 2},  {"BF16", c10::kBFloat16, 2}, {"F64", c10::kDouble, 8},
    {"I64", c10::kLong, 8},  {"I32", c10::kInt, 4},   {"I16", c10::kShort, 2},     {"I8", c10::kChar, 1},
    {"U8", c10::kByte, 1},   {"BOOL", c10::kBool, 1},
};

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : path_(path), mapping_(std::make_shared<Mapping>()) {
  auto fail = [&](const std::string& why) -> Error {
    return Error(fmt::format("safetensors file '{}': {}", path.string(), why));
  };
  // O_NONBLOCK: a FIFO in its place must not hold the open; the type is checked on the descriptor.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  const auto file_size = static_cast<std::size_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw fail(fmt::format("too short ({} bytes) to hold a header", file_size));
  }
  mapping_->size = file_size;
  mapping_->address = ::mmap(nullptr, file_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping_->address == MAP_FAILED) throw fail(fmt::format("cannot map: {}", std::strerror(errno)));
  const auto* bytes = static_cast<const std::uint8_t*>(mapping_->address);

  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | bytes[i];
  if (header_size == 0 || header_size > file_size - 8 || header_size > (100u << 20)) {
    throw fail(fmt::format("header length {} does not fit the file ({} bytes); not a safetensors file?", header_size,
                           file_size));
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_size);
  boost::system::error_code ec;
  const auto json = boost::json::parse(header, ec);
  if (ec || !json.is_object()) throw fail("the header is not a JSON object; not a safetensors file?");
  data_ = bytes + 8 + header_size;
  const std::size_t data_size = file_size - 8 - header_size;

  for (const auto& [key, value] : json.get_object()) {
    const std::string name(key);
    if (name == "__metadata__") {
      if (value.is_object()) {
        for (const auto& [k, v] : value.get_object()) {
          if (v.is_string()) metadata_[std::string(k)] = std::string(v.get_string());
        }
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return fail(fmt::format("tensor '{}': {}", name, why)); };
    if (!value.is_object()) throw bad("expected {dtype, shape, data_offsets}");
    const auto& o = value.get_object();
    const auto* dtype = o.if_contains("dtype");
    const auto* shape = o.if_contains("shape");
    const auto* offsets = o.if_contains("data_offsets");
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets || !offsets->is_array() ||
        offsets->get_array().size() != 2) {
      throw bad("expected {dtype, shape, data_offsets}");
    }
    const DtypeInfo* info = nullptr;
    for (const auto& d : kDtypes) {
      if (dtype->get_string() == d.name) info = &d;
    }
    if (!info) throw bad(fmt::format("unsupported dtype '{}'", std::string_view(dtype->get_string())));
    Entry entry;
    entry.dtype = info->type;
    std::size_t numel = 1;
    bool overflow = false;
    for (const auto& s : shape->get_array()) {
      if (!s.is_int64() || s.get_int64() < 0) throw bad("shape must hold non-negative integers");
      entry.shape.push_back(s.get_int64());
      overflow |= __builtin_mul_overflow(numel, static_cast<std::size_t>(s.get_int64()), &numel);
    }
    std::size_t expected_bytes = 0;
    overflow |= __builtin_mul_overflow(numel, info->size, &expected_bytes);
    if (overflow) throw bad(fmt::format("shape [{}] is too large", fmt::join(entry.shape, ", ")));
    const auto& off = offsets->get_array();
    // Found by tests/fuzz/fuzz_safetensors: a negative offset made Boost.JSON throw its own error.
    auto offset = [&](const boost::json::value& v) -> std::size_t {
      if (v.is_uint64()) return v.get_uint64();
      if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::size_t>(v.get_int64());
      throw bad("data_offsets must be two non-negative integers");
    };
    entry.begin = offset(off[0]);
    entry.end = offset(off[1]);
    if (entry.begin > entry.end || entry.end > data_size) {
      throw bad(fmt::format("data_offsets [{}, {}] outside the {} bytes of data", entry.begin, entry.end, data_size));
    }
    if (entry.end - entry.begin != expected_bytes) {
      throw bad(fmt::format("{} bytes of data for shape [{}] of {} ({} expected)", entry.end - entry.begin,
                            fmt::join(entry.shape, ", "), info->name, expected_bytes));
    }
    entries_.emplace(name, std::move(entry));
  }
  check_layout(data_size);
}

// As Hugging Face's safetensors validates a file: the tensors' data, in the order of their offsets, cover
// the data section exactly — each starts where the one before it ends, the last ends where the file does.
// An overlap would alias two tensors, a gap (or bytes after the last) hides bytes no tensor names. Empty
// tensors hold no bytes: they may sit at any offset inside the data (Hugging Face places them in the
// order too, and refuses one that sits elsewhere; flowline reads them as empty wherever they are).
void SafetensorsFile::check_layout(std::size_t data_size) const {
  std::vector<std::pair<const std::string*, const Entry*>> order;
  for (const auto& [name, entry] : entries_) {
    if (entry.end > entry.begin) order.emplace_back(&name, &entry);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end, *a.first) < std::tie(b.second->begin, b.second->end, *b.first);
  });
  std::size_t covered = 0;
  const std::string* before = nullptr;
  for (const auto& [name, entry] : order) {
    if (entry->begin < covered) {
      throw Error(
          fmt::format("safetensors file '{}': tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (which "
                      "ends at {}); each tensor's bytes must be its own",
                      path_.string(), *name, entry->begin, entry->end, *before, covered));
    }
    if (entry->begin > covered) {
      throw Error(
          fmt::format("safetensors file '{}': tensor '{}': data_offsets [{}, {}] leave a gap of {} bytes "
                      "after {}; the tensors' data must follow each other without gaps",
                      path_.string(), *name, entry->begin, entry->end, entry->begin - covered,
                      before ? fmt::format("tensor '{}'", *before) : std::string("the header")));
    }
    covered = entry->end;
    before = name;
  }
  if (covered != data_size) {
    throw Error(
        fmt::format("safetensors file '{}': {} bytes of data after the last tensor{}; the tensors' data "
                    "must end where the file does",
                    path_.string(), data_size - covered,
                    before ? fmt::format(" ('{}', ending at {})", *before, covered) : std::string()));
  }
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw Error(fmt::format("safetensors file '{}': no tensor '{}'", path_.string(), name));
  }
  return it->second;
}

std::vector<int64_t> SafetensorsFile::shape(const std::string& name) const { return entry(name).shape; }
c10::ScalarType SafetensorsFile::dtype(const std::string& name) const { return entry(name).dtype; }
std::string SafetensorsFile::dtype_name(const std::string& name) const {
  const c10::ScalarType type = entry(name).dtype;
  for (const auto& d : kDtypes) {
    if (d.type == type) return d.name;
  }
  return "?";
}

at::Tensor SafetensorsFile::get(const std::string& name) const {
  const Entry& e = entry(name);
  auto* address = const_cast<std::uint8_t*>(data_ + e.begin);
  const auto options = at::TensorOptions().dtype(e.dtype).device(c10::kCPU);
  const std::size_t element = c10::elementSize(e.dtype);
  if (reinterpret_cast<std::uintptr_t>(address) % element != 0) {
    // Unaligned data: copy into aligned memory.
    at::Tensor out = at::empty(e.shape, options);
    // An empty tensor has no storage (data_ptr() is null), and memcpy's pointers must not be null.
    if (e.end > e.begin) std::memcpy(out.data_ptr(), address, e.end - e.begin);
    return out;
  }
  auto keep = mapping_;
  return at::from_blob(
      address, e.shape, [keep](void*) {}, options);
}

void save_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors) {
  boost::json::object header;
  std::vector<at::Tensor> data;
  std::size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    at::Tensor t = tensor.to(c10::kCPU).contiguous();
    const char* dtype = nullptr;
    for (const auto& d : kDtypes) {
      if (d.type == t.scalar_type()) dtype = d.name;
    }
    if (!dtype) throw Error(fmt::format("save_safetensors: tensor '{}' has an unsupported dtype", name));
    const std::size_t bytes = t.numel() * t.element_size();
    boost::json::array shape;
    for (auto s : t.sizes()) shape.push_back(s);
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string text = boost::json::serialize(header);
  while ((text.size() + 8) % 8 != 0) text += ' ';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("save_safetensors: cannot write '{}'", path.string()));
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : data)
    out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * t.element_size()));
  if (!out) throw Error(fmt::format("save_safetensors: writing '{}' failed", path.string()));
}

}  // namespace flowline::models
