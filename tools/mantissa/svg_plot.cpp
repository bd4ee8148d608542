// SVG charts (see svg_plot.h): line charts with five ticks per axis, polylines and a legend per panel;
// histograms with shaded bands and marks.
#include "svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace mantissa::cli {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else out += ch;
  }
  return out;
}

std::string panel_svg(const Panel& p, int top, int width, int height) {
  constexpr int kLeft = 70, kRight = 160, kTop = 30, kBottom = 40;
  const int w = width - kLeft - kRight;
  const int h = height - kTop - kBottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  const auto ty = [&](double y) { return p.log_y ? std::log2(std::max(y, 1e-300)) : y; };
  for (const Series& s : p.series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y) || (p.log_y && y <= 0)) continue;
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
      y0 = std::min(y0, ty(y));
      y1 = std::max(y1, ty(y));
    }
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > y0)) {
    y0 -= 1;
    y1 += 1;
  }
  const auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * w; };
  const auto py = [&](double y) { return top + kTop + (1 - (ty(y) - y0) / (y1 - y0)) * h; };
  std::string out = fmt::format("<text x='{}' y='{}' font-size='15' font-weight='bold'>{}</text>\n", kLeft, top + 20, escape(p.title));
  out += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n", kLeft, top + kTop, w, h);
  for (int i = 0; i <= 4; ++i) {
    const double fx = x0 + (x1 - x0) * i / 4;
    const double fy = y0 + (y1 - y0) * i / 4;
    const double yv = p.log_y ? std::exp2(fy) : fy;
    out += fmt::format("<text x='{:.1f}' y='{}' font-size='11' text-anchor='middle'>{:g}</text>\n", px(fx), top + kTop + h + 15, std::round(fx));
    const double yp = top + kTop + (1 - (fy - y0) / (y1 - y0)) * h;
    out += fmt::format("<text x='{}' y='{:.1f}' font-size='11' text-anchor='end'>{:.4g}</text>\n", kLeft - 5, yp + 4, yv);
    out += fmt::format("<line x1='{}' x2='{}' y1='{:.1f}' y2='{:.1f}' stroke='#eee'/>\n", kLeft, kLeft + w, yp, yp);
  }
  out += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>{}</text>\n", kLeft + w / 2, top + height - 5, escape(p.x_label));
  out += fmt::format("<text x='15' y='{}' font-size='12' transform='rotate(-90 15 {})' text-anchor='middle'>{}</text>\n",
                     top + kTop + h / 2, top + kTop + h / 2, escape(p.y_label));
  int legend = 0;
  for (const Series& s : p.series) {
    std::string pts;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y) || (p.log_y && y <= 0)) continue;
      pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    }
    out += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5' points='{}'/>\n", s.color, pts);
    const int ly = top + kTop + 15 + 20 * legend++;
    out += fmt::format("<line x1='{}' x2='{}' y1='{}' y2='{}' stroke='{}' stroke-width='3'/>\n", kLeft + w + 15, kLeft + w + 40, ly, ly, s.color);
    out += fmt::format("<text x='{}' y='{}' font-size='12'>{}</text>\n", kLeft + w + 45, ly + 4, escape(s.name));
  }
  return out;
}

}  // namespace

std::string svg_chart(const std::vector<Panel>& panels, int width, int panel_height) {
  const int height = panel_height * static_cast<int>(panels.size());
  std::string out = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n",
      width, height);
  for (std::size_t i = 0; i < panels.size(); ++i) out += panel_svg(panels[i], static_cast<int>(i) * panel_height, width, panel_height);
  return out + "</svg>\n";
}

std::string svg_histogram(const Histogram& hist, int width, int height) {
  const int notes = static_cast<int>(hist.notes.size());
  const int kLeft = 70, kRight = 30, kTop = 40 + 16 * notes, kBottom = 45;
  const int w = width - kLeft - kRight;
  const int h = height - kTop - kBottom;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y1 = 0;
  for (const auto& [x, y] : hist.bars) {
    x0 = std::min(x0, x);
    x1 = std::max(x1, x + 1);
    y1 = std::max(y1, y);
  }
  for (const Mark& m : hist.marks) {
    x0 = std::min(x0, std::floor(m.x) - 1);
    x1 = std::max(x1, std::ceil(m.x) + 1);
  }
  // Every band edge within reach shows (a band may start far left, as "everything below").
  for (const Band& b : hist.bands) {
    for (const double e : {b.x0, b.x1}) {
      if (std::fabs(e) > 150) continue;
      x0 = std::min(x0, e - 1);
      x1 = std::max(x1, e + 1);
    }
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > 0)) y1 = 1;
  const auto px = [&](double x) { return kLeft + (std::clamp(x, x0, x1) - x0) / (x1 - x0) * w; };
  const auto py = [&](double y) { return kTop + (1 - y / y1) * h; };
  std::string out = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='20' font-size='15' font-weight='bold'>{}</text>\n",
      width, height, kLeft, escape(hist.title));
  for (int i = 0; i < notes; ++i) {
    out += fmt::format("<text x='{}' y='{}' font-size='12'>{}</text>\n", kLeft, 38 + 16 * i, escape(hist.notes[static_cast<std::size_t>(i)]));
  }
  for (const Band& b : hist.bands) {
    out += fmt::format("<rect x='{:.1f}' y='{}' width='{:.1f}' height='{}' fill='{}' opacity='0.35'/>\n", px(b.x0), kTop,
                       px(b.x1) - px(b.x0), h, b.color);
    out += fmt::format("<text x='{:.1f}' y='{}' font-size='11'>{}</text>\n", px(b.x0) + 3, kTop + 13, escape(b.label));
  }
  for (const auto& [x, y] : hist.bars) {
    out += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='#1f77b4'/>\n", px(x) + 0.5, py(y),
                       std::max(0.5, px(x + 1) - px(x) - 1), kTop + h - py(y));
  }
  for (const Mark& m : hist.marks) {
    out += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1}' y2='{2}' stroke='{3}' stroke-width='2' stroke-dasharray='5,3'/>\n",
                       px(m.x), kTop, kTop + h, m.color);
    out += fmt::format("<text x='{:.1f}' y='{}' font-size='11' fill='{}'>{}</text>\n", px(m.x) + 3, kTop + 28, m.color, escape(m.label));
  }
  out += fmt::format("<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#888'/>\n", kLeft, kTop, w, h);
  const int step = std::max(1, static_cast<int>(std::ceil((x1 - x0) / 16)));
  for (int x = static_cast<int>(std::ceil(x0 / step)) * step; x <= x1; x += step) {
    out += fmt::format("<text x='{:.1f}' y='{}' font-size='11' text-anchor='middle'>{}</text>\n", px(x), kTop + h + 15, x);
  }
  for (int i = 0; i <= 4; ++i) {
    const double y = y1 * i / 4;
    out += fmt::format("<text x='{}' y='{:.1f}' font-size='11' text-anchor='end'>{:.3g}</text>\n", kLeft - 5, py(y) + 4, y);
  }
  out += fmt::format("<text x='{}' y='{}' font-size='12' text-anchor='middle'>{}</text>\n", kLeft + w / 2, height - 8, escape(hist.x_label));
  out += fmt::format("<text x='15' y='{0}' font-size='12' transform='rotate(-90 15 {0})' text-anchor='middle'>{1}</text>\n",
                     kTop + h / 2, escape(hist.y_label));
  return out + "</svg>\n";
}

}  // namespace mantissa::cli
