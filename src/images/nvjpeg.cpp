// nvJPEG on demand (nvjpeg.hpp): the library opened with dlopen, the few entry points flowline calls, which
// JPEGs it is given, and batched decoding with a per-image retry.
//
// The types and functions below are declared here, not taken from nvjpeg.h: the header comes only with the
// PyPI wheel (nvidia-nvjpeg), which a build machine need not have, and flowline calls nine functions. They
// follow nvjpeg.h 13.0.4.44 (NVJPEG_VER 13.0.4, the wheel nvidia-nvjpeg==13.0.4.44 for CUDA 13.0): enums are
// ints in the C ABI, handles opaque pointers, cudaStream_t a pointer. load_nvjpeg() opens libnvjpeg.so.13
// only and checks that its major version is 13, so the declarations match the library they call.
#include "nvjpeg.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>

#include <cstdio>  // jpeglib.h needs FILE

#include <jpeglib.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace flowline::images {
namespace {

namespace fs = std::filesystem;

// nvjpeg.h 13.0.4: nvjpegStatus_t, nvjpegBackend_t, nvjpegOutputFormat_t, libraryPropertyType values used.
constexpr int kSuccess = 0;
constexpr int kBackendDefault = 0;
constexpr int kOutputRgbi = 5;
constexpr int kMajorVersion = 0;                   // libraryPropertyType MAJOR_VERSION
constexpr unsigned kFlagBitstreamStrict = 1 << 2;  // NVJPEG_FLAGS_BITSTREAM_STRICT: corrupt data is an error
constexpr const char* kLibraryName = "libnvjpeg.so.13";

struct NvImage {  // nvjpegImage_t
  unsigned char* channel[4];
  std::size_t pitch[4];
};

struct Api {
  int (*get_property)(int, int*) = nullptr;
  int (*create_ex)(int, void*, void*, unsigned, void**) = nullptr;
  int (*destroy)(void*) = nullptr;
  int (*state_create)(void*, void**) = nullptr;
  int (*state_destroy)(void*) = nullptr;
  int (*get_image_info)(void*, const unsigned char*, std::size_t, int*, int*, int*, int*) = nullptr;
  int (*decode)(void*, void*, const unsigned char*, std::size_t, int, NvImage*, void*) = nullptr;
  int (*batched_initialize)(void*, void*, int, int, int) = nullptr;
  int (*decode_batched)(void*, void*, const unsigned char* const*, const std::size_t*, NvImage*, void*) = nullptr;
};

Api api;
NvjpegLibrary library;

// Binds every entry point from `handle`; false with `why` naming the first one missing.
bool bind(void* handle, std::string& why) {
  const auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr && why.empty()) why = fmt::format("it has no {}", name);
  };
  get(api.get_property, "nvjpegGetProperty");
  get(api.create_ex, "nvjpegCreateEx");
  get(api.destroy, "nvjpegDestroy");
  get(api.state_create, "nvjpegJpegStateCreate");
  get(api.state_destroy, "nvjpegJpegStateDestroy");
  get(api.get_image_info, "nvjpegGetImageInfo");
  get(api.decode, "nvjpegDecode");
  get(api.batched_initialize, "nvjpegDecodeBatchedInitialize");
  get(api.decode_batched, "nvjpegDecodeBatched");
  if (!why.empty()) return false;
  int major = 0;
  if (api.get_property(kMajorVersion, &major) != kSuccess || major != 13) {
    why = fmt::format("its major version is {}, not 13 (flowline declares nvjpeg.h 13.0's types)", major);
    return false;
  }
  return true;
}

// Opens `what` (a path, or a bare name for the system's loader path); true when loaded and bound.
bool try_open(const std::string& what, std::vector<std::string>& tried) {
  void* handle = dlopen(what.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    tried.push_back(fmt::format("{} ({})", what, error ? error : "does not load"));
    return false;
  }
  std::string why;
  if (!bind(handle, why)) {
    tried.push_back(fmt::format("{} ({})", what, why));
    dlclose(handle);
    return false;
  }
  Dl_info info{};
  library.path = dladdr(reinterpret_cast<void*>(api.decode), &info) && info.dli_fname ? info.dli_fname : what;
  library.loaded = true;
  return true;
}

