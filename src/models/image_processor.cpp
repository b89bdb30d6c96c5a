// ImageProcessorConfig and preprocess_images (flowline/models/image_processor.hpp): transformers 5's
// CLIPImageProcessor / SiglipImageProcessor (TorchvisionBackend, what AutoImageProcessor gives) step by step:
//   resize  — torchvision's resize of a uint8 CHW tensor on the CPU: torch's own uint8 antialiased kernel; elsewhere
//             the same in float32, a horizontal then a vertical pass, each rounded and clamped to uint8 as the
//             CPU kernel does (within 1/255 of the CPU); an image already at the size is left alone;
//   crop    — int((H - h) / 2) from the top, zero padding first where the image is smaller than the crop;
//   rescale and normalize fused as transformers fuses them: (x - mean / factor) / (std / factor) in float32.
#include "flowline/models/image_processor.hpp"

#include "flowline/error.hpp"
#include "flowline/torch_support.hpp"
#include "model_file.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace flowline::models {

namespace {

[[noreturn]] void config_fail(const std::string& where, const std::string& message) {
  throw ConfigError({Diagnostic{SourceLocation{where}, message}});
}

struct Reader {
  const boost::json::object& json;
  const std::string& where;

  bool flag(std::string_view key, bool fallback) const {
    const auto* v = json.if_contains(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_bool()) config_fail(where, fmt::format("'{}' must be true or false", key));
    return v->as_bool();
  }
  double number(const boost::json::value& v, std::string_view key) const {
    if (!v.is_number()) config_fail(where, fmt::format("'{}' must be a number", key));
    return v.to_number<double>();
  }
  std::int64_t positive(const boost::json::value& v, std::string_view key) const {
    const double x = number(v, key);
    if (x < 1 || x != std::floor(x) || x > 1 << 16)
      config_fail(where, fmt::format("'{}' must be a whole number of pixels from 1 to 65536", key));
    return static_cast<std::int64_t>(x);
  }
  std::array<double, 3> triple(std::string_view key, std::array<double, 3> fallback) const {
    const auto* v = json.if_contains(key);
    if (!v || v->is_null()) return fallback;
    if (v->is_number()) return {number(*v, key), number(*v, key), number(*v, key)};
    if (!v->is_array() || v->as_array().size() != 3)
      config_fail(where, fmt::format("'{}' must be a list of 3 numbers (one per RGB channel)", key));
    const auto& a = v->as_array();
    return {number(a[0], key), number(a[1], key), number(a[2], key)};
  }
};

void read_size(const Reader& r, ImageProcessorConfig& c) {
  const auto* v = r.json.if_contains("size");
  if (!v || v->is_null()) return;
  if (v->is_number()) {  // older configs: one number, the shortest edge (CLIP) or both sides (SigLIP)
    const std::int64_t n = r.positive(*v, "size");
    c.shortest_edge = c.height = c.width = n;
    return;
  }
  if (!v->is_object()) config_fail(r.where, "'size' must be {\"shortest_edge\": N} or {\"height\": H, \"width\": W}");
  const auto& size = v->as_object();
  if (const auto* e = size.if_contains("shortest_edge")) {
    if (size.contains("longest_edge"))
      config_fail(r.where, "'size' with 'longest_edge' is not supported (only shortest_edge, or height and width)");
    c.size_mode = ImageProcessorConfig::SizeMode::shortest_edge;
    c.shortest_edge = r.positive(*e, "size.shortest_edge");
  } else if (size.contains("height") && size.contains("width")) {
    c.size_mode = ImageProcessorConfig::SizeMode::fixed;
    c.height = r.positive(size.at("height"), "size.height");
    c.width = r.positive(size.at("width"), "size.width");
  } else {
    config_fail(r.where, "'size' must be {\"shortest_edge\": N} or {\"height\": H, \"width\": W}");
  }
}

void read_crop(const Reader& r, ImageProcessorConfig& c) {
  const auto* v = r.json.if_contains("crop_size");
  if (!v || v->is_null()) return;
  if (v->is_number()) {
    c.crop_height = c.crop_width = r.positive(*v, "crop_size");
  } else if (v->is_object() && v->as_object().contains("height") && v->as_object().contains("width")) {
    c.crop_height = r.positive(v->as_object().at("height"), "crop_size.height");
    c.crop_width = r.positive(v->as_object().at("width"), "crop_size.width");
  } else {
    config_fail(r.where, "'crop_size' must be {\"height\": H, \"width\": W} or a number");
  }
}

// transformers' get_resize_output_image_size(default_to_square=False): the short side becomes `edge`, the long
// one int(edge * long / short).
std::pair<std::int64_t, std::int64_t> shortest_edge_size(std::int64_t height, std::int64_t width, std::int64_t edge) {
  const bool portrait = width <= height;
  const std::int64_t short_side = portrait ? width : height, long_side = portrait ? height : width;
  const auto new_long =
      static_cast<std::int64_t>(static_cast<double>(edge * long_side) / static_cast<double>(short_side));
  return portrait ? std::pair{new_long, edge} : std::pair{edge, new_long};
}

// torchvision's resize_image for a uint8 [N, 3, H, W] tensor (each image on its own).
at::Tensor resize(const at::Tensor& image, std::int64_t height, std::int64_t width,
                  ImageProcessorConfig::Resample how) {
  if (image.size(2) == height && image.size(3) == width) return image;
  const std::vector<std::int64_t> size = {height, width};
  using Resample = ImageProcessorConfig::Resample;
  if (how == Resample::nearest) return at::_upsample_nearest_exact2d(image, size);  // uint8 as it is
  auto pass = [&](const at::Tensor& x, std::int64_t h, std::int64_t w) {
    return how == Resample::bicubic ? at::_upsample_bicubic2d_aa(x, {h, w}, false)
                                    : at::_upsample_bilinear2d_aa(x, {h, w}, false);
  };
  if (image.device().is_cpu()) return pass(image, height, width);  // torch's uint8 kernel (PIL's fixed point)
  // Elsewhere in float32, as the CPU's uint8 kernel does it: horizontal pass, rounded and clamped to uint8, then
  // the vertical one. One 2-D float pass (torchvision's on a GPU) skips that rounding between the passes and
  // ends up to 28/255 away from the CPU on sharp edges; two passes stay within 1/255.
  at::Tensor x = image.to(at::kFloat);
  if (image.size(3) != width) x = pass(x, image.size(2), width).round_().clamp_(0, 255);
  if (image.size(2) != height) x = pass(x, height, width).round_().clamp_(0, 255);
  return x.to(at::kByte);
}

// transformers' TorchvisionBackend.center_crop.
at::Tensor center_crop(at::Tensor image, std::int64_t crop_height, std::int64_t crop_width) {
  std::int64_t height = image.size(2), width = image.size(3);
  if (crop_width > width || crop_height > height) {
    const std::int64_t pad_w = std::max<std::int64_t>(crop_width - width, 0);
    const std::int64_t pad_h = std::max<std::int64_t>(crop_height - height, 0);
    image = at::constant_pad_nd(image, {pad_w / 2, (pad_w + 1) / 2, pad_h / 2, (pad_h + 1) / 2}, 0);
    height = image.size(2), width = image.size(3);
  }
  const auto top = static_cast<std::int64_t>(static_cast<double>(height - crop_height) / 2.0);
  const auto left = static_cast<std::int64_t>(static_cast<double>(width - crop_width) / 2.0);
  return image.slice(2, top, top + crop_height).slice(3, left, left + crop_width);
}

// Images of one size on one side (the host, or the target device) of a preprocess_image_tensors batch.
struct Group {
  std::int64_t height = 0, width = 0;
  bool on_host = false;
  std::vector<std::int64_t> members;  // indexes into the batch's images, ascending
  at::Tensor pixels;                  // uint8 [members, 3, h, w] after resize and crop
};

// A group's images as one uint8 [n, h, w, 3] tensor on `device`.
at::Tensor group_batch(const Group& group, std::span<const at::Tensor> images, const c10::Device& device) {
  const auto n = static_cast<std::int64_t>(group.members.size());
  if (group.on_host) {
    // Gathered on the host (pinned when it goes to a GPU, so the copy is queued, not waited for: the caching
    // host allocator keeps the buffer until the copy has run), then sent at once.
    at::Tensor host = at::empty({n, group.height, group.width, 3},
                                at::TensorOptions().dtype(at::kByte).pinned_memory(device.is_cuda()));
    // memcpy, not copy_: ATen's CPU copy of an image this size forks a team of OpenMP threads, which spin and
    // slow the decoders of the other replicas.
    const std::size_t bytes = static_cast<std::size_t>(group.height * group.width * 3);
    auto* to = host.data_ptr<std::uint8_t>();
    for (std::int64_t k = 0; k < n; ++k) {
      const at::Tensor& image = images[static_cast<std::size_t>(group.members[k])];
      if (image.is_contiguous()) {
        std::memcpy(to + static_cast<std::size_t>(k) * bytes, image.data_ptr<std::uint8_t>(), bytes);
      } else {
        host[k].copy_(image);
      }
    }
    return host.to(device, /*non_blocking=*/true);
  }
  if (n == 1) return images[static_cast<std::size_t>(group.members[0])].unsqueeze(0);
  std::vector<at::Tensor> parts;
  parts.reserve(group.members.size());
  for (const std::int64_t i : group.members) parts.push_back(images[static_cast<std::size_t>(i)]);
  return at::stack(parts, 0);
}

// A uint8 [n, h, w, 3] batch resized and cropped as `config` says: uint8 [n, 3, H, W].
at::Tensor resize_and_crop(const at::Tensor& batch, const ImageProcessorConfig& config) {
  at::Tensor x = batch.permute({0, 3, 1, 2}).contiguous();
  if (config.do_resize) {
    const auto [h, w] = config.size_mode == ImageProcessorConfig::SizeMode::fixed
                            ? std::pair{config.height, config.width}
                            : shortest_edge_size(x.size(2), x.size(3), config.shortest_edge);
    x = resize(x, h, w, config.resample);
  }
  if (config.do_center_crop) x = center_crop(x, config.crop_height, config.crop_width);
  return x;
}

}  // namespace

