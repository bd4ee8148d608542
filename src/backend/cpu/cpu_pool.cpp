// Pooling and batch norm on the CPU: f32 loops over (image, channel) planes, split across threads.
// Memory-bound work with little arithmetic, so plain loops that stream through memory run at its speed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
#include "pool_avx512.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

void load_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* out) {
  for (std::int64_t at = 0; at < size; at += kRowBlock) {
    load_f32(t, plane * size + at, 1, std::min(kRowBlock, size - at), out + at);
  }
}

void store_plane(const Tensor& t, std::int64_t plane, std::int64_t size, const float* in) {
  for (std::int64_t at = 0; at < size; at += kRowBlock) {
    store_f32(t, plane * size + at, 1, std::min(kRowBlock, size - at), in + at);
  }
}

// Plane `plane` of a contiguous tensor as f32 to read: the tensor's own memory when it is f32, else
// converted into scratch.
const float* read_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch) {
  if (t.dtype() == DType::f32) return t.data_as<float>() + plane * size;
  load_plane(t, plane, size, scratch);
  return scratch;
}

// Where to compute plane `plane` of a contiguous output: its own memory when f32 (then finish_plane
// does nothing), else scratch, which finish_plane rounds into it.
float* write_plane(const Tensor& t, std::int64_t plane, std::int64_t size, float* scratch) {
  return t.dtype() == DType::f32 ? t.data_as<float>() + plane * size : scratch;
}

void finish_plane(const Tensor& t, std::int64_t plane, std::int64_t size, const float* computed) {
  if (t.dtype() != DType::f32) store_plane(t, plane, size, computed);
}

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

// The per-channel loops of batch norm, vectorized (and compiled per ISA).
// Sums of (v - k) and (v - k)^2 in f64: one pass gives the mean and the variance, var = E[(v-k)^2] -
// E[v-k]^2, whose cancellation (growing with (mean - k)^2 / var) f64 absorbs for any shift k near the data.
MANTISSA_VECTOR_CLONES void shifted_sums(const float* v, std::int64_t n, float k, double& s1, double& s2) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(v[i]) - static_cast<double>(k);
    a += d;
    b += d * d;
  }
  s1 += a;
  s2 += b;
}

// out = ((v - k) - d) rs g + b: the mean as a shift k (a value of the data, so v - k is exact for v near
// it) plus a small d, which keeps the mean's digits that one f32 would round away (data at 1000 with a
// spread of 1 lost 4 of them). out may be v.
MANTISSA_VECTOR_CLONES void normalize(const float* v, float* out, std::int64_t n, float k, float d, float rs, float g,
                                      float b) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = ((v[i] - k) - d) * rs * g + b;
}

// sum(dy) and sum(dy x-hat), x-hat = (x - mu) rs.
MANTISSA_VECTOR_CLONES void backward_sums(const float* x, const float* dy, std::int64_t n, float mu, float rs,
                                          float& sum_dy, float& sum_dy_xhat) {
  float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (std::int64_t k = 0; k < n; ++k) {
    a += dy[k];
    b += dy[k] * ((x[k] - mu) * rs);
  }
  sum_dy = a;
  sum_dy_xhat = b;
}

