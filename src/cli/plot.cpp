// PNG line charts for `flowline profile`: panels of series drawn with stb and written as one image.
#include "plot.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image_write.h>
#include <stb/stb_easy_font.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace flowline::cli {
namespace {

constexpr int kPanelWidth = 640, kHeight = 480;
constexpr int kLeft = 90, kRight = 24, kTop = 70, kBottom = 64;

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width), height_(height), pixels_(static_cast<std::size_t>(width * height * 3), 255) {}

  void pixel(int x, int y, std::uint32_t rgb) {
    if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
    auto* p = &pixels_[static_cast<std::size_t>((y * width_ + x) * 3)];
    p[0] = static_cast<std::uint8_t>(rgb >> 16), p[1] = static_cast<std::uint8_t>(rgb >> 8),
    p[2] = static_cast<std::uint8_t>(rgb);
  }
  void fill(double x0, double y0, double x1, double y1, std::uint32_t rgb) {
    for (int y = static_cast<int>(std::floor(y0)); y < static_cast<int>(std::ceil(y1)); ++y) {
      for (int x = static_cast<int>(std::floor(x0)); x < static_cast<int>(std::ceil(x1)); ++x) pixel(x, y, rgb);
    }
  }
  // A line `thickness` pixels wide; dashed lines draw 8 pixels of every 14.
  void line(double x0, double y0, double x1, double y1, std::uint32_t rgb, double thickness = 1, bool dashed = false) {
    const double length = std::hypot(x1 - x0, y1 - y0);
    const int steps = std::max(1, static_cast<int>(length * 2));
    const double half = thickness / 2;
    for (int i = 0; i <= steps; ++i) {
      const double t = static_cast<double>(i) / steps;
      if (dashed && std::fmod(t * length, 14.0) > 8.0) continue;
      const double x = x0 + (x1 - x0) * t, y = y0 + (y1 - y0) * t;
      fill(x - half, y - half, x + half, y + half, rgb);
    }
  }
  // Text with its top-left corner at (x, y), `scale` times stb_easy_font's 7-pixel glyphs.
  void text(double x, double y, const std::string& s, double scale, std::uint32_t rgb = 0x222222) {
    std::string printable = s;
    for (char& c : printable) {
      if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
    }
    std::vector<char> buffer(printable.size() * 1024 + 64);  // a glyph is at most ~14 quads of 64 bytes
    const int quads =
        stb_easy_font_print(0, 0, printable.data(), nullptr, buffer.data(), static_cast<int>(buffer.size()));
    for (int q = 0; q < quads; ++q) {
      const auto* v = reinterpret_cast<const float*>(buffer.data() + q * 64);
      // Vertices are 16 bytes (x, y, z, colour); corners 0 and 2 span the quad.
      const float qx0 = v[0], qy0 = v[1], qx1 = v[8], qy1 = v[9];
      fill(x + std::min(qx0, qx1) * scale, y + std::min(qy0, qy1) * scale, x + std::max(qx0, qx1) * scale,
           y + std::max(qy0, qy1) * scale, rgb);
    }
  }
  static double text_width(const std::string& s, double scale) {
    std::string copy = s;
    return stb_easy_font_width(copy.data()) * scale;
  }
  void save(const std::string& path) const {
    if (!stbi_write_png(path.c_str(), width_, height_, 3, pixels_.data(), width_ * 3)) {
      throw Error(fmt::format("cannot write the plot '{}'", path));
    }
  }

 private:
  int width_, height_;
  std::vector<std::uint8_t> pixels_;
};