void search(const std::vector<fs::path>& folders) {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("FLOWLINE_NVJPEG"); env && *env) {
    const fs::path given(env);
    std::error_code ec;
    const fs::path file = fs::is_directory(given, ec) ? given / kLibraryName : given;
    if (!try_open(file.string(), tried))
      library.problem = fmt::format("{} named by FLOWLINE_NVJPEG did not load: {}", kLibraryName, tried.back());
    return;  // an explicit choice is not second-guessed by the other places
  }
  for (const auto& folder : folders) {
    std::error_code ec;
    const fs::path file = folder / kLibraryName;
    if (!fs::exists(file, ec)) continue;
    if (try_open(file.string(), tried)) return;
  }
  if (try_open(kLibraryName, tried)) return;
  std::string looked;
  for (const auto& folder : folders) looked += folder.string() + ", ";
  library.problem = fmt::format(
      "{} was not found or did not load (looked in FLOWLINE_NVJPEG, {}then the system: {}; "
      "install the PyPI wheel nvidia-nvjpeg for CUDA 13)",
      kLibraryName, looked, tried.empty() ? "" : tried.back());
}

std::uint32_t be16(std::span<const std::uint8_t> b, std::size_t at) { return (std::uint32_t{b[at]} << 8) | b[at + 1]; }

void check(int status, const char* call) {
  if (status != kSuccess) throw Error(fmt::format("nvJPEG: {} failed with status {}", call, status));
}

}  // namespace

const NvjpegLibrary& load_nvjpeg(const std::vector<fs::path>& folders) {
  static std::once_flag once;
  std::call_once(once, [&] {
    search(folders);
    if (library.loaded) spdlog::debug("loaded nvJPEG from {}", library.path);
  });
  return library;
}

// libjpeg-turbo 2.1's colour rules (jdapimin.c default_decompress_parms) for 3 components: JFIF means YCbCr; an
// Adobe marker's transform 0 means RGB; component ids 'R','G','B' mean RGB. nvJPEG assumes YCbCr, so RGB goes
// to the CPU.
std::string nvjpeg_takes(std::span<const std::uint8_t> b) {
  if (b.size() < 4 || b[0] != 0xff || b[1] != 0xd8) return "not a JPEG";
  if (b[b.size() - 2] != 0xff || b[b.size() - 1] != 0xd9) return "no EOI marker at the end";
  bool jfif = false;
  int adobe_transform = -1;
  int frame = -1;
  std::size_t frame_at = 0;
  std::size_t at = 2;
  while (at + 4 <= b.size()) {
    if (b[at] != 0xff) return "corrupt marker sequence";
    const std::uint8_t marker = b[at + 1];
    if (marker == 0xff) {
      ++at;
      continue;
    }
    if (marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      at += 2;
      continue;
    }
    const std::size_t length = be16(b, at + 2);
    if (length < 2 || at + 2 + length > b.size()) return "truncated header";
    const std::size_t data = at + 4;
    if (marker == 0xda) break;  // the first scan: the header is read
    if (marker == 0xe0 && length >= 7 && std::equal(b.begin() + data, b.begin() + data + 5, "JFIF")) jfif = true;
    if (marker == 0xee && length >= 14 && std::equal(b.begin() + data, b.begin() + data + 5, "Adobe"))
      adobe_transform = b[data + 11];
    if (marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc && frame < 0) {
      frame = marker;
      frame_at = data;
    }
    at += 2 + length;
  }
  if (frame < 0) return "no frame header before the first scan";
  if (frame == 0xc3) return "lossless JPEG";
  if (frame >= 0xc9) return "arithmetic coding";
  if (frame > 0xc2) return "hierarchical JPEG";
  if (frame_at + 6 > b.size()) return "truncated frame header";
  if (b[frame_at] != 8) return fmt::format("{}-bit samples", b[frame_at]);
  if (be16(b, frame_at + 1) == 0 || be16(b, frame_at + 3) == 0) return "zero size in the frame header";
  const int components = b[frame_at + 5];
  if (components == 4) return "4 components (CMYK or YCCK)";
  if (components != 1 && components != 3) return fmt::format("{} components", components);
  if (components == 3 && !jfif) {
    if (adobe_transform == 0) return "RGB (Adobe transform 0)";
    if (adobe_transform < 0 && frame_at + 6 + 9 <= b.size() && b[frame_at + 6] == 'R' && b[frame_at + 9] == 'G' &&
        b[frame_at + 12] == 'B')
      return "RGB (component ids R, G, B)";
  }
  return {};
}

