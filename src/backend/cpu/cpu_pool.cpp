// Pooling on the CPU: f32 loops over (image, channel) planes, split across threads; the 2x2 max pooling
// (the CNN's) over spans of row pairs that cross planes, f32 or bf16 read in place, with AVX-512 where
// the CPU has it, or along the channels of channels-last data. Memory-bound work with little
// arithmetic: the kernels should stream at memory's speed.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "../../core/channels_last.h"
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

// yes ? x : y without a branch: GCC branches on a float select, and a mispredicted branch on the data
// made a window 4x slower.
inline float pick(bool yes, float x, float y) {
  const std::uint32_t mask = 0U - static_cast<std::uint32_t>(yes);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) & mask) | (std::bit_cast<std::uint32_t>(y) & ~mask));
}

// The larger of two values, NaN winning (b's first).
inline float max_nan(float a, float b) { return pick((b > a) | (b != b), b, a); }

// A 2x2 window's taps in reading order: a, b the top row's, c, d the bottom row's. Its maximum: each
// column's larger, then the larger of those (the later of two NaN: the AVX-512 kernel's order too).
inline float window_max_of(float a, float b, float c, float d) { return max_nan(max_nan(a, c), max_nan(b, d)); }

// Which tap gets the window's gradient (0-3 for a-d): the first NaN, else the first maximum, as the
// reference picks. Branch-free.
inline int gradient_tap(float a, float b, float c, float d) {
  const bool pick_b = (a == a) & ((b > a) | (b != b));
  const float ab = pick(pick_b, b, a);
  const bool pick_c = (ab == ab) & ((c > ab) | (c != c));
  const float abc = pick(pick_c, c, ab);
  const bool pick_d = (abc == abc) & ((d > abc) | (d != d));
  int k = static_cast<int>(pick_b);  // the last picked of b, c, d, else a
  k += (2 - k) * static_cast<int>(pick_c);
  k += (3 - k) * static_cast<int>(pick_d);
  return k;
}

// Each window's maximum, row pair by row pair (oh of them, laid out as in pool_avx512.h).
template <class X>  // f32, or bf16 read in place (planes.h)
void max_pool_2x2(const X* in, float* out, std::int64_t w, std::int64_t oh, std::int64_t ow) {
  for (std::int64_t y = 0; y < oh; ++y) {
    const X* r0 = in + 2 * y * w;
    const X* r1 = r0 + w;
    float* o = out + y * ow;
    for (std::int64_t x = 0; x < ow; ++x) {
      o[x] = window_max_of(f32_of(r0[2 * x]), f32_of(r0[2 * x + 1]), f32_of(r1[2 * x]), f32_of(r1[2 * x + 1]));
    }
  }
}

// Each input of the 2x2 windows gets its window's gradient if it is the window's first NaN, else its
// first maximum, and 0 otherwise: four plain stores a window instead of a scatter (gin[best] += g), and 0
// to an odd width's last column, which is in no window. oh row pairs, laid out as in max_pool_2x2.
// Scalar and branch-free (GCC's vectorized clones of this loop ran 5x slower on the CNN's short rows).
template <class X>  // f32, or bf16 read in place
void max_pool_2x2_backward(const X* in, const X* g, float* gin, std::int64_t w, std::int64_t oh, std::int64_t ow) {
  for (std::int64_t y = 0; y < oh; ++y) {
    const X* i0 = in + 2 * y * w;
    const X* i1 = i0 + w;
    float* g0 = gin + 2 * y * w;
    float* g1 = g0 + w;
    const X* gy = g + y * ow;
    for (std::int64_t x = 0; x < ow; ++x) {
      const int k = gradient_tap(f32_of(i0[2 * x]), f32_of(i0[2 * x + 1]), f32_of(i1[2 * x]), f32_of(i1[2 * x + 1]));
      const float v = f32_of(gy[x]);
      g0[2 * x] = pick(k == 0, v, 0.0f);
      g0[2 * x + 1] = pick(k == 1, v, 0.0f);
      g1[2 * x] = pick(k == 2, v, 0.0f);
      g1[2 * x + 1] = pick(k == 3, v, 0.0f);
    }
    if (w > 2 * ow) g0[w - 1] = g1[w - 1] = 0.0f;
  }
}

