// The allowed values of a real-valued setting, stated by what it means ("in (0, 10]", "a normal f32"),
// declared once per setting (mantissa/train/setting_ranges.h; the loss scaler's in mantissa/amp/loss_scaler.h)
// and checked by every door that takes it: the command's flags, the Python module's keywords, a
// checkpoint's fields.
#pragma once

#include <charconv>
#include <cmath>
#include <string>
#include <string_view>

namespace mantissa {

struct ValueRange {
  double lo, hi;          // the bounds, finite
  bool lo_open, hi_open;  // (lo, ...) rather than [lo, ...
  bool or_zero;           // 0 is also allowed (it switches the setting off)
  const char* meaning;    // "in (0, 10]", said to the user

  bool contains(double v) const {
    if (or_zero && v == 0) return true;
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  // "--lr must be in (0, 10], got 1e+300", empty where v is allowed.
  std::string problem(std::string_view name, double v) const {
    if (contains(v)) return {};
    char buf[40];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);  // the shortest text that reads back as v
    return std::string(name) + " must be " + meaning + ", got " + std::string(buf, r.ptr);
  }
};

}  // namespace mantissa
