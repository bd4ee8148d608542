// Pooling on the CPU: f32 loops over (image, channel) planes, split across threads. Memory-bound work
// with little arithmetic, so plain loops that stream through memory run at its speed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
#include "planes.h"
#include "pool_avx512.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// For each output position of one plane, calls fn(out_index, in_index) for every in-bounds window tap.
template <class Fn>
void for_each_tap(const Pool2dParams& p, std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow, Fn&& fn) {
  for (std::int64_t y = 0; y < oh; ++y) {
    for (std::int64_t x = 0; x < ow; ++x) {
      for (std::int64_t kh = 0; kh < p.kernel_h; ++kh) {
        const std::int64_t iy = y * p.stride_h - p.pad_h + kh;
        if (iy < 0 || iy >= h) continue;
        for (std::int64_t kw = 0; kw < p.kernel_w; ++kw) {
          const std::int64_t ix = x * p.stride_w - p.pad_w + kw;
          if (ix < 0 || ix >= w) continue;
          fn(y * ow + x, iy * w + ix);
        }
      }
    }
  }
}

// 2x2 max pooling with stride 2 and no padding (the CNN's), in the taps' order of for_each_tap: a NaN
// wins, and the gradient goes to the first NaN, else to the first maximum.
bool is_max_2x2(const Pool2dParams& p, std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow) {
  return p.max && p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
         p.pad_w == 0 && oh == h / 2 && ow == w / 2;
}

// The larger of two values, NaN winning.
inline float max_nan(float a, float b) { return (b > a || b != b) ? b : a; }

// Plain loops GCC vectorizes (a stride-2 compare loop it does not): each row pair's elementwise maximum,
// then the maximum of every element with its right neighbour (twice the work needed, contiguous), of
// which the even positions are the windows'. max_nan is commutative up to which NaN, so the window's
// maximum does not depend on the order. `scratch` holds 4 ow floats.
template <class X>  // f32, or bf16 read in place (planes.h)
MANTISSA_VECTOR_CLONES void max_pool_2x2(const X* in, float* out, std::int64_t w, std::int64_t oh, std::int64_t ow,
                                         float* scratch) {
  float* rows = scratch;
  float* pairs = scratch + 2 * ow;
  for (std::int64_t y = 0; y < oh; ++y) {
    const X* r0 = in + 2 * y * w;
    const X* r1 = r0 + w;
    for (std::int64_t k = 0; k < 2 * ow; ++k) rows[k] = max_nan(f32_of(r0[k]), f32_of(r1[k]));
    for (std::int64_t k = 0; k + 1 < 2 * ow; ++k) pairs[k] = max_nan(rows[k], rows[k + 1]);
    float* o = out + y * ow;
    for (std::int64_t x = 0; x < ow; ++x) o[x] = pairs[2 * x];
  }
}

// Each input of the 2x2 windows gets its window's gradient if it is the window's first NaN, else its
// first maximum, and 0 otherwise: four plain stores a window instead of a scatter (gin[best] += g). The
// windows tile rows [0, 2 oh) x columns [0, 2 ow); the caller zeroes the rest.
MANTISSA_VECTOR_CLONES void max_pool_2x2_backward(const float* in, const float* g, float* gin, std::int64_t w,
                                                  std::int64_t oh, std::int64_t ow, std::int64_t first_window) {
  for (std::int64_t y = 0; y < oh; ++y) {
    const float* i0 = in + 2 * y * w;
    const float* i1 = i0 + w;
    float* g0 = gin + 2 * y * w;
    float* g1 = g0 + w;
    const float* gy = g + y * ow;
    for (std::int64_t x = first_window; x < ow; ++x) {
      const float a = i0[2 * x], b = i0[2 * x + 1], c = i1[2 * x], d = i1[2 * x + 1];
      // The first NaN, else the first maximum, in reading order (as the reference picks).
      const bool pick_b = a == a && (b > a || b != b);
      const float ab = pick_b ? b : a;
      const bool pick_c = ab == ab && (c > ab || c != c);
      const float abc = pick_c ? c : ab;
      const bool pick_d = abc == abc && (d > abc || d != d);
      const int k = pick_d ? 3 : (pick_c ? 2 : (pick_b ? 1 : 0));
      const float v = gy[x];
      g0[2 * x] = k == 0 ? v : 0.0f;
      g0[2 * x + 1] = k == 1 ? v : 0.0f;
      g1[2 * x] = k == 2 ? v : 0.0f;
      g1[2 * x + 1] = k == 3 ? v : 0.0f;
    }
  }
}

}  // namespace

