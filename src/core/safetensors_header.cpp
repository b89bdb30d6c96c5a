// The safetensors header (flowline/safetensors_header.hpp): its length, its JSON, and the layout of the data
// it describes.
#include "flowline/safetensors_header.hpp"

#include "flowline/error.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <tuple>
#include <utility>

namespace flowline {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own bound

struct Dtype {
  std::string_view name;
  std::size_t bytes;
};
constexpr Dtype kDtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

// In the order of their offsets, the tensors that hold bytes must cover the data section exactly.
void check_layout(const std::map<std::string, SafetensorsTensor>& tensors, std::uint64_t data_size) {
  std::vector<std::pair<const std::string*, const SafetensorsTensor*>> order;
  for (const auto& [name, tensor] : tensors) {
    if (tensor.end > tensor.begin) order.emplace_back(&name, &tensor);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end, *a.first) < std::tie(b.second->begin, b.second->end, *b.first);
  });
  std::uint64_t covered = 0;
  const std::string* before = nullptr;
  for (const auto& [name, tensor] : order) {
    if (tensor->begin < covered) {
      throw Error(
          fmt::format("tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (which ends at {}); each "
                      "tensor's bytes must be its own",
                      *name, tensor->begin, tensor->end, *before, covered));
    }
    if (tensor->begin > covered) {
      throw Error(
          fmt::format("tensor '{}': data_offsets [{}, {}] leave a gap of {} bytes after {}; the tensors' "
                      "data must follow each other without gaps",
                      *name, tensor->begin, tensor->end, tensor->begin - covered,
                      before ? fmt::format("tensor '{}'", *before) : std::string("the header")));
    }
    covered = tensor->end;
    before = name;
  }
  if (covered != data_size) {
    throw Error(fmt::format("{} bytes of data after the last tensor{}; the tensors' data must end where the file does",
                            data_size - covered,
                            before ? fmt::format(" ('{}', ending at {})", *before, covered) : std::string()));
  }
}

}  // namespace

std::size_t safetensors_dtype_bytes(std::string_view dtype) {
  for (const auto& d : kDtypes) {
    if (d.name == dtype) return d.bytes;
  }
  return 0;
}

std::uint64_t safetensors_header_length(const unsigned char* first8, std::uint64_t file_size) {
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | first8[i];
  if (length == 0 || length > file_size - 8 || length > kMaxHeaderBytes) {
    throw Error(fmt::format("header length {} does not fit the file ({} bytes){}; not a safetensors file?", length,
                            file_size, length > kMaxHeaderBytes ? ", and is over 100 MB, the format's bound" : ""));
  }
  return length;
}

SafetensorsHeader parse_safetensors_header(std::string_view json, std::uint64_t file_size) {
  boost::system::error_code ec;
  const boost::json::value parsed = boost::json::parse(json, ec);
  if (ec || !parsed.is_object()) {
    throw Error(fmt::format("the header is not a JSON object{}; not a safetensors file?",
                            ec ? fmt::format(" ({})", ec.message()) : std::string()));
  }
  SafetensorsHeader header;
  header.data_offset = 8 + json.size();
  const std::uint64_t data_size = file_size - header.data_offset;
  for (const auto& [key, value] : parsed.get_object()) {
    const std::string name(key);
    if (name == "__metadata__") {
      if (const auto* metadata = value.if_object()) {
        for (const auto& [k, v] : *metadata) {
          if (v.is_string()) header.metadata[std::string(k)] = std::string(v.get_string());
        }
      }
      continue;
    }
    const auto bad = [&](const std::string& why) { return Error(fmt::format("tensor '{}': {}", name, why)); };
    const auto* object = value.if_object();
    const auto* dtype = object ? object->if_contains("dtype") : nullptr;
    const auto* shape = object ? object->if_contains("shape") : nullptr;
    const auto* offsets = object ? object->if_contains("data_offsets") : nullptr;
    if (!dtype || !dtype->is_string() || !shape || !shape->is_array() || !offsets || !offsets->is_array() ||
        offsets->get_array().size() != 2) {
      throw bad("expected {dtype, shape, data_offsets}");
    }
    SafetensorsTensor tensor;
    tensor.dtype = std::string(dtype->get_string());
    const std::size_t element = safetensors_dtype_bytes(tensor.dtype);
    if (element == 0) throw bad(fmt::format("unsupported dtype '{}'", tensor.dtype));
    std::uint64_t bytes = element;
    bool overflow = false;
    for (const auto& s : shape->get_array()) {
      if (!s.is_int64() || s.get_int64() < 0) throw bad("shape must hold non-negative integers");
      tensor.shape.push_back(s.get_int64());
      overflow |= __builtin_mul_overflow(bytes, static_cast<std::uint64_t>(s.get_int64()), &bytes);
    }
    if (overflow) throw bad(fmt::format("shape [{}] is too large", fmt::join(tensor.shape, ", ")));
    // Found by tests/fuzz/fuzz_safetensors: a negative offset made Boost.JSON throw its own error.
    const auto offset = [&](const boost::json::value& v) -> std::uint64_t {
      if (v.is_uint64()) return v.get_uint64();
      if (v.is_int64() && v.get_int64() >= 0) return static_cast<std::uint64_t>(v.get_int64());
      throw bad("data_offsets must be two non-negative integers");
    };
    tensor.begin = offset(offsets->get_array()[0]);
    tensor.end = offset(offsets->get_array()[1]);
    if (tensor.begin > tensor.end || tensor.end > data_size) {
      throw bad(fmt::format("data_offsets [{}, {}] outside the {} bytes of data", tensor.begin, tensor.end, data_size));
    }
    if (tensor.end - tensor.begin != bytes) {
      throw bad(fmt::format("{} bytes of data for shape [{}] of {} ({} expected)", tensor.end - tensor.begin,
                            fmt::join(tensor.shape, ", "), tensor.dtype, bytes));
    }
    header.tensors.emplace(name, std::move(tensor));
  }
  check_layout(header.tensors, data_size);
  return header;
}

}  // namespace flowline
