// nvJPEG on demand (nvjpeg.hpp): the library opened with dlopen, the few entry points flowline calls, which
// JPEGs it is given and how their planes are laid out, and batched decoding to planes with a per-image retry.
//
// The types and functions below are declared here, not taken from nvjpeg.h: the header comes only with the
// PyPI wheel (nvidia-nvjpeg), which a build machine need not have, and flowline calls nine functions. They
// follow nvjpeg.h 13.0.4.44 (NVJPEG_VER 13.0.4, the wheel nvidia-nvjpeg==13.0.4.44 for CUDA 13.0): enums are
// ints in the C ABI, handles opaque pointers, cudaStream_t a pointer. load_nvjpeg() opens libnvjpeg.so.13
// only and checks that its major version is 13, so the declarations match the library they call.
#include "nvjpeg.hpp"

#include "decoders.hpp"

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
constexpr int kBackendHybrid = 1;
constexpr int kBackendGpuHybrid = 2;
constexpr int kBackendHardware = 3;
constexpr int kCss444 = 0, kCss422 = 1, kCss420 = 2, kCss440 = 3, kCssGray = 6;  // nvjpegChromaSubsampling_t
constexpr int kOutputYuv = 1;                      // planar, the chroma planes at their stored (subsampled) size
constexpr int kOutputY = 2;                        // the luma plane only, to channel[0]
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

using detail::be16;

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

namespace {

// What the markers before the first scan say (nvjpeg_takes and the hardware backend's choice read it).
struct Header {
  std::string problem;  // empty when the markers could be read up to the first scan
  bool jfif = false;
  int adobe_transform = -1;
  int frame = -1;  // the first start-of-frame marker (0xc0 baseline, 0xc2 progressive, ...), -1 if none
  std::size_t frame_at = 0;
};

Header read_header(std::span<const std::uint8_t> b) {
  Header h;
  const auto end = detail::walk_jpeg_segments(b, [&](std::uint8_t marker, std::size_t at) {
    const std::size_t length = be16(b, at + 2);
    if (length < 2 || at + 2 + length > b.size()) {
      h.problem = "truncated header";
      return false;
    }
    const std::size_t data = at + 4;
    if (marker == 0xda) return false;  // the first scan: the header is read
    if (marker == 0xe0 && length >= 7 && std::equal(b.begin() + data, b.begin() + data + 5, "JFIF")) h.jfif = true;
    if (marker == 0xee && length >= 14 && std::equal(b.begin() + data, b.begin() + data + 5, "Adobe"))
      h.adobe_transform = b[data + 11];
    if (marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc && h.frame < 0) {
      h.frame = marker;
      h.frame_at = data;
    }
    return true;
  });
  if (end == detail::JpegWalk::no_marker) h.problem = "corrupt marker sequence";
  return h;
}

int frame_marker(std::span<const std::uint8_t> b) {
  if (b.size() < 4 || b[0] != 0xff || b[1] != 0xd8) return -1;
  const Header h = read_header(b);
  return h.problem.empty() ? h.frame : -1;
}

}  // namespace

