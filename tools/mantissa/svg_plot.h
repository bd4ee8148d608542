// Small SVG charts, in files any browser opens: line charts (series of (x, y) points, a log-scale option
// for the y axis, a legend) for `mantissa compare`'s loss curves and loss-scale traces, and a histogram
// with shaded ranges and marked lines for `mantissa inspect`'s log2-magnitude picture.
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

struct Band {  // a shaded x range, labelled at its top
  double x0, x1;
  std::string color, label;
};
struct Mark {  // a vertical line, labelled
  double x;
  std::string color, label;
};
struct Histogram {
  std::string title, x_label, y_label;
  std::vector<std::pair<double, double>> bars;  // (left edge, height); each bar 1 wide
  std::vector<Band> bands;
  std::vector<Mark> marks;
  std::vector<std::string> notes;  // lines of text under the title
};
std::string svg_histogram(const Histogram& h, int width = 900, int height = 460);

}  // namespace mantissa::cli