void cpu_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) {
  const std::int64_t planes = x.size(0) * x.size(1);
  const std::int64_t h = x.size(2), w = x.size(3), oh = out.size(2), ow = out.size(3);
  const float window = static_cast<float>(p.kernel_h * p.kernel_w);
#pragma omp parallel if (planes > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(h * w));
    std::vector<float> o(static_cast<std::size_t>(oh * ow));
    std::vector<float> scratch(static_cast<std::size_t>(4 * ow));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      float* op = write_plane(out, plane, oh * ow, o.data());
      if (is_max_2x2(p, h, w, oh, ow)) {
        with_plane(x, plane, h * w, in.data(), [&](const auto* ip) { max_pool_2x2(ip, op, w, oh, ow, scratch.data()); });
      } else {
        const float* ip = read_plane(x, plane, h * w, in.data());
        std::fill(op, op + oh * ow, p.max ? -std::numeric_limits<float>::infinity() : 0.0f);
        for_each_tap(p, h, w, oh, ow, [&](std::int64_t oi, std::int64_t ii) {
          op[oi] = p.max ? (ip[ii] > op[oi] || std::isnan(ip[ii]) ? ip[ii] : op[oi]) : op[oi] + ip[ii];
        });
        if (!p.max) {
          for (std::int64_t oi = 0; oi < oh * ow; ++oi) op[oi] /= window;
        }
      }
      finish_plane(out, plane, oh * ow, op);
    }
  }
}

void cpu_pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x) {
  const std::int64_t planes = x.size(0) * x.size(1);
  const std::int64_t h = x.size(2), w = x.size(3), oh = grad_out.size(2), ow = grad_out.size(3);
  const float window = static_cast<float>(p.kernel_h * p.kernel_w);
  const bool avx512 = active_isa() >= Isa::avx512;
#pragma omp parallel if (planes > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(h * w));
    std::vector<float> gin(static_cast<std::size_t>(h * w));
    std::vector<float> g(static_cast<std::size_t>(oh * ow));
    std::vector<std::int64_t> best(static_cast<std::size_t>(oh * ow));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      const float* gp = read_plane(grad_out, plane, oh * ow, g.data());
      const float* ip = p.max ? read_plane(x, plane, h * w, in.data()) : nullptr;
      float* gi = write_plane(grad_x, plane, h * w, gin.data());
      std::fill(gi, gi + h * w, 0.0f);
      if (is_max_2x2(p, h, w, oh, ow)) {
        const std::int64_t vector_windows = avx512 ? ow / 8 * 8 : 0;
        if (vector_windows > 0) max_pool_2x2_backward_avx512(ip, gp, gi, w, oh, ow, vector_windows);
        max_pool_2x2_backward(ip, gp, gi, w, oh, ow, vector_windows);
      } else if (p.max) {
        // The first NaN, else the first maximum, of each window gets the gradient, as in the reference.
        std::fill(best.begin(), best.end(), -1);
        for_each_tap(p, h, w, oh, ow, [&](std::int64_t oi, std::int64_t ii) {
          const float b = best[oi] < 0 ? 0.0f : ip[best[oi]];
          if (best[oi] < 0 || (b == b && (ip[ii] > b || ip[ii] != ip[ii]))) best[oi] = ii;
        });
        for (std::int64_t oi = 0; oi < oh * ow; ++oi) {
          if (best[oi] >= 0) gi[best[oi]] += gp[oi];
        }
      } else {
        for_each_tap(p, h, w, oh, ow, [&](std::int64_t oi, std::int64_t ii) { gi[ii] += gp[oi] / window; });
      }
      finish_plane(grad_x, plane, h * w, gi);
    }
  }
}

}  // namespace mantissa::detail