std::int64_t ImageProcessorConfig::output_height() const {
  if (do_center_crop) return crop_height;
  if (!do_resize) return -1;
  return size_mode == SizeMode::fixed ? height : -1;
}

std::int64_t ImageProcessorConfig::output_width() const {
  if (do_center_crop) return crop_width;
  if (!do_resize) return -1;
  return size_mode == SizeMode::fixed ? width : -1;
}

ImageProcessorConfig ImageProcessorConfig::load(const std::filesystem::path& model_folder) {
  const auto path = model_folder / "preprocessor_config.json";
  std::string text;
  try {
    text = read_model_file(path, ModelFile::Json);
  } catch (const Error& e) {
    config_fail(path.string(), e.what());
  }
  return parse(text, path.string());
}

ImageProcessorConfig ImageProcessorConfig::parse(std::string_view json_text, const std::string& where) {
  boost::system::error_code ec;
  const auto value = boost::json::parse(json_text, ec);
  if (ec) config_fail(where, fmt::format("not valid JSON: {}", ec.message()));
  if (!value.is_object()) config_fail(where, "must be a JSON object");
  const Reader r{value.as_object(), where};
  ImageProcessorConfig c;
  for (const char* key : {"image_processor_type", "feature_extractor_type"}) {
    if (const auto* v = r.json.if_contains(key); v && v->is_string()) {
      c.processor_type = std::string(v->as_string());
      break;
    }
  }
  if (c.processor_type.starts_with("Siglip")) {
    c.kind = Kind::siglip;  // SiglipImageProcessor's defaults
    c.size_mode = SizeMode::fixed;
    c.do_center_crop = false;
    c.image_mean = {0.5, 0.5, 0.5};
    c.image_std = {0.5, 0.5, 0.5};
  } else if (!c.processor_type.starts_with("CLIP")) {
    config_fail(where, fmt::format("image_processor_type '{}' is not supported (expected CLIPImageProcessor or "
                                   "SiglipImageProcessor, or their Fast variants)",
                                   c.processor_type));
  }
  c.do_resize = r.flag("do_resize", c.do_resize);
  read_size(r, c);
  if (const auto* v = r.json.if_contains("resample"); v && !v->is_null()) {
    const double n = r.number(*v, "resample");
    if (n != 0 && n != 2 && n != 3)
      config_fail(where, fmt::format("'resample' {} is not supported (0 nearest, 2 bilinear, 3 bicubic)", n));
    c.resample = static_cast<Resample>(static_cast<int>(n));
  }
  c.do_center_crop = r.flag("do_center_crop", c.do_center_crop);
  read_crop(r, c);
  c.do_rescale = r.flag("do_rescale", c.do_rescale);
  if (const auto* v = r.json.if_contains("rescale_factor"); v && !v->is_null()) {
    c.rescale_factor = r.number(*v, "rescale_factor");
    if (!(c.rescale_factor > 0)) config_fail(where, "'rescale_factor' must be positive");
  }
  c.do_normalize = r.flag("do_normalize", c.do_normalize);
  c.image_mean = r.triple("image_mean", c.image_mean);
  c.image_std = r.triple("image_std", c.image_std);
  for (double s : c.image_std) {
    if (!(s > 0)) config_fail(where, "'image_std' must be positive");
  }
  c.do_convert_rgb = r.flag("do_convert_rgb", c.do_convert_rgb);
  return c;
}

