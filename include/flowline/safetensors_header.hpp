// flowline/safetensors_header.hpp — the header of a safetensors file (Hugging Face's weights format), read
// and checked once for everyone who reads such a file: the model loader (flowline/models/safetensors.hpp,
// which maps the data and hands out tensors) and `flowline run --input X.safetensors` (one document per row).
//
// Format: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {key: string}}, then the data section. Pure functions, any thread. Every inconsistency
// throws flowline::Error whose message says what is wrong and in which tensor, not in which file: the caller
// knows where the bytes came from and says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

// The dtypes the format names ("F32", "BF16", "I64", "BOOL", ...) and their sizes in bytes; 0 for a name it
// does not have.
std::size_t safetensors_dtype_bytes(std::string_view dtype);

struct SafetensorsTensor {
  std::string dtype;  // as the file names it: "F32", "BF16", ...
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // offsets into the data section
};

struct SafetensorsHeader {
  std::uint64_t data_offset = 0;  // where the data section starts in the file: 8 + the header's length
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"'s string values
};

// The header's length from the file's first 8 bytes, checked against the file's size (`file_size` ≥ 8) and
// the format's 100 MB bound.
std::uint64_t safetensors_header_length(const unsigned char* first8, std::uint64_t file_size);

// Parses and checks the header (`json`, the N bytes after the length) of a file of `file_size` bytes: known
// dtypes, shapes of non-negative integers whose bytes fit in memory, data_offsets inside the data section
// and as long as shape and dtype say, and — as Hugging Face's safetensors validates a file — the tensors'
// data, in the order of their offsets, covering the data section exactly: each starts where the one before
// ends, the last ends where the file does (an overlap would alias two tensors, a gap hides bytes no tensor
// names). Empty tensors hold no bytes and may sit at any offset inside the data.
SafetensorsHeader parse_safetensors_header(std::string_view json, std::uint64_t file_size);

}  // namespace flowline
