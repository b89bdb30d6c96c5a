// src/images/nvjpeg.hpp — JPEG decoding on an NVIDIA GPU through nvJPEG, loaded on demand (part of
// flowline::images; no LibTorch and no CUDA headers: device memory and streams are plain pointers here).
//
// Who calls what: an image executor with a CUDA device (the ClipEncoder's gpu_decode.cpp) calls
// load_nvjpeg() once per process, then makes one NvjpegDecoder per replica and calls it from that replica's
// thread only. nvjpeg_takes() is a pure function any thread may call. Nothing links libnvjpeg: load_nvjpeg()
// opens libnvjpeg.so.13 with dlopen (docs/images.md says where it looks), and a machine without it decodes on
// the CPU as before.
//
// What nvJPEG is given: only what flowline's CPU decoder would give the same pixels for (nvjpeg_takes():
// baseline, extended or progressive Huffman JPEGs of 8-bit samples with 1 or 3 components in YCbCr, ending
// with their EOI marker). Everything else — CMYK/YCCK, Adobe RGB, arithmetic coding, lossless, 12-bit, a
// missing EOI — is left to the CPU decoders, as is any image whose header or decode nvJPEG refuses; the CPU
// then gives the pixels or its error text.
#pragma once

#include "flowline/images.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace flowline::images {

// The outcome of loading libnvjpeg: `loaded` with the file it came from, else `problem` says why (every place
// looked at). The first call searches, in order: FLOWLINE_NVJPEG (the library file, or a folder holding
// libnvjpeg.so.13), each of `folders` (the caller passes its torch venv's nvidia/cu13/lib and
// nvidia/nvjpeg/lib), then the system's loader path. Later calls return the first call's outcome whatever
// their folders. Thread-safe; the result lives as long as the process.
struct NvjpegLibrary {
  bool loaded = false;
  std::string path;
  std::string problem;
};
const NvjpegLibrary& load_nvjpeg(const std::vector<std::filesystem::path>& folders);

// Empty when the JPEG is one nvJPEG is given (see the top), else why not ("CMYK (4 components)", ...).
// Reads the markers up to the first scan and the last two bytes; never throws.
std::string nvjpeg_takes(std::span<const std::uint8_t> jpeg);

// A uniform grey baseline JPEG (JFIF, 4:2:0) of width x height (each 1 to 65535), made with libjpeg: what an
// executor decodes at start so that nvJPEG's set-up is not paid by the first request.
std::vector<std::uint8_t> grey_jpeg(std::uint32_t width, std::uint32_t height);

// Where nvJPEG's own device buffers come from, modelled on cudaMalloc/cudaFree (nvjpegDevAllocator_t: 0 is
// success). Both null: cudaMalloc. The image executor passes LibTorch's caching allocator, so nvJPEG's memory is in
// the same pool and statistics as the model's. Called on the thread that calls decode() (and the destructor).
struct NvjpegDeviceAllocator {
  int (*allocate)(void** pointer, std::size_t size) = nullptr;
  int (*release)(void* pointer) = nullptr;
};

// One nvJPEG handle and its decode states, for one thread. Made after load_nvjpeg() succeeded, with the
// replica's CUDA device current; throws flowline::Error naming the nvJPEG call and status if nvJPEG cannot
// start (no GPU, driver too old).
class NvjpegDecoder {
 public:
  explicit NvjpegDecoder(NvjpegDeviceAllocator allocator = {});
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // The backend of batched decoding, as FLOWLINE_NVJPEG_BACKEND chose it when this decoder was made: default,
  // hybrid, gpu_hybrid or hardware (docs/images.md). An unknown value makes the constructor throw.
  const std::string& backend() const;

  // The width and height nvJPEG reads from the header; false when it refuses the header.
  bool image_size(std::span<const std::uint8_t> jpeg, std::uint32_t& width, std::uint32_t& height);

  // Decodes jpegs[i] to interleaved 8-bit RGB (NVJPEG_OUTPUT_RGBI, rows of width*3 bytes, no padding) into
  // device memory outputs[i] (at least width*height*3 bytes, sized by image_size) on `stream` (a
  // cudaStream_t). One batched call first (with the hardware backend: of the baseline JPEGs it takes, the others
  // one at a time with the default backend); if nvJPEG refuses the batch, each image alone. Returns, per image,
  // whether it was decoded; a false one's output is garbage and the caller decodes it on the CPU. The bytes
  // must stay valid and unchanged until the work queued on `stream` has run.
  std::vector<bool> decode(std::span<const std::span<const std::uint8_t>> jpegs, std::span<std::uint8_t* const> outputs,
                           void* stream);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flowline::images
