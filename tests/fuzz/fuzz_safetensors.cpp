// Fuzz target: the safetensors reader (the SentenceEncoder's and TorchModule's weights) on any bytes:
// header length, JSON header, dtypes, shapes and data offsets. Properties: a bad file is a flowline::Error;
// naming the file; every tensor of a file that opens can be read whole, with as many bytes as its shape and dtype say.
#include "flowline/error.hpp"
#include "flowline/models/safetensors.hpp"

#include "fuzz_support.hpp"

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static flowline::fuzz::MemoryFile file;
  const std::string& path = file.hold(data, size);
  try {
    const flowline::models::SafetensorsFile weights(path);
    for (const auto& name : weights.names()) {
      const at::Tensor t = weights.get(name);
      if (!t.is_contiguous()) flowline::fuzz::broken("a tensor that is not contiguous");
      const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
      if (bytes > size) flowline::fuzz::broken("a tensor larger than the file");
      // Touch every byte, so a view past the mapping is caught by ASan or a fault.
      const auto* p = static_cast<const std::uint8_t*>(t.data_ptr());
      unsigned sum = 0;
      for (std::size_t i = 0; i < bytes; ++i) sum += p[i];
      if (sum == 0xFFFFFFFFu) std::abort();  // keeps the loop
    }
  } catch (const flowline::Error& e) {
    if (std::string_view(e.what()).find(path) == std::string_view::npos) flowline::fuzz::broken(e.what());
  }
  return 0;
}
