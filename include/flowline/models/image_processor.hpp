// flowline/models/image_processor.hpp — pixel_values from decoded images, as transformers' CLIPImageProcessor and
// SiglipImageProcessor (and their Fast variants, which transformers 5 picks by default) make them.
//
// Included only by image executors (it brings LibTorch). ImageProcessorConfig::load reads a checkpoint's
// preprocessor_config.json once, at load; preprocess_images is then called from any number of threads at once
// (it keeps no state): it resizes each image on its own (shortest edge or fixed size, bicubic with antialias as
// torchvision does in the Fast processors), center-crops, rescales and normalizes, on `device`, and stacks the
// batch. The images are borrowed for the call; the returned tensor is the caller's.
#pragma once

#include "flowline/images.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

namespace flowline::models {

// preprocessor_config.json of CLIPImageProcessor / SiglipImageProcessor (their Fast variants too).
struct ImageProcessorConfig {
  enum class Kind { clip, siglip };
  // How `size` reads: {"shortest_edge": N} (CLIP) or {"height": H, "width": W} (SigLIP).
  enum class SizeMode { shortest_edge, fixed };
  // PIL's resampling filters by their number in the JSON (0 nearest, 2 bilinear, 3 bicubic).
  enum class Resample { nearest = 0, bilinear = 2, bicubic = 3 };

  Kind kind = Kind::clip;
  std::string processor_type;  // image_processor_type as written ("CLIPImageProcessor", ...)
  bool do_resize = true;
  SizeMode size_mode = SizeMode::shortest_edge;
  std::int64_t shortest_edge = 224;  // SizeMode::shortest_edge
  std::int64_t height = 224;         // SizeMode::fixed
  std::int64_t width = 224;
  Resample resample = Resample::bicubic;
  bool do_center_crop = true;
  std::int64_t crop_height = 224;
  std::int64_t crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
  bool do_convert_rgb = true;

  // The output's height and width ([N, 3, H, W]): the crop, else the fixed size; -1 where it depends on the image
  // (shortest_edge without a center crop, or no resize).
  std::int64_t output_height() const;
  std::int64_t output_width() const;

  // Reads model_folder/preprocessor_config.json. Throws ConfigError naming the file and the bad key.
  static ImageProcessorConfig load(const std::filesystem::path& model_folder);
  // The same from a file's text; `where` names it in errors.
  static ImageProcessorConfig parse(std::string_view json_text, const std::string& where);
};

// The model's pixel_values [N, 3, H, W] on `device` in `dtype`, as transformers' processor gives them.
// Throws InputError for an image with no pixels; an empty span gives [0, 3, H, W].
at::Tensor preprocess_images(std::span<const images::Image> images, const ImageProcessorConfig& config,
                             const c10::Device& device, c10::ScalarType dtype);
// The same from images held in tensors: each uint8 [H, W, 3] (rows top to bottom, RGB, as images::Image holds
// them), on the host or already on `device` — a GPU decoder's output is used where it is, never copied back.
// The tensors are borrowed; on a GPU the work is queued on the current stream, which must be the one their
// pixels were written on (or ordered after it). Images of one size on one side (host or device) are resized and
// cropped together, and the host's cross to a GPU in one copy from pinned memory; the pixels are the same as one
// image at a time. Throws InputError for a tensor of another shape or type.
at::Tensor preprocess_image_tensors(std::span<const at::Tensor> images, const ImageProcessorConfig& config,
                                    const c10::Device& device, c10::ScalarType dtype);

}  // namespace flowline::models