// The 2x2 pooling's row pairs in spans a thread takes whole. A span's input rows are contiguous (2 w
// values a pair) and so are its outputs (ow a pair): with h even the whole tensor is one run of row
// pairs (a plane's last pair is followed by the next plane's first); with h odd each plane is a run of
// its own, its last row in no window. A span holds about 4096 input values, so that its f32 buffers
// stay in L1/L2.
class PairSpans {
 public:
  struct Span {
    std::int64_t in, out, pairs;  // element offsets of its first input and output, its row pairs
  };
  PairSpans(std::int64_t planes, std::int64_t h, std::int64_t w, std::int64_t oh, std::int64_t ow)
      : h_(h), w_(w), oh_(oh), ow_(ow), run_pairs_(h % 2 == 0 ? planes * oh : oh),
        span_pairs_(std::max<std::int64_t>(1, 2048 / w)), spans_per_run_((run_pairs_ + span_pairs_ - 1) / span_pairs_),
        count_((h % 2 == 0 ? 1 : planes) * spans_per_run_) {}
  std::int64_t count() const { return count_; }
  std::int64_t most_pairs() const { return span_pairs_; }
  Span at(std::int64_t s) const {
    const std::int64_t run = s / spans_per_run_, first = s % spans_per_run_ * span_pairs_;
    return {run * h_ * w_ + first * 2 * w_, run * oh_ * ow_ + first * ow_, std::min(span_pairs_, run_pairs_ - first)};
  }

 private:
  std::int64_t h_, w_, oh_, ow_, run_pairs_, span_pairs_, spans_per_run_, count_;
};

void max_pool_2x2_spans(const Tensor& x, const Tensor& out) {
  const std::int64_t h = x.size(2), w = x.size(3), oh = out.size(2), ow = out.size(3);
  const PairSpans spans(x.size(0) * x.size(1), h, w, oh, ow);
  const bool avx512 = active_isa() >= Isa::avx512;
#pragma omp parallel if (spans.count() > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(2 * w * spans.most_pairs()));
    std::vector<float> o(static_cast<std::size_t>(ow * spans.most_pairs()));
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < spans.count(); ++s) {
      const PairSpans::Span sp = spans.at(s);
      float* op = out.dtype() == DType::f32 ? out.data_as<float>() + sp.out : o.data();
      with_span(x, sp.in, 2 * w * sp.pairs, in.data(), [&](const auto* ip) {
        if (avx512) {
          max_pool_2x2_avx512(ip, op, w, ow, sp.pairs);
        } else {
          max_pool_2x2(ip, op, w, sp.pairs, ow);
        }
      });
      if (out.dtype() != DType::f32) store_span(out, sp.out, ow * sp.pairs, op);
    }
  }
}

void max_pool_2x2_backward_spans(const Tensor& x, const Tensor& grad_out, const Tensor& grad_x) {
  const std::int64_t planes = x.size(0) * x.size(1);
  const std::int64_t h = x.size(2), w = x.size(3), oh = grad_out.size(2), ow = grad_out.size(3);
  const PairSpans spans(planes, h, w, oh, ow);
  const bool avx512 = active_isa() >= Isa::avx512;
  const bool bf16 = x.dtype() == DType::bf16 && grad_out.dtype() == DType::bf16;
#pragma omp parallel if (spans.count() > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(2 * w * spans.most_pairs()));
    std::vector<float> gin(in.size());
    std::vector<float> g(static_cast<std::size_t>(ow * spans.most_pairs()));
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < spans.count(); ++s) {
      const PairSpans::Span sp = spans.at(s);
      float* gi = grad_x.dtype() == DType::f32 ? grad_x.data_as<float>() + sp.in : gin.data();
      const auto run = [&](const auto* ip, const auto* gp) {
        if (avx512) {
          max_pool_2x2_backward_avx512(ip, gp, gi, w, ow, sp.pairs);
        } else {
          max_pool_2x2_backward(ip, gp, gi, w, sp.pairs, ow);
        }
      };
      if (bf16) {
        run(static_cast<const std::uint16_t*>(x.data()) + sp.in, static_cast<const std::uint16_t*>(grad_out.data()) + sp.out);
      } else {
        run(read_span(x, sp.in, 2 * w * sp.pairs, in.data()), read_span(grad_out, sp.out, ow * sp.pairs, g.data()));
      }
      if (grad_x.dtype() != DType::f32) store_span(grad_x, sp.in, 2 * w * sp.pairs, gi);
    }
  }
  if (h % 2 != 0) {  // each plane's last row is in no window
    const std::vector<float> zeros(static_cast<std::size_t>(w), 0.0f);
    for (std::int64_t plane = 0; plane < planes; ++plane) store_span(grad_x, (plane * h + h - 1) * w, w, zeros.data());
  }
}

