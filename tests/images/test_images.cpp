// Tests of flowline::images: every pixel of every test image (tests/data/images, made by
// scripts/make_test_images.py) against Pillow's Image.open(...).convert("RGB"); bombs, truncations and garbage
// refused with InputError; image sources and their refusals.
#include "image_files.hpp"
#include "test_support.hpp"

#include "flowline/images.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>

using namespace flowline;
using flowline::images::decode_image;
using flowline::images::ImageFormat;

namespace {

using testing::image_dir;
using testing::input_error;
using testing::read_bytes;

}  // namespace

TEST_CASE("every test image decodes to Pillow's convert(\"RGB\") pixels exactly", "[images]") {
  const auto manifest = boost::json::parse(testing::read_text(image_dir() / "manifest.json")).as_array();
  REQUIRE(manifest.size() >= 20);
  for (const auto& entry : manifest) {
    const auto& e = entry.as_object();
    const std::string file(e.at("file").as_string());
    INFO(file);
    const Bytes bytes = read_bytes(image_dir() / file);
    const images::Image image = decode_image(bytes);
    REQUIRE(image.width == e.at("width").to_number<std::uint32_t>());
    REQUIRE(image.height == e.at("height").to_number<std::uint32_t>());
    const Bytes golden = read_bytes(image_dir() / std::string(e.at("golden").as_string()));
    REQUIRE(image.rgb.size() == golden.size());
    std::size_t differing = 0, first = 0;
    int max_diff = 0;
    for (std::size_t i = 0; i < golden.size(); ++i) {
      const int diff = std::abs(int{image.rgb[i]} - int{golden[i]});
      if (diff != 0 && differing++ == 0) first = i;
      max_diff = std::max(max_diff, diff);
    }
    INFO("differing samples " << differing << ", first at pixel " << first / 3 << ", max difference " << max_diff);
    CHECK(differing == 0);
  }
}

TEST_CASE("EXIF orientation is read from JPEG, PNG and WebP and turns the pixels as Pillow's exif_transpose",
          "[images][exif]") {
  const auto dir = image_dir() / "orientation";
  const auto manifest = boost::json::parse(testing::read_text(dir / "manifest.json")).as_array();
  REQUIRE(manifest.size() == 10);  // o1..o8.png, o6.jpg, o8.webp (scripts/make_orientation_images.py)
  for (const auto& entry : manifest) {
    const auto& e = entry.as_object();
    const std::string file(e.at("file").as_string());
    INFO(file);
    const Bytes bytes = read_bytes(dir / file);
    const int orientation = e.at("orientation").to_number<int>();
    CHECK(images::exif_orientation(bytes) == orientation);
    images::Image image = decode_image(bytes);
    images::apply_exif_orientation(image, orientation);
    CHECK(image.width == e.at("width").to_number<std::uint32_t>());
    CHECK(image.height == e.at("height").to_number<std::uint32_t>());
    CHECK(image.rgb == read_bytes(dir / std::string(e.at("golden").as_string())));
    // Every prefix of the file, and the file with each byte of its metadata changed, reads as some orientation
    // 1..8 without reading past the bytes (the sanitizers' run would catch it).
    for (std::size_t n = 0; n <= bytes.size(); ++n) {
      const int o = images::exif_orientation(std::span(bytes).first(n));
      CHECK((o >= 1 && o <= 8));
    }
    Bytes changed = bytes;
    for (std::size_t i = 0; i < std::min<std::size_t>(changed.size(), 160); ++i) {
      for (const std::uint8_t v : {std::uint8_t{0x00}, std::uint8_t{0xff}, std::uint8_t{0x7f}}) {
        const std::uint8_t saved = changed[i];
        changed[i] = v;
        const int o = images::exif_orientation(changed);
        CHECK((o >= 1 && o <= 8));
        changed[i] = saved;
      }
    }
  }
  // Images without EXIF, and garbage: 1.
  CHECK(images::exif_orientation(read_bytes(image_dir() / "rgb_30x20.png")) == 1);
  CHECK(images::exif_orientation(Bytes{'n', 'o', 't'}) == 1);
  CHECK(images::exif_orientation({}) == 1);
}

