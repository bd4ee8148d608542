// A small SVG line chart: series of (x, y) points, a log-scale option for the y axis, a legend. Enough
// for `mantissa compare`'s loss curves and loss-scale traces, in a file any browser opens.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mantissa::cli {

struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
};

struct Panel {
  std::string title, x_label, y_label;
  bool log_y = false;
  std::vector<Series> series;
};

// Panels stacked vertically, as one SVG document.
std::string svg_chart(const std::vector<Panel>& panels, int width = 900, int panel_height = 320);

}  // namespace mantissa::cli