// The 2x2 max pooling on channels-last data ([N, H, W, C] in memory, the convolution chain's): each
// window's four taps are rows of C values, so the loops run along the channels, with the planes' rules
// (window_max_of, gradient_tap); an output row (image n, window row y) at a time, split across threads.
// The loops over a window's channels are restrict-qualified: with f32 in and out GCC would not vectorize
// them otherwise (6x slower).
template <class X>
void window_max(const X* __restrict a, const X* __restrict b, const X* __restrict c, const X* __restrict d,
                float* __restrict out, std::int64_t channels) {
  for (std::int64_t ch = 0; ch < channels; ++ch) out[ch] = window_max_of(f32_of(a[ch]), f32_of(b[ch]), f32_of(c[ch]), f32_of(d[ch]));
}

template <class X>
void window_gradient(const X* __restrict pa, const X* __restrict pb, const X* __restrict pc, const X* __restrict pd,
                     const X* __restrict g, float* __restrict ga, float* __restrict gb, float* __restrict gc,
                     float* __restrict gd, std::int64_t channels) {
  for (std::int64_t ch = 0; ch < channels; ++ch) {
    const int k = gradient_tap(f32_of(pa[ch]), f32_of(pb[ch]), f32_of(pc[ch]), f32_of(pd[ch]));
    const float v = f32_of(g[ch]);
    ga[ch] = pick(k == 0, v, 0.0f);
    gb[ch] = pick(k == 1, v, 0.0f);
    gc[ch] = pick(k == 2, v, 0.0f);
    gd[ch] = pick(k == 3, v, 0.0f);
  }
}

void max_pool_2x2_channels_last(const Tensor& x, const Tensor& out) {
  const std::int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), oh = out.size(2), ow = out.size(3);
#pragma omp parallel if (n * oh > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(2 * w * c)), o(static_cast<std::size_t>(ow * c));
#pragma omp for schedule(static)
    for (std::int64_t row = 0; row < n * oh; ++row) {
      const std::int64_t image = row / oh, y = row % oh;
      float* op = out.dtype() == DType::f32 ? out.data_as<float>() + row * ow * c : o.data();
      with_span(x, (image * h + 2 * y) * w * c, 2 * w * c, in.data(), [&](const auto* r0) {
        const auto* r1 = r0 + w * c;
        for (std::int64_t j = 0; j < ow; ++j) {
          const auto* a = r0 + 2 * j * c;
          const auto* cc = r1 + 2 * j * c;
          window_max(a, a + c, cc, cc + c, op + j * c, c);
        }
      });
      if (out.dtype() != DType::f32) store_span(out, row * ow * c, ow * c, op);
    }
  }
}

void max_pool_2x2_backward_channels_last(const Tensor& x, const Tensor& grad_out, const Tensor& grad_x) {
  const std::int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), oh = grad_out.size(2), ow = grad_out.size(3);
  const bool bf16 = x.dtype() == DType::bf16 && grad_out.dtype() == DType::bf16;