TEST_CASE("sniff_format tells JPEG, PNG and WebP by their signatures only", "[images]") {
  CHECK(images::sniff_format(read_bytes(image_dir() / "rgb_40x30_q90.jpg")) == ImageFormat::jpeg);
  CHECK(images::sniff_format(read_bytes(image_dir() / "rgb_30x20.png")) == ImageFormat::png);
  CHECK(images::sniff_format(read_bytes(image_dir() / "rgb_40x30_lossy.webp")) == ImageFormat::webp);
  const Bytes text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!'};
  CHECK_FALSE(images::sniff_format(text).has_value());
  CHECK_FALSE(images::sniff_format({}).has_value());
}

TEST_CASE("an image with more pixels than the limit is refused from its header", "[images]") {
  for (const char* file : {"rgb_40x30_q90.jpg", "rgb_30x20.png", "rgb_40x30_lossy.webp"}) {
    INFO(file);
    const Bytes bytes = read_bytes(image_dir() / file);
    const auto message = input_error([&] { decode_image(bytes, {.max_pixels = 500}); });
    CHECK_THAT(message, testing::contains("more than the limit of 500"));
    CHECK_NOTHROW(decode_image(bytes, {.max_pixels = 1200}));
  }
  // A PNG header claiming 100000 x 100000 pixels, with no data behind it: refused before any allocation.
  Bytes bomb = read_bytes(image_dir() / "rgb_30x20.png");
  const std::uint8_t size[8] = {0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0};
  std::copy(size, size + 8, bomb.begin() + 16);
  bomb.resize(33);  // signature and IHDR (its CRC now wrong too: either refusal is fine, none may allocate)
  CHECK_FALSE(input_error([&] { decode_image(bomb); }).empty());
}

TEST_CASE("truncated images are refused, never padded or crashed on", "[images]") {
  const auto manifest = boost::json::parse(testing::read_text(image_dir() / "manifest.json")).as_array();
  for (const auto& entry : manifest) {
    const std::string file(entry.as_object().at("file").as_string());
    const Bytes bytes = read_bytes(image_dir() / file);
    // A tiny PNG's last 10% may be only its IEND and CRCs, which Pillow does without too (see below).
    for (double keep : {0.0, 0.1, 0.5, file.ends_with(".png") ? 0.7 : 0.9}) {
      INFO(file << " cut to " << keep * 100 << "%");
      const std::span<const std::uint8_t> cut(bytes.data(), static_cast<std::size_t>(bytes.size() * keep));
      CHECK_FALSE(input_error([&] { decode_image(cut); }).empty());
    }
  }
  const Bytes jpeg = read_bytes(image_dir() / "rgb_40x30_q90.jpg");
  CHECK_THAT(input_error([&] { decode_image(std::span(jpeg.data(), jpeg.size() / 2)); }),
             testing::contains("JPEG image: truncated"));
}

TEST_CASE("a PNG cut right after its pixel data decodes, as Pillow decodes it", "[images]") {
  const Bytes bytes = read_bytes(image_dir() / "rgb_30x20.png");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::size_t idat = text.rfind("IDAT");
  REQUIRE(idat != std::string_view::npos);
  const std::size_t length = (std::size_t{bytes[idat - 4]} << 24) | (std::size_t{bytes[idat - 3]} << 16) |
                             (std::size_t{bytes[idat - 2]} << 8) | bytes[idat - 1];
  const std::size_t data_end = idat + 4 + length;  // no CRC, no IEND
  CHECK(decode_image(std::span(bytes.data(), data_end)).rgb == read_bytes(image_dir() / "rgb_30x20.rgb"));
  CHECK_THAT(input_error([&] { decode_image(std::span(bytes.data(), data_end - 40)); }),
             testing::contains("PNG image: truncated"));
}