std::vector<std::uint8_t> grey_jpeg(std::uint32_t width, std::uint32_t height) {
  if (width == 0 || height == 0 || width > 65535 || height > 65535)
    throw Error(fmt::format("grey_jpeg: {}x{} is not a JPEG size", width, height));
  // libjpeg's default error handler exits on an error; none can happen with these settings and memory output
  // (short of running out of memory, which ends the process anyway).
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<std::uint8_t> row(std::size_t{width} * 3, 128);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW rows[1] = {row.data()};
    jpeg_write_scanlines(&cinfo, rows, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<std::uint8_t> bytes(out, out + size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

struct NvjpegDecoder::State {
  void* handle = nullptr;
  void* single = nullptr;   // nvjpegDecode's state
  void* batched = nullptr;  // nvjpegDecodeBatched's state
  int batch_size = 0;       // what `batched` was initialised for (0: not yet, or reset after a refusal)
};

NvjpegDecoder::NvjpegDecoder() : state_(std::make_unique<State>()) {
  if (!library.loaded) throw Error("nvJPEG: the library is not loaded (load_nvjpeg first)");
  // Strict: a corrupt stream is an error, so it goes to the CPU decoder, which says what is wrong.
  if (api.create_ex(kBackendDefault, nullptr, nullptr, kFlagBitstreamStrict, &state_->handle) != kSuccess) {
    check(api.create_ex(kBackendDefault, nullptr, nullptr, 0, &state_->handle), "nvjpegCreateEx");
  }
  try {
    check(api.state_create(state_->handle, &state_->single), "nvjpegJpegStateCreate");
    check(api.state_create(state_->handle, &state_->batched), "nvjpegJpegStateCreate");
  } catch (...) {
    if (state_->single) api.state_destroy(state_->single);
    api.destroy(state_->handle);
    throw;
  }
}

NvjpegDecoder::~NvjpegDecoder() {
  api.state_destroy(state_->batched);
  api.state_destroy(state_->single);
  api.destroy(state_->handle);
}

bool NvjpegDecoder::image_size(std::span<const std::uint8_t> jpeg, std::uint32_t& width, std::uint32_t& height) {
  int components = 0, subsampling = 0;
  int widths[4] = {}, heights[4] = {};
  if (api.get_image_info(state_->handle, jpeg.data(), jpeg.size(), &components, &subsampling, widths, heights) !=
      kSuccess)
    return false;
  if ((components != 1 && components != 3) || widths[0] <= 0 || heights[0] <= 0) return false;
  width = static_cast<std::uint32_t>(widths[0]);
  height = static_cast<std::uint32_t>(heights[0]);
  return true;
}

std::vector<bool> NvjpegDecoder::decode(std::span<const std::span<const std::uint8_t>> jpegs,
                                        std::span<std::uint8_t* const> outputs, void* stream) {
  const std::size_t n = jpegs.size();
  std::vector<bool> done(n, false);
  if (n == 0) return done;
  std::vector<NvImage> images(n);
  std::vector<const unsigned char*> data(n);
  std::vector<std::size_t> lengths(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t width = 0, height = 0;
    image_size(jpegs[i], width, height);
    images[i] = NvImage{{outputs[i], nullptr, nullptr, nullptr}, {std::size_t{width} * 3, 0, 0, 0}};
    data[i] = jpegs[i].data();
    lengths[i] = jpegs[i].size();
  }
  const int batch = static_cast<int>(n);
  bool batched = n > 1;
  if (batched && state_->batch_size != batch) {
    batched = api.batched_initialize(state_->handle, state_->batched, batch, 1, kOutputRgbi) == kSuccess;
    state_->batch_size = batched ? batch : 0;
  }
  if (batched && api.decode_batched(state_->handle, state_->batched, data.data(), lengths.data(), images.data(),
                                    stream) == kSuccess) {
    done.assign(n, true);
    return done;
  }
  if (batched) {
    spdlog::debug("nvJPEG refused a batch of {} images; decoding them one at a time", n);
    state_->batch_size = 0;  // initialise again before the next batch (nvjpeg.h: it resets a failed batch)
  }
  for (std::size_t i = 0; i < n; ++i) {
    done[i] =
        api.decode(state_->handle, state_->single, data[i], lengths[i], kOutputRgbi, &images[i], stream) == kSuccess;
  }
  return done;
}

}  // namespace flowline::images