at::Tensor preprocess_images(std::span<const images::Image> images, const ImageProcessorConfig& config,
                             const c10::Device& device, c10::ScalarType dtype) {
  std::vector<at::Tensor> hwc;
  hwc.reserve(images.size());
  for (std::size_t i = 0; i < images.size(); ++i) {
    const images::Image& image = images[i];
    if (image.width == 0 || image.height == 0 || image.rgb.size() != std::size_t{image.width} * image.height * 3)
      throw InputError({}, fmt::format("image {} of the batch: {}x{} with {} bytes is not an RGB image", i, image.width,
                                       image.height, image.rgb.size()));
    // The bytes are only read (copied to the device, or resized into a new tensor) before the call returns.
    hwc.push_back(at::from_blob(const_cast<std::uint8_t*>(image.rgb.data()),
                                {static_cast<std::int64_t>(image.height), static_cast<std::int64_t>(image.width), 3},
                                at::kByte));
  }
  return preprocess_image_tensors(hwc, config, device, dtype);
}

at::Tensor preprocess_image_tensors(std::span<const at::Tensor> images, const ImageProcessorConfig& config,
                                    const c10::Device& device, c10::ScalarType dtype) {
  // Images of one size, held on one side (host or device), are resized and cropped as one batch: the same
  // kernels, each image on its own in them, so the pixels are those of one image at a time — but a batch of
  // photos of one camera costs a dozen launches, not a dozen per image, and the host's images cross in one copy
  // from pinned memory instead of one synchronous copy each.
  std::vector<Group> groups;
  std::vector<std::size_t> group_of(images.size());
  for (std::size_t i = 0; i < images.size(); ++i) {
    const at::Tensor& image = images[i];
    if (image.dim() != 3 || image.size(2) != 3 || image.size(0) == 0 || image.size(1) == 0 ||
        image.scalar_type() != at::kByte)
      throw InputError({}, fmt::format("image {} of the batch: a {} tensor of shape {} is not an 8-bit HWC RGB image",
                                       i, c10::toString(image.scalar_type()), fmt::join(image.sizes(), "x")));
    const bool on_host = image.device() != device;
    std::size_t g = 0;
    while (g < groups.size() &&
           (groups[g].height != image.size(0) || groups[g].width != image.size(1) || groups[g].on_host != on_host))
      ++g;
    if (g == groups.size()) groups.push_back({image.size(0), image.size(1), on_host, {}, {}});
    groups[g].members.push_back(static_cast<std::int64_t>(i));
    group_of[i] = g;
  }
  if (groups.empty()) {
    const auto h = std::max<std::int64_t>(config.output_height(), 0),
               w = std::max<std::int64_t>(config.output_width(), 0);
    return at::empty({0, 3, h, w}, at::TensorOptions().device(device).dtype(dtype));
  }
  for (Group& group : groups) group.pixels = resize_and_crop(group_batch(group, images, device), config);
  // One size for the batch: the first image (in order) whose size differs from image 0's is named.
  const at::Tensor& first = groups[group_of[0]].pixels;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const at::Tensor& x = groups[group_of[i]].pixels;
    if (x.size(2) != first.size(2) || x.size(3) != first.size(3))
      throw InputError({}, fmt::format("image {} of the batch is {}x{} after preprocessing, image 0 {}x{}: a batch "
                                       "needs one size (this config neither crops nor resizes to a fixed size)",
                                       i, x.size(3), x.size(2), first.size(3), first.size(2)));
  }
  std::vector<at::Tensor> done;
  std::vector<std::int64_t> order;  // order[k]: the image at row k of the groups' concatenation
  for (const Group& group : groups) {
    done.push_back(group.pixels);
    order.insert(order.end(), group.members.begin(), group.members.end());
  }
  at::Tensor stacked = done.size() == 1 ? done[0] : at::cat(done, 0);
  if (!std::is_sorted(order.begin(), order.end())) {
    std::vector<std::int64_t> row_of(order.size());  // the inverse: image i's row in `stacked`
    for (std::size_t k = 0; k < order.size(); ++k)
      row_of[static_cast<std::size_t>(order[k])] = static_cast<std::int64_t>(k);
    stacked = stacked.index_select(0, to_device_queued(at::tensor(row_of, at::kLong), device));
  }
  at::Tensor pixels = stacked.to(at::kFloat);
  // Queued, not waited for: a wait here would keep the caller from decoding its next slice during this pass.
  const auto channel = [&](const std::array<double, 3>& v) {
    return to_device_queued(at::tensor(std::vector<float>(v.begin(), v.end()), at::kFloat), device).view({1, 3, 1, 1});
  };
  if (config.do_normalize) {
    at::Tensor mean = channel(config.image_mean), std = channel(config.image_std);
    if (config.do_rescale) {  // fused as transformers fuses them
      mean = mean * (1.0 / config.rescale_factor);
      std = std * (1.0 / config.rescale_factor);
    }
    pixels = pixels.sub_(mean).div_(std);
  } else if (config.do_rescale) {
    pixels = pixels * config.rescale_factor;
  }
  return pixels.to(dtype);
}

}  // namespace flowline::models
