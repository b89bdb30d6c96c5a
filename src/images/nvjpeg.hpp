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
// with their EOI marker; jpeg_planes(): chroma at full size or halved across, down or both). Everything else —
// CMYK/YCCK, Adobe RGB, arithmetic coding, lossless, 12-bit, a missing EOI, 4:1:1 — is left to the CPU
// decoders, as is any image whose header or decode nvJPEG refuses; the CPU then gives the pixels or its error
// text. nvJPEG decodes to component planes (NVJPEG_OUTPUT_YUV, or NVJPEG_OUTPUT_Y for grey), and the caller
// turns them into RGB as libjpeg-turbo does (images/jpeg_color.hpp), so the pixels differ from the CPU's only
// by nvJPEG's IDCT.
#pragma once

#include "flowline/images.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
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

// A JPEG's component planes as libjpeg reads its frame header (jdinput.c): what nvJPEG's planar output holds
// and how each plane becomes full size (images/jpeg_color.hpp).
struct JpegPlanes {
  std::string problem;  // empty when the planes can be made libjpeg's RGB on the GPU, else why not ("4:1:1 chroma")
  int components = 0;   // 1 (grey) or 3 (Y, Cb, Cr)
  std::uint32_t width = 0, height = 0;
  // Per component: libjpeg's downsampled_width and downsampled_height (ceil(width * h / max_h) and likewise down),
  // and the frame's largest sampling factor over the component's, across and down (1 or 2; the luma's 1 and 1).
  std::uint32_t plane_width[3] = {}, plane_height[3] = {};
  int ratio_across[3] = {}, ratio_down[3] = {};
};
// Reads the frame header (the markers before the first scan); never throws. For a JPEG nvjpeg_takes() takes.
JpegPlanes jpeg_planes(std::span<const std::uint8_t> jpeg);

// Where nvJPEG's own device buffers come from, modelled on cudaMalloc/cudaFree (nvjpegDevAllocator_t: 0 is
// success). Both null: cudaMalloc. The image executor passes LibTorch's caching allocator, which puts nvJPEG's
// memory in the same pool and statistics as the model's. nvJPEG 13.0 calls it for the default and gpu_hybrid backends'
// buffers (on the first batches of a size: bench/nvjpeg_memory, docs/images.md; hybrid not measured), never for the
// hardware backend's (about 21 MiB a decoder, from the driver). The hooks have to give cudaMalloc's and cudaFree's
// guarantees themselves (nothing else uses a buffer they return; nothing uses one after a release returns). Called
// on the thread that calls decode() or the destructor, with that thread's CUDA device current.
struct NvjpegDeviceAllocator {
  int (*allocate)(void** pointer, std::size_t size) = nullptr;
  int (*release)(void* pointer) = nullptr;
};

// The backends of batched decoding (nvjpeg.h's nvjpegBackend_t), by the names the ClipEncoder's
// gpu_decode_backend parameter takes: default, hybrid (Huffman decoding on the CPU), gpu_hybrid (on the GPU for
// batches of more than 50 baseline JPEGs), hardware (the A100/H100 JPEG engines: baseline JPEGs only, the
// others one at a time with the default backend).
inline constexpr const char* kNvjpegBackends[] = {"default", "hybrid", "gpu_hybrid", "hardware"};
// What NvjpegDecoder also takes: "auto", the fastest the GPU has — hardware where its JPEG engines start, else
// gpu_hybrid (on an H200, 256 JPEGs of 500x375 a batch, one decoder: hardware 5,096 images/s, gpu_hybrid 4,428,
// default 740; docs/images.md).
inline constexpr const char* kNvjpegAutoBackend = "auto";

// Where nvJPEG writes one image's planes: plane[c] with rows of pitch[c] bytes, each at least as large as
// NvjpegDecoder::plane_sizes() says (for grey, plane[0] only is written).
struct NvjpegPlanesOut {
  std::uint8_t* plane[3] = {};
  std::size_t pitch[3] = {};
};

// One nvJPEG handle and its decode states, for one thread. Made after load_nvjpeg() succeeded, with the
// replica's CUDA device current; throws flowline::Error naming the nvJPEG call and status if nvJPEG cannot
// start (no GPU, driver too old, a backend the GPU lacks), or naming the backends when `backend` is none of
// kNvjpegBackends and not kNvjpegAutoBackend (then backend() says which one started).
class NvjpegDecoder {
 public:
  explicit NvjpegDecoder(NvjpegDeviceAllocator allocator = {}, std::string_view backend = "default");
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // The backend of batched decoding: one of kNvjpegBackends (the one "auto" picked).
  const std::string& backend() const;

  // The size of each plane nvJPEG writes for `jpeg`, whose jpeg_planes() are `planes` (without a problem): at
  // least libjpeg's plane size (planes.plane_width/height), possibly more (then the plane's top left is
  // libjpeg's). False when nvJPEG refuses the header or reads it otherwise than libjpeg (other components,
  // sizes or subsampling; the first such JPEG of a decoder is logged as a warning naming both readings): the JPEG
  // is then the CPU's.
  bool plane_sizes(std::span<const std::uint8_t> jpeg, const JpegPlanes& planes, std::uint32_t widths[3],
                   std::uint32_t heights[3]);

  // Decodes jpegs[i] (jpeg_planes() given as planes[i]) into the planes outputs[i] names, in device memory, on
  // `stream` (a cudaStream_t): one batched call to NVJPEG_OUTPUT_YUV for the colour JPEGs when there are two or
  // more (with the hardware backend: of the baseline JPEGs it takes, the others one at a time with the default
  // backend); a lone colour JPEG and grey JPEGs one at a time with the default backend (grey to NVJPEG_OUTPUT_Y);
  // if nvJPEG refuses the batch, each image alone. Returns, per image, whether it
  // was decoded; a false one's planes are garbage and the caller decodes it on the CPU. The bytes must stay
  // valid and unchanged until the work queued on `stream` has run.
  std::vector<bool> decode(std::span<const std::span<const std::uint8_t>> jpegs, std::span<const JpegPlanes> planes,
                           std::span<const NvjpegPlanesOut> outputs, void* stream);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flowline::images