// Tick spacing of 1, 2 or 5 times a power of ten giving about `target` intervals.
double nice_step(double span, int target) {
  const double raw = span / target;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

std::string tick_label(double v, double step) {
  if (std::abs(v) >= 1e6 && step >= 1e5) return fmt::format("{:g}M", v / 1e6);
  if (std::abs(v) >= 1e4 && step >= 1e3) return fmt::format("{:g}k", v / 1e3);
  if (step >= 1) return fmt::format("{:.0f}", v);
  const int decimals = static_cast<int>(std::ceil(-std::log10(step)));
  return fmt::format("{:.{}f}", v, decimals);
}

void draw_panel(Canvas& canvas, int x_offset, const PlotPanel& panel) {
  double x_min = std::numeric_limits<double>::max(), x_max = std::numeric_limits<double>::lowest(), y_max = 0;
  for (const auto& s : panel.series) {
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      x_min = std::min(x_min, s.x[i]), x_max = std::max(x_max, s.x[i]), y_max = std::max(y_max, s.y[i]);
    }
  }
  if (x_min > x_max) x_min = 0, x_max = 1;
  if (x_min == x_max) x_min -= 1, x_max += 1;
  const double x_pad = (x_max - x_min) * 0.06;
  x_min = std::max(0.0, x_min - x_pad), x_max += x_pad;
  if (y_max <= 0) y_max = 1;
  const double y_step = nice_step(y_max * 1.1, 5);
  const double y_top = std::ceil(y_max * 1.1 / y_step) * y_step;
  const double x_step = nice_step(x_max - x_min, 6);

  const double left = x_offset + kLeft, right = x_offset + kPanelWidth - kRight, top = kTop, bottom = kHeight - kBottom;
  auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * (right - left); };
  auto py = [&](double y) { return bottom - y / y_top * (bottom - top); };

  for (double y = 0; y <= y_top + y_step / 2; y += y_step) {
    canvas.line(left, py(y), right, py(y), 0xe4e4e4);
    const std::string label = tick_label(y, y_step);
    canvas.text(left - 8 - Canvas::text_width(label, 1.5), py(y) - 5, label, 1.5);
  }
  for (double x = std::ceil(x_min / x_step) * x_step; x <= x_max; x += x_step) {
    canvas.line(px(x), top, px(x), bottom, 0xf0f0f0);
    canvas.line(px(x), bottom, px(x), bottom + 5, 0x444444);
    const std::string label = tick_label(x, x_step);
    canvas.text(px(x) - Canvas::text_width(label, 1.5) / 2, bottom + 9, label, 1.5);
  }
  canvas.line(left, top, left, bottom, 0x444444, 1.5);
  canvas.line(left, bottom, right, bottom, 0x444444, 1.5);
  canvas.text(x_offset + kLeft, 38, panel.title, 2);
  canvas.text(x_offset + 10, top - 18, panel.y_label, 1.5, 0x444444);
  canvas.text((left + right) / 2 - Canvas::text_width(panel.x_label, 1.5) / 2, bottom + 30, panel.x_label, 1.5,
              0x444444);

  double legend_y = top + 10;
  for (const auto& s : panel.series) {
    for (std::size_t i = 0; i + 1 < s.x.size() && i + 1 < s.y.size(); ++i) {
      canvas.line(px(s.x[i]), py(s.y[i]), px(s.x[i + 1]), py(s.y[i + 1]), s.color, 2.5, s.dashed);
    }
    for (std::size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      canvas.fill(px(s.x[i]) - 4, py(s.y[i]) - 4, px(s.x[i]) + 4, py(s.y[i]) + 4, s.color);
    }
    canvas.line(left + 14, legend_y + 5, left + 40, legend_y + 5, s.color, 2.5, s.dashed);
    canvas.text(left + 48, legend_y, s.name, 1.5);
    legend_y += 20;
  }
}

}  // namespace

void write_line_chart(const std::string& path, const std::string& title, const std::vector<PlotPanel>& panels) {
  const int width = kPanelWidth * static_cast<int>(std::max<std::size_t>(1, panels.size()));
  Canvas canvas(width, kHeight);
  canvas.text(12, 10, title, 2);
  for (std::size_t i = 0; i < panels.size(); ++i) draw_panel(canvas, static_cast<int>(i) * kPanelWidth, panels[i]);
  canvas.save(path);
}

}  // namespace flowline::cli
