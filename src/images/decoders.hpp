// src/images/decoders.hpp — the per-format decoders behind flowline::images::decode_image (private to the
// images library). Each takes the whole encoded file, checks the pixel count its header states against the
// limits before allocating the pixels, and returns 8-bit RGB as Pillow's convert("RGB") gives it. Each throws
// flowline::InputError whose message starts with the format's name ("JPEG: truncated ...").
#pragma once

#include "flowline/images.hpp"

#include <cstdint>
#include <span>
#include <string_view>

namespace flowline::images::detail {

Image decode_jpeg(std::span<const std::uint8_t> bytes, const DecodeLimits& limits);
Image decode_png(std::span<const std::uint8_t> bytes, const DecodeLimits& limits);
Image decode_webp(std::span<const std::uint8_t> bytes, const DecodeLimits& limits);

// Throws InputError when a width x height image is empty or has more pixels than the limits allow.
void check_size(std::string_view format, std::uint64_t width, std::uint64_t height, const DecodeLimits& limits);
[[noreturn]] void fail(std::string_view format, std::string_view problem);

}  // namespace flowline::images::detail