// dx = scale (m dy - sum_dy - x-hat sum_dy_xhat); dx may be dy.
MANTISSA_VECTOR_CLONES void backward_apply(const float* x, const float* dy, float* dx, std::int64_t n, float mu,
                                           float rs, float scale, float m, float sum_dy, float sum_dy_xhat) {
  for (std::int64_t k = 0; k < n; ++k) dx[k] = scale * (m * dy[k] - sum_dy - ((x[k] - mu) * rs) * sum_dy_xhat);
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
MANTISSA_VECTOR_CLONES void max_pool_2x2(const float* in, float* out, std::int64_t w, std::int64_t oh, std::int64_t ow,
                                         float* scratch) {
  float* rows = scratch;
  float* pairs = scratch + 2 * ow;
  for (std::int64_t y = 0; y < oh; ++y) {
    const float* r0 = in + 2 * y * w;
    const float* r1 = r0 + w;
    for (std::int64_t k = 0; k < 2 * ow; ++k) rows[k] = max_nan(r0[k], r1[k]);
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
      const float* ip = read_plane(x, plane, h * w, in.data());
      float* op = write_plane(out, plane, oh * ow, o.data());
      if (is_max_2x2(p, h, w, oh, ow)) {
        max_pool_2x2(ip, op, w, oh, ow, scratch.data());
      } else {
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

namespace {

// Batch norm walks [N, C, S] in memory order, plane by plane ((image, channel) planes of S values are
// contiguous), instead of gathering each channel's N planes from C * S apart: the passes then stream
// through memory, about 3x faster a byte here. Per-channel sums are f32 within a plane and f64 across
// planes, kept per chunk of images and added in chunk order, so that no result depends on the thread
// count.
constexpr std::int64_t kImagesPerChunk = 8;

// per_plane(x plane, dy plane, ch, sums[k * c + ch], sums2[k * c + ch]) over the images of chunk k, chunks
// split across threads; the planes are f32, read in place or converted.
template <class PerPlane>
void chunk_sums(const Tensor& x, const Tensor* dy, std::vector<double>& sums, std::vector<double>* sums2,
                PerPlane&& per_plane) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const std::int64_t chunks = (n + kImagesPerChunk - 1) / kImagesPerChunk;
  sums.assign(static_cast<std::size_t>(chunks * c), 0.0);
  if (sums2 != nullptr) sums2->assign(sums.size(), 0.0);
#pragma omp parallel if (chunks > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xv(static_cast<std::size_t>(s)), gv(dy != nullptr ? static_cast<std::size_t>(s) : 0);
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < chunks; ++k) {
      for (std::int64_t i = k * kImagesPerChunk; i < std::min(n, (k + 1) * kImagesPerChunk); ++i) {
        for (std::int64_t ch = 0; ch < c; ++ch) {
          const float* xp = read_plane(x, i * c + ch, s, xv.data());
          const float* gp = dy != nullptr ? read_plane(*dy, i * c + ch, s, gv.data()) : nullptr;
          const auto at = static_cast<std::size_t>(k * c + ch);
          per_plane(xp, gp, ch, sums[at], sums2 != nullptr ? (*sums2)[at] : sums[at]);
        }
      }
    }
  }
}

// The chunks' partial sums of each channel, added in chunk order.
std::vector<double> channel_totals(const std::vector<double>& sums, std::int64_t c) {
  std::vector<double> t(static_cast<std::size_t>(c), 0.0);
  for (std::size_t k = 0; k < sums.size(); ++k) t[k % static_cast<std::size_t>(c)] += sums[k];
  return t;
}

std::vector<float> channel_values(const Tensor& t, std::int64_t c) {
  std::vector<float> v(static_cast<std::size_t>(c));
  load_f32(t, 0, 1, c, v.data());
  return v;
}

}  // namespace

void cpu_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const double count = static_cast<double>(n * s);
  // One pass for both statistics, shifted by each channel's first value (see shifted_sums).
  std::vector<float> shift(static_cast<std::size_t>(c));
  for (std::int64_t ch = 0; ch < c; ++ch) load_f32(x, ch * s, 1, 1, &shift[static_cast<std::size_t>(ch)]);
  std::vector<double> sums, squares;
  chunk_sums(x, nullptr, sums, &squares, [&](const float* v, const float*, std::int64_t ch, double& a, double& b) {
    shifted_sums(v, s, shift[static_cast<std::size_t>(ch)], a, b);
  });
  const std::vector<double> t1 = channel_totals(sums, c), t2 = channel_totals(squares, c);
  std::vector<float> mu(static_cast<std::size_t>(c)), rs(static_cast<std::size_t>(c)), offset(mu.size());
  for (std::size_t ch = 0; ch < mu.size(); ++ch) {
    const double d = t1[ch] / count;
    offset[ch] = static_cast<float>(d);
    mu[ch] = static_cast<float>(static_cast<double>(shift[ch]) + d);
    const double var = std::max(t2[ch] / count - d * d, 0.0);
    rs[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
  }
  const std::vector<float> g = channel_values(gamma, c), b = channel_values(beta, c);
#pragma omp parallel if (n * c > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> v(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < n * c; ++plane) {
      const auto ch = static_cast<std::size_t>(plane % c);
      float* out = write_plane(y, plane, s, v.data());
      const float* in = x.dtype() == DType::f32 ? x.data_as<float>() + plane * s : out;
      if (in == out) load_plane(x, plane, s, out);
      normalize(in, out, s, shift[ch], offset[ch], rs[ch], g[ch], b[ch]);
      finish_plane(y, plane, s, out);
    }
  }
  std::copy(mu.begin(), mu.end(), mean.data_as<float>());
  std::copy(rs.begin(), rs.end(), rstd.data_as<float>());
}

void cpu_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                             const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                             const Tensor& grad_beta) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const float m = static_cast<float>(n * s);
  const float* mu = mean.data_as<float>();
  const float* rs = rstd.data_as<float>();
  std::vector<double> dy_sums, dy_xhat_sums;
  chunk_sums(x, &grad_y, dy_sums, &dy_xhat_sums,
             [&](const float* xv, const float* gv, std::int64_t ch, double& a, double& b) {
               float sum_dy = 0, sum_dy_xhat = 0;
               backward_sums(xv, gv, s, mu[ch], rs[ch], sum_dy, sum_dy_xhat);
               a += sum_dy;
               b += sum_dy_xhat;
             });
  const std::vector<double> t_dy = channel_totals(dy_sums, c), t_dy_xhat = channel_totals(dy_xhat_sums, c);
  const std::vector<float> g = channel_values(gamma, c);
#pragma omp parallel if (n * c > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xv(static_cast<std::size_t>(s)), gv(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < n * c; ++plane) {
      const std::int64_t ch = plane % c;
      const auto u = static_cast<std::size_t>(ch);
      const float* xp = read_plane(x, plane, s, xv.data());
      const float* gp = read_plane(grad_y, plane, s, gv.data());
      float* out = write_plane(grad_x, plane, s, gv.data());  // gv may be both: dx may be dy
      backward_apply(xp, gp, out, s, mu[ch], rs[ch], g[u] * rs[ch] / m, m, static_cast<float>(t_dy[u]),
                     static_cast<float>(t_dy_xhat[u]));
      finish_plane(grad_x, plane, s, out);
    }
  }
  for (std::int64_t ch = 0; ch < c; ++ch) {
    grad_gamma.data_as<float>()[ch] = static_cast<float>(t_dy_xhat[static_cast<std::size_t>(ch)]);
    grad_beta.data_as<float>()[ch] = static_cast<float>(t_dy[static_cast<std::size_t>(ch)]);
  }
}

}  // namespace mantissa::detail