#pragma omp parallel if (n * oh > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(2 * w * c)), g(static_cast<std::size_t>(ow * c)), gin(in.size());
#pragma omp for schedule(static)
    for (std::int64_t row = 0; row < n * oh; ++row) {
      const std::int64_t image = row / oh, y = row % oh, at = (image * h + 2 * y) * w * c;
      float* gi = grad_x.dtype() == DType::f32 ? grad_x.data_as<float>() + at : gin.data();
      const auto run = [&](const auto* r0, const auto* gy) {
        const auto* r1 = r0 + w * c;
        for (std::int64_t j = 0; j < ow; ++j) {
          const auto* pa = r0 + 2 * j * c;
          const auto* pc = r1 + 2 * j * c;
          float* ga = gi + 2 * j * c;
          float* gc = gi + w * c + 2 * j * c;
          window_gradient(pa, pa + c, pc, pc + c, gy + j * c, ga, ga + c, gc, gc + c, c);
        }
        if (w > 2 * ow) {  // an odd width's last column is in no window
          std::fill(gi + (w - 1) * c, gi + w * c, 0.0f);
          std::fill(gi + (2 * w - 1) * c, gi + 2 * w * c, 0.0f);
        }
      };
      if (bf16) {
        run(static_cast<const std::uint16_t*>(x.data()) + at, static_cast<const std::uint16_t*>(grad_out.data()) + row * ow * c);
      } else {
        run(read_span(x, at, 2 * w * c, in.data()), read_span(grad_out, row * ow * c, ow * c, g.data()));
      }
      if (grad_x.dtype() != DType::f32) store_span(grad_x, at, 2 * w * c, gi);
    }
  }
  if (h % 2 != 0) {  // each image's last row is in no window
    const std::vector<float> zeros(static_cast<std::size_t>(w * c), 0.0f);
    for (std::int64_t image = 0; image < n; ++image) store_span(grad_x, (image * h + h - 1) * w * c, w * c, zeros.data());
  }
}

// Whether pooling reads x as channels-last, and its output (and gradients) so too: the op gives such data
// for the 2x2 max pooling alone, all of it channels-last.
bool channels_last_data(const Tensor& x, const Tensor& out, const Tensor* grad_x = nullptr) {
  if (!is_channels_last(x) || x.is_contiguous()) return false;
  if (!is_channels_last(out) || (grad_x != nullptr && grad_x->strides() != x.strides())) {
    throw std::logic_error("pool2d: channels-last x with an output or gradient in another layout");
  }
  return true;
}

}  // namespace

void cpu_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) {
  const std::int64_t planes = x.size(0) * x.size(1);
  const std::int64_t h = x.size(2), w = x.size(3), oh = out.size(2), ow = out.size(3);
  if (is_max_2x2(p, h, w, oh, ow)) {
    if (channels_last_data(x, out)) return max_pool_2x2_channels_last(x, out);
    max_pool_2x2_spans(x, out);
    return;
  }
  const float window = static_cast<float>(p.kernel_h * p.kernel_w);
#pragma omp parallel if (planes > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> in(static_cast<std::size_t>(h * w));
    std::vector<float> o(static_cast<std::size_t>(oh * ow));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      float* op = write_plane(out, plane, oh * ow, o.data());
      const float* ip = read_plane(x, plane, h * w, in.data());
      std::fill(op, op + oh * ow, p.max ? -std::numeric_limits<float>::infinity() : 0.0f);
      for_each_tap(p, h, w, oh, ow, [&](std::int64_t oi, std::int64_t ii) {
        op[oi] = p.max ? (ip[ii] > op[oi] || std::isnan(ip[ii]) ? ip[ii] : op[oi]) : op[oi] + ip[ii];
      });
      if (!p.max) {
        for (std::int64_t oi = 0; oi < oh * ow; ++oi) op[oi] /= window;
      }
      finish_plane(out, plane, oh * ow, op);
    }
  }
}

void cpu_pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x) {
  const std::int64_t planes = x.size(0) * x.size(1);
  const std::int64_t h = x.size(2), w = x.size(3), oh = grad_out.size(2), ow = grad_out.size(3);
  if (is_max_2x2(p, h, w, oh, ow)) {
    if (channels_last_data(x, grad_out, &grad_x)) return max_pool_2x2_backward_channels_last(x, grad_out, grad_x);
    max_pool_2x2_backward_spans(x, grad_out, grad_x);
    return;
  }
  const float window = static_cast<float>(p.kernel_h * p.kernel_w);
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
      if (p.max) {
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
