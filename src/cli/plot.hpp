// plot.hpp — small line charts written as PNG, for `flowline profile`.
//
// Panels sit side by side; each has its own axes (linear, starting at zero on y) and lines with point
// markers. Text uses stb_easy_font and the PNG is encoded by stb_image_write (both from Debian's
// libstb-dev, header-only). Single-threaded; call from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flowline::cli {

struct PlotSeries {
  std::string name;
  std::vector<double> x, y;        // equal lengths; points are joined in the order given
  std::uint32_t color = 0x1f77b4;  // 0xRRGGBB
  bool dashed = false;
};

struct PlotPanel {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
};

// Writes the panels into one PNG. Throws flowline::Error when the file cannot be written.
void write_line_chart(const std::string& path, const std::string& title, const std::vector<PlotPanel>& panels);

}  // namespace flowline::cli