// libjpeg-turbo 2.1's colour rules (jdapimin.c default_decompress_parms) for 3 components: JFIF means YCbCr; an
// Adobe marker's transform 0 means RGB; component ids 'R','G','B' mean RGB. nvJPEG assumes YCbCr, so RGB goes
// to the CPU.
std::string nvjpeg_takes(std::span<const std::uint8_t> b) {
  if (b.size() < 4 || b[0] != 0xff || b[1] != 0xd8) return "not a JPEG";
  if (b[b.size() - 2] != 0xff || b[b.size() - 1] != 0xd9) return "no EOI marker at the end";
  const Header h = read_header(b);
  if (!h.problem.empty()) return h.problem;
  const bool jfif = h.jfif;
  const int adobe_transform = h.adobe_transform, frame = h.frame;
  const std::size_t frame_at = h.frame_at;
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

// libjpeg's jdinput.c: each component's factors from the frame header, its plane ceil(size * factor / largest).
// jdsample.c upsamples a component by largest / own when that divides; flowline's tensors do 1 and 2.
JpegPlanes jpeg_planes(std::span<const std::uint8_t> b) {
  JpegPlanes p;
  const auto refuse = [&](std::string why) {
    p.problem = std::move(why);
    return p;
  };
  if (b.size() < 4 || b[0] != 0xff || b[1] != 0xd8) return refuse("not a JPEG");
  const Header h = read_header(b);
  if (!h.problem.empty()) return refuse(h.problem);
  if (h.frame < 0) return refuse("no frame header before the first scan");
  const std::size_t at = h.frame_at;
  const int n = at + 6 <= b.size() ? b[at + 5] : 0;
  if (n != 1 && n != 3) return refuse(n == 0 ? "truncated frame header" : fmt::format("{} components", n));
  if (at + 6 + 3 * std::size_t(n) > b.size()) return refuse("truncated frame header");
  p.components = n;
  p.height = be16(b, at + 1);
  p.width = be16(b, at + 3);
  if (p.width == 0 || p.height == 0) return refuse("zero size in the frame header");
  int across[3] = {}, down[3] = {}, max_across = 1, max_down = 1;
  for (int c = 0; c < n; ++c) {
    across[c] = b[at + 6 + 3 * c + 1] >> 4;
    down[c] = b[at + 6 + 3 * c + 1] & 15;
    if (across[c] < 1 || across[c] > 4 || down[c] < 1 || down[c] > 4) return refuse("a sampling factor out of 1..4");
    max_across = std::max(max_across, across[c]);
    max_down = std::max(max_down, down[c]);
  }
  for (int c = 0; c < n; ++c) {
    if (max_across % across[c] != 0 || max_down % down[c] != 0) return refuse("fractional chroma sampling");
    p.ratio_across[c] = max_across / across[c];
    p.ratio_down[c] = max_down / down[c];
    if (p.ratio_across[c] > 2 || p.ratio_down[c] > 2)
      return refuse(fmt::format("chroma sampled 1 in {}x{} (flowline upsamples 1 in 2 at most)", p.ratio_across[c],
                                p.ratio_down[c]));
    p.plane_width[c] = static_cast<std::uint32_t>((std::uint64_t{p.width} * across[c] + max_across - 1) / max_across);
    p.plane_height[c] = static_cast<std::uint32_t>((std::uint64_t{p.height} * down[c] + max_down - 1) / max_down);
  }
  if (p.ratio_across[0] != 1 || p.ratio_down[0] != 1) return refuse("a luma plane smaller than a chroma plane");
  return p;
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
  void* handle = nullptr;        // the default backend: headers, and nvjpegDecode one image at a time
  void* batch_handle = nullptr;  // the chosen backend's, for nvjpegDecodeBatched (== handle for the default)
  void* single = nullptr;        // nvjpegDecode's state
  void* batched = nullptr;       // nvjpegDecodeBatched's state
  int batch_size = 0;            // what `batched` was initialised for (0: not yet, or reset after a refusal)
  int backend = kBackendDefault;
  std::string backend_name = "default";
  int refusals = 0;    // batches nvJPEG refused (the first is logged as a warning)
  int mismatches = 0;  // headers nvJPEG read otherwise than libjpeg (likewise)
};

namespace {

// The backend named `name` (nvjpeg.hpp's kNvjpegBackends, in nvjpegBackend_t's order).
int backend_from_name(std::string_view name) {
  for (int i = 0; i < 4; ++i) {
    if (name == kNvjpegBackends[i]) return i;  // kBackendDefault .. kBackendHardware
  }
  throw Error(fmt::format("nvJPEG: backend '{}' is not auto, default, hybrid, gpu_hybrid or hardware", name));
}

// A handle of `backend`, strict (a corrupt stream is an error, so it goes to the CPU decoder, which says what is
// wrong) when nvJPEG accepts the flag, with `allocator`'s device memory when nvJPEG accepts it (else cudaMalloc).
void* create_handle(int backend, const std::string& name, NvjpegDeviceAllocator allocator) {
  void* handle = nullptr;
  NvjpegDeviceAllocator* given = allocator.allocate && allocator.release ? &allocator : nullptr;
  int status = -1;
  for (NvjpegDeviceAllocator* dev : {given, static_cast<NvjpegDeviceAllocator*>(nullptr)}) {
    for (const unsigned flags : {kFlagBitstreamStrict, 0u}) {
      status = api.create_ex(backend, dev, nullptr, flags, &handle);
      if (status == kSuccess) {
        if (dev == nullptr && given != nullptr)
          spdlog::warn("nvJPEG took no allocator; its buffers come from cudaMalloc");
        return handle;
      }
    }
    if (given == nullptr) break;
  }
  throw Error(fmt::format("nvJPEG: nvjpegCreateEx for the {} backend failed with status {}", name, status));
}

}  // namespace

NvjpegDecoder::NvjpegDecoder(NvjpegDeviceAllocator allocator, std::string_view backend)
    : state_(std::make_unique<State>()) {
  State& st = *state_;
  const bool automatic = backend == kNvjpegAutoBackend;
  st.backend = automatic ? kBackendHardware : backend_from_name(backend);
  st.backend_name = kNvjpegBackends[st.backend];
  if (!library.loaded) throw Error("nvJPEG: the library is not loaded (load_nvjpeg first)");
  st.handle = create_handle(kBackendDefault, "default", allocator);
  try {
    if (automatic) {
      try {
        st.batch_handle = create_handle(kBackendHardware, "hardware", allocator);
      } catch (const Error& e) {
        spdlog::debug("nvJPEG: no hardware backend on this GPU ({}): gpu_hybrid instead", e.what());
        st.backend = kBackendGpuHybrid;
        st.backend_name = kNvjpegBackends[st.backend];
      }
    }
    if (st.batch_handle == nullptr)
      st.batch_handle =
          st.backend == kBackendDefault ? st.handle : create_handle(st.backend, st.backend_name, allocator);
    check(api.state_create(st.handle, &st.single), "nvjpegJpegStateCreate");
    check(api.state_create(st.batch_handle, &st.batched), "nvjpegJpegStateCreate");
  } catch (...) {
    if (st.single) api.state_destroy(st.single);
    if (st.batch_handle && st.batch_handle != st.handle) api.destroy(st.batch_handle);
    api.destroy(st.handle);
    throw;
  }
}

NvjpegDecoder::~NvjpegDecoder() {
  State& st = *state_;
  api.state_destroy(st.batched);
  api.state_destroy(st.single);
  if (st.batch_handle != st.handle) api.destroy(st.batch_handle);
  api.destroy(st.handle);
}

const std::string& NvjpegDecoder::backend() const { return state_->backend_name; }

bool NvjpegDecoder::plane_sizes(std::span<const std::uint8_t> jpeg, const JpegPlanes& planes, std::uint32_t widths[3],
                                std::uint32_t heights[3]) {
  int components = 0, subsampling = 0;
  int w[4] = {}, h[4] = {};
  if (!planes.problem.empty() ||
      api.get_image_info(state_->handle, jpeg.data(), jpeg.size(), &components, &subsampling, w, h) != kSuccess)
    return false;
  // nvJPEG's name for the chroma layout must be the one libjpeg's factors give, Cb and Cr alike.
  const int across = planes.ratio_across[1], down = planes.ratio_down[1];
  const bool alike = planes.components == 1 || (across == planes.ratio_across[2] && down == planes.ratio_down[2]);
  const int expected = planes.components == 1 ? kCssGray
                       : across == 1          ? (down == 1 ? kCss444 : kCss440)
                                              : (down == 1 ? kCss422 : kCss420);
  bool same = alike && components == planes.components && subsampling == expected && w[0] == int(planes.width) &&
              h[0] == int(planes.height);
  for (int c = 0; c < 3; ++c) {
    const bool present = c < planes.components;
    same = same && (!present || (w[c] >= int(planes.plane_width[c]) && h[c] >= int(planes.plane_height[c])));
    widths[c] = present ? static_cast<std::uint32_t>(w[c]) : 0;  // NVJPEG_OUTPUT_Y writes the grey's one plane
    heights[c] = present ? static_cast<std::uint32_t>(h[c]) : 0;
  }
  if (!same && alike) {  // unlike Cb and Cr are refused by design; anything else is worth a word, once
    spdlog::log(state_->mismatches++ == 0 ? spdlog::level::warn : spdlog::level::debug,
                "nvJPEG reads a {}x{} JPEG otherwise than libjpeg ({} components, subsampling {}, planes {}x{} {}x{} "
                "{}x{}; libjpeg: {} components, planes {}x{} {}x{} {}x{}): such JPEGs are decoded on the CPU",
                planes.width, planes.height, components, subsampling, w[0], h[0], w[1], h[1], w[2], h[2],
                planes.components, planes.plane_width[0], planes.plane_height[0], planes.plane_width[1],
                planes.plane_height[1], planes.plane_width[2], planes.plane_height[2]);
  }
  return same;
}

std::vector<bool> NvjpegDecoder::decode(std::span<const std::span<const std::uint8_t>> jpegs,
                                        std::span<const JpegPlanes> planes, std::span<const NvjpegPlanesOut> outputs,
                                        void* stream) {
  State& st = *state_;
  const std::size_t n = jpegs.size();
  std::vector<bool> done(n, false);
  std::vector<NvImage> images(n);
  std::vector<std::size_t> batch, single;  // indexes into jpegs: colour ones batched or alone, grey ones alone
  for (std::size_t i = 0; i < n; ++i) {
    for (int c = 0; c < 3; ++c) {
      images[i].channel[c] = outputs[i].plane[c];
      images[i].pitch[c] = outputs[i].pitch[c];
    }
    images[i].channel[3] = nullptr;
    images[i].pitch[3] = 0;
    // The hardware engines take baseline JPEGs (4:1:1 and 4:1:0 chroma, which they lack, never get here).
    const bool hardware_ok = frame_marker(jpegs[i]) == 0xc0;
    (planes[i].components == 3 && (st.backend != kBackendHardware || hardware_ok) ? batch : single).push_back(i);
  }
  // A lone JPEG goes through nvjpegDecode: the hardware engines refuse a batch of one (status 4, nvJPEG 13.0 on an
  // H200), and for the other backends a batch of one is the same work.
  if (batch.size() > 1) {
    std::vector<const unsigned char*> data;
    std::vector<std::size_t> lengths;
    std::vector<NvImage> outs;
    for (const std::size_t i : batch) {
      data.push_back(jpegs[i].data());
      lengths.push_back(jpegs[i].size());
      outs.push_back(images[i]);
    }
    const int size = static_cast<int>(batch.size());
    bool ready = st.batch_size == size;
    if (!ready) {
      ready = api.batched_initialize(st.batch_handle, st.batched, size, 1, kOutputYuv) == kSuccess;
      st.batch_size = ready ? size : 0;
    }
    const int status =
        ready ? api.decode_batched(st.batch_handle, st.batched, data.data(), lengths.data(), outs.data(), stream) : -1;
    if (status == kSuccess) {
      for (const std::size_t i : batch) done[i] = true;
    } else {
      // Said once per decoder (a corrupt file in the batch is enough; out of device memory is worth seeing).
      spdlog::log(
          st.refusals++ == 0 ? spdlog::level::warn : spdlog::level::debug,
          "nvJPEG ({} backend) refused a batch of {} images ({}); decoding them one at a time", st.backend_name, size,
          ready ? fmt::format("nvjpegDecodeBatched status {}", status) : "nvjpegDecodeBatchedInitialize failed");
      st.batch_size = 0;  // initialise again before the next batch (nvjpeg.h: that resets a failed batch)
      single.insert(single.end(), batch.begin(), batch.end());
    }
  } else {
    single.insert(single.end(), batch.begin(), batch.end());
  }
  for (const std::size_t i : single) {
    const int format = planes[i].components == 1 ? kOutputY : kOutputYuv;
    done[i] =
        api.decode(st.handle, st.single, jpegs[i].data(), jpegs[i].size(), format, &images[i], stream) == kSuccess;
  }
  return done;
}

}  // namespace flowline::images