TEST_CASE("garbage bytes, empty input and zero-size images get a clear InputError", "[images]") {
  CHECK(input_error([] { decode_image({}); }) == "image: no bytes (expected a JPEG, PNG or WebP file)");
  const Bytes text = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
  CHECK_THAT(input_error([&] { decode_image(text); }), testing::contains("unknown format"));
  // A valid signature followed by random bytes, for each format.
  std::srand(54);
  for (const char* file : {"rgb_40x30_q90.jpg", "rgb_30x20.png", "rgb_40x30_lossy.webp"}) {
    Bytes bytes = read_bytes(image_dir() / file);
    for (std::size_t i = 12; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(std::rand());
    INFO(file);
    CHECK_FALSE(input_error([&] { decode_image(bytes); }).empty());
  }
  Bytes zero = read_bytes(image_dir() / "rgb_30x20.png");
  std::fill(zero.begin() + 16, zero.begin() + 20, 0);  // width 0
  CHECK_FALSE(input_error([&] { decode_image(zero); }).empty());
}

namespace {

Document doc_with_uri(std::string uri) {
  Document doc;
  doc.id = "d1";
  doc.uri = std::move(uri);
  return doc;
}

std::string base64(const Bytes& bytes) {
  std::string json;
  append_json_base64(json, bytes.data(), bytes.size());
  return json.substr(1, json.size() - 2);  // without the quotes
}

}  // namespace

TEST_CASE("has_image is true for a blob, an image data: URI, an http(s) URI or an image file, not for text",
          "[images]") {
  Document blob;
  blob.blob = {1, 2, 3};
  CHECK(images::has_image(blob));
  CHECK(images::has_image(doc_with_uri("data:image/png;base64,iVBORw0KGgo=")));
  CHECK(images::has_image(doc_with_uri("/photos/cat.JPG")));
  CHECK(images::has_image(doc_with_uri("https://example.com/a.webp?size=2")));
  CHECK(images::has_image(doc_with_uri("http://example.com/photo?id=3")));  // only the server knows
  Document typed = doc_with_uri("/photos/cat");
  typed.mime_type = "image/jpeg";
  CHECK(images::has_image(typed));
  CHECK_FALSE(images::has_image(doc_with_uri("data:text/plain;base64,aGk=")));
  CHECK_FALSE(images::has_image(doc_with_uri("books/alice.txt")));  // what the text input formats set
  CHECK_FALSE(images::has_image(Document{}));
}

TEST_CASE("image_bytes reads a blob, a base64 data: URI and files under the allowed roots", "[images]") {
  const Bytes png = read_bytes(image_dir() / "rgb_30x20.png");
  images::ImageSourcePolicy policy;
  Document blob;
  blob.blob = png;
  CHECK(images::image_bytes(blob, policy) == png);
  CHECK(images::image_bytes(doc_with_uri("data:image/png;base64," + base64(png)), policy) == png);

  const auto root = testing::scratch_dir("image_sources");
  std::filesystem::create_directories(root / "inside" / "deeper");
  std::filesystem::copy_file(image_dir() / "rgb_30x20.png", root / "inside" / "deeper" / "a b.png");
  std::filesystem::copy_file(image_dir() / "rgb_30x20.png", root / "outside.png");
  std::filesystem::create_symlink(root / "outside.png", root / "inside" / "link.png");
  policy.allowed_roots = {root / "inside"};
  const auto inside = (root / "inside" / "deeper" / "a b.png").string();
  CHECK(images::image_bytes(doc_with_uri(inside), policy) == png);
  CHECK(images::image_bytes(doc_with_uri("file://" + (root / "inside/deeper/a%20b.png").string()), policy) == png);
  const auto refused = [&](const std::string& uri) {
    return input_error([&] { images::image_bytes(doc_with_uri(uri), policy); });
  };
  CHECK_THAT(refused((root / "inside" / ".." / "outside.png").string()),
             testing::contains("document 'd1': local path") && testing::contains("is not under an allowed root"));
  CHECK_THAT(refused((root / "inside" / "link.png").string()), testing::contains("is not under an allowed root"));
  CHECK_THAT(refused((root / "inside" / "missing.png").string()), testing::contains("cannot read image"));
  policy.allowed_roots.clear();
  CHECK_THAT(refused(inside), testing::contains("this flow reads no local files"));
  policy.any_local_path = true;
  CHECK(images::image_bytes(doc_with_uri((root / "outside.png").string()), policy) == png);
  policy.max_bytes = 100;
  CHECK_THAT(refused(inside), testing::contains("more than the limit of 100"));
}

TEST_CASE("image_bytes refuses http(s) unless allowed, other schemes and bad data: URIs, naming the document",
          "[images]") {
  images::ImageSourcePolicy policy;
  const auto refused = [&](const std::string& uri) {
    return input_error([&] { images::image_bytes(doc_with_uri(uri), policy); });
  };
  CHECK(refused("https://example.com/cat.jpg") ==
        "document 'd1': https URI refused: fetching images over http(s) is off (send the bytes as a blob or a data: "
        "URI, or set allow_http in the flow)");
  CHECK_THAT(refused("s3://bucket/cat.jpg"), testing::contains("URI scheme 's3' is not supported"));
  CHECK_THAT(refused("data:text/plain;base64,aGk="), testing::contains("is not an image"));
  CHECK_THAT(refused("data:image/png,raw"), testing::contains("is not base64"));
  CHECK_THAT(refused("data:image/png;base64,!!!"), testing::contains("invalid base64"));
  CHECK_THAT(refused("file://otherhost/a.png"), testing::contains("names another host"));
  CHECK_THAT(input_error([&] { images::image_bytes(Document{}, policy); }), testing::contains("has no image"));
}

TEST_CASE("image_info reads every test image's format, size and bit depth from its header", "[images]") {
  const auto manifest = boost::json::parse(testing::read_text(image_dir() / "manifest.json")).as_array();
  for (const auto& entry : manifest) {
    const auto& e = entry.as_object();
    const std::string file(e.at("file").as_string());
    INFO(file);
    const Bytes bytes = read_bytes(image_dir() / file);
    const images::ImageInfo info = images::image_info(bytes);
    CHECK(info.format == images::sniff_format(bytes));
    CHECK(file.substr(file.rfind('.') + 1).starts_with(images::format_name(info.format).substr(0, 2)));
    CHECK(info.width == e.at("width").to_number<std::uint32_t>());
    CHECK(info.height == e.at("height").to_number<std::uint32_t>());
  }
  // Bits per pixel as stored.
  const std::pair<const char*, std::uint32_t> depths[] = {
      {"rgb_40x30_q90.jpg", 24},        {"grey_24x20.jpg", 8},        {"cmyk_20x16.jpg", 32},
      {"rgb_64x8_progressive.jpg", 24}, {"bilevel_19x7.png", 1},      {"grey16_20x10.png", 16},
      {"palette_18x14.png", 4},         {"rgb16_11x9.png", 48},       {"rgba_21x13.png", 32},
      {"rgba16_10x7.png", 64},          {"rgb_40x30_lossy.webp", 24}, {"rgba_20x20_lossy.webp", 32},
  };
  for (const auto& [file, depth] : depths) {
    INFO(file);
    CHECK(images::image_info(read_bytes(image_dir() / file)).bit_depth == depth);
  }
  CHECK_THAT(input_error([] { images::image_info(Bytes{'n', 'o', 'p', 'e'}); }), testing::contains("unknown format"));
  Bytes cut = read_bytes(image_dir() / "rgb_40x30_q90.jpg");
  cut.resize(20);  // before the frame header
  CHECK_THAT(input_error([&] { images::image_info(cut); }), testing::contains("JPEG image: truncated"));
}
