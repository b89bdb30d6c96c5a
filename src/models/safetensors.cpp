// Reading .safetensors files: the JSON header, dtypes and shapes, tensors mapped from the file.
#include "flowline/models/safetensors.hpp"

#include "flowline/error.hpp"
#include "flowline/safetensors_header.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <fmt/format.h>

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

// The format's dtypes (safetensors_header.cpp knows their sizes) as LibTorch's scalar types.
struct DtypeInfo {
  const char* name;
  c10::ScalarType type;
};
constexpr DtypeInfo kDtypes[] = {
    {"F32", c10::kFloat}, {"F16", c10::kHalf},  {"BF16", c10::kBFloat16}, {"F64", c10::kDouble}, {"I64", c10::kLong},
    {"I32", c10::kInt},   {"I16", c10::kShort}, {"I8", c10::kChar},       {"U8", c10::kByte},    {"BOOL", c10::kBool},
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
  SafetensorsHeader header;
  try {
    const std::uint64_t length = safetensors_header_length(bytes, file_size);
    header = parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(bytes + 8), length), file_size);
  } catch (const Error& e) {
    throw fail(e.what());
  }
  data_ = bytes + header.data_offset;
  metadata_ = std::move(header.metadata);
  for (auto& [name, tensor] : header.tensors) {
    const DtypeInfo* info = nullptr;
    for (const auto& d : kDtypes) {
      if (tensor.dtype == d.name) info = &d;
    }
    // The header's dtypes are these rows' names: a name missing here is a row missing in kDtypes.
    if (!info) throw fail(fmt::format("tensor '{}': unsupported dtype '{}'", name, tensor.dtype));
    entries_.emplace(name, Entry{info->type, std::move(tensor.shape), tensor.begin, tensor.end});
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
