// Batch norm on the CPU: f32 loops over (image, channel) planes, split across threads, per-channel
// statistics in f64; f32 and bf16 planes read in place, other dtypes through an f32 copy. Channels-last
// data ([N, C, S] with strides [S C, 1, C]: the convolution chain's) is walked as rows of C channels.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_kernels.h"
#include "planes.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// The per-channel loops of batch norm, vectorized (and compiled per ISA), over f32 or bf16 planes.
// Sums of (v - k) and (v - k)^2 in f64: one pass gives the mean and the variance, var = E[(v-k)^2] -
// E[v-k]^2, whose cancellation (growing with (mean - k)^2 / var) f64 absorbs for any shift k near the data.
template <class X>
MANTISSA_VECTOR_CLONES void shifted_sums(const X* v, std::int64_t n, float k, double& s1, double& s2) {
  double a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(f32_of(v[i])) - static_cast<double>(k);
    a += d;
    b += d * d;
  }
  s1 += a;
  s2 += b;
}

// out = ((v - k) - d) rs g + b: the mean as a shift k (a value of the data, so v - k is exact for v near
// it) plus a small d, which keeps the mean's digits that one f32 would round away (data at 1000 with a
// spread of 1 lost 4 of them). out may be v.
template <class X>
MANTISSA_VECTOR_CLONES void normalize(const X* v, float* out, std::int64_t n, float k, float d, float rs, float g, float b) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = ((f32_of(v[i]) - k) - d) * rs * g + b;
}

// sum(dy) and sum(dy x-hat), x-hat = (x - mu) rs.
template <class X, class D>
MANTISSA_VECTOR_CLONES void backward_sums(const X* x, const D* dy, std::int64_t n, float mu, float rs, float& sum_dy,
                                          float& sum_dy_xhat) {
  float a = 0, b = 0;
#pragma omp simd reduction(+ : a, b)
  for (std::int64_t k = 0; k < n; ++k) {
    const float g = f32_of(dy[k]);
    a += g;
    b += g * ((f32_of(x[k]) - mu) * rs);
  }
  sum_dy = a;
  sum_dy_xhat = b;
}

// dx = scale (m dy - sum_dy - x-hat sum_dy_xhat); dx may be dy.
template <class X, class D>
MANTISSA_VECTOR_CLONES void backward_apply(const X* x, const D* dy, float* dx, std::int64_t n, float mu, float rs, float scale,
                                           float m, float sum_dy, float sum_dy_xhat) {
  for (std::int64_t k = 0; k < n; ++k) dx[k] = scale * (m * f32_of(dy[k]) - sum_dy - ((f32_of(x[k]) - mu) * rs) * sum_dy_xhat);
}

}  // namespace

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
  // (per_plane takes the x plane's and, where there is one, the dy plane's values, each const float* or
  // const std::uint16_t* (bf16): with_plane.)
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
          const auto at = static_cast<std::size_t>(k * c + ch);
          double& a = sums[at];
          double& b = sums2 != nullptr ? (*sums2)[at] : sums[at];
          with_plane(x, i * c + ch, s, xv.data(), [&](const auto* xp) {
            if (dy == nullptr) {
              per_plane(xp, static_cast<const float*>(nullptr), ch, a, b);
            } else {
              with_plane(*dy, i * c + ch, s, gv.data(), [&](const auto* gp) { per_plane(xp, gp, ch, a, b); });
            }
          });
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

// Each channel's mean (as its shift plus the small offset d, see normalize) and rstd from its chunks'
// shifted sums and sums of squares (shifted_sums): the same for planes and rows of channels.
struct ChannelStats {
  std::vector<float> mu, rs, offset;
};
ChannelStats channel_statistics(const std::vector<double>& sums, const std::vector<double>& squares,
                                const std::vector<float>& shift, double count, double eps) {
  const auto c = static_cast<std::int64_t>(shift.size());
  const std::vector<double> t1 = channel_totals(sums, c), t2 = channel_totals(squares, c);
  ChannelStats st{std::vector<float>(shift.size()), std::vector<float>(shift.size()), std::vector<float>(shift.size())};
  for (std::size_t ch = 0; ch < shift.size(); ++ch) {
    const double d = t1[ch] / count;
    st.offset[ch] = static_cast<float>(d);
    st.mu[ch] = static_cast<float>(static_cast<double>(shift[ch]) + d);
    const double var = std::max(t2[ch] / count - d * d, 0.0);
    st.rs[ch] = static_cast<float>(1.0 / std::sqrt(var + eps));
  }
  return st;
}

// grad_gamma = sum(dy x-hat) and grad_beta = sum(dy) of each channel, from their f64 totals.
void write_parameter_gradients(const std::vector<double>& dy_xhat, const std::vector<double>& dy, const Tensor& grad_gamma,
                               const Tensor& grad_beta) {
  for (std::size_t ch = 0; ch < dy.size(); ++ch) {
    grad_gamma.data_as<float>()[ch] = static_cast<float>(dy_xhat[ch]);
    grad_beta.data_as<float>()[ch] = static_cast<float>(dy[ch]);
  }
}

// Channels-last: x [N, C, S] stored [N, S, C], every channel's values C apart. The same statistics and
// formulas as the planes' loops, per channel across a row of C: sums in f64 per chunk of images (f32
// within an image in the backward, as within a plane there), the chunks added in order.
bool rows_of_channels(const Tensor& x) {
  return x.size(1) > 1 && x.strides()[1] == 1 && x.strides()[2] == x.size(1) && x.strides()[0] == x.size(1) * x.size(2);
}

// fn(x image, dy image or null) for image i: its S rows of C values, f32 or bf16 read in place (f16
// converted into xs / gs, an image's worth).
template <class Fn>
void with_image(const Tensor& x, const Tensor* dy, std::int64_t i, std::vector<float>& xs, std::vector<float>& gs, Fn&& fn) {
  const std::int64_t size = x.size(1) * x.size(2);
  with_span(x, i * size, size, xs.data(), [&](const auto* xp) {
    if (dy == nullptr) {
      fn(xp, static_cast<const float*>(nullptr));
    } else {
      with_span(*dy, i * size, size, gs.data(), [&](const auto* gp) { fn(xp, gp); });
    }
  });
}

// An image's shifted sums of each channel, added into a and b (f64).
template <class X>
MANTISSA_VECTOR_CLONES void image_sums(const X* v, std::int64_t s, std::int64_t c, const float* shift, double* a, double* b) {
  for (std::int64_t p = 0; p < s; ++p) {
    const X* row = v + p * c;
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const double d = static_cast<double>(f32_of(row[ch])) - static_cast<double>(shift[ch]);
      a[ch] += d;
      b[ch] += d * d;
    }
  }
}

template <class X>
MANTISSA_VECTOR_CLONES void image_normalize(const X* v, float* out, std::int64_t s, std::int64_t c, const float* shift,
                                            const float* offset, const float* rs, const float* g, const float* b) {
  for (std::int64_t p = 0; p < s; ++p) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      out[p * c + ch] = ((f32_of(v[p * c + ch]) - shift[ch]) - offset[ch]) * rs[ch] * g[ch] + b[ch];
    }
  }
}

// An image's sum(dy) and sum(dy x-hat) of each channel in f32 (as a plane's), into a and b.
template <class X, class D>
MANTISSA_VECTOR_CLONES void image_backward_sums(const X* x, const D* dy, std::int64_t s, std::int64_t c, const float* mu,
                                                const float* rs, float* a, float* b) {
  for (std::int64_t p = 0; p < s; ++p) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const float g = f32_of(dy[p * c + ch]);
      a[ch] += g;
      b[ch] += g * ((f32_of(x[p * c + ch]) - mu[ch]) * rs[ch]);
    }
  }
}

template <class X, class D>
MANTISSA_VECTOR_CLONES void image_backward_apply(const X* x, const D* dy, float* dx, std::int64_t s, std::int64_t c,
                                                 const float* mu, const float* rs, const float* scale, float m,
                                                 const float* sum_dy, const float* sum_dy_xhat) {
  for (std::int64_t p = 0; p < s; ++p) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const std::int64_t k = p * c + ch;
      dx[k] = scale[ch] * (m * f32_of(dy[k]) - sum_dy[ch] - ((f32_of(x[k]) - mu[ch]) * rs[ch]) * sum_dy_xhat[ch]);
    }
  }
}

void batch_norm_rows(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                     const Tensor& mean, const Tensor& rstd) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const auto uc = static_cast<std::size_t>(c), image = static_cast<std::size_t>(c * s);
  const double count = static_cast<double>(n * s);
  std::vector<float> shift(uc);
  load_f32(x, 0, 1, c, shift.data());  // each channel's first value (see shifted_sums)
  const std::int64_t chunks = (n + kImagesPerChunk - 1) / kImagesPerChunk;
  std::vector<double> sums(static_cast<std::size_t>(chunks) * uc, 0.0), squares(sums.size(), 0.0);
  const bool converted = x.dtype() != DType::f32 && x.dtype() != DType::bf16;
#pragma omp parallel if (chunks > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xs(converted ? image : 0), gs;
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < chunks; ++k) {
      for (std::int64_t i = k * kImagesPerChunk; i < std::min(n, (k + 1) * kImagesPerChunk); ++i) {
        with_image(x, nullptr, i, xs, gs, [&](const auto* v, const auto*) {
          image_sums(v, s, c, shift.data(), sums.data() + k * c, squares.data() + k * c);
        });
      }
    }
  }
  const ChannelStats st = channel_statistics(sums, squares, shift, count, eps);
  const std::vector<float>&mu = st.mu, &rs = st.rs, &offset = st.offset;
  const std::vector<float> g = channel_values(gamma, c), b = channel_values(beta, c);
#pragma omp parallel if (n > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xs(converted ? image : 0), gs, out(y.dtype() != DType::f32 ? image : 0);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      float* o = y.dtype() == DType::f32 ? y.data_as<float>() + i * c * s : out.data();
      with_image(x, nullptr, i, xs, gs, [&](const auto* v, const auto*) {
        image_normalize(v, o, s, c, shift.data(), offset.data(), rs.data(), g.data(), b.data());
      });
      if (y.dtype() != DType::f32) store_span(y, i * c * s, c * s, o);
    }
  }
  std::copy(mu.begin(), mu.end(), mean.data_as<float>());
  std::copy(rs.begin(), rs.end(), rstd.data_as<float>());
}

void batch_norm_backward_rows(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                              const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                              const Tensor& grad_beta) {
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const auto uc = static_cast<std::size_t>(c), image = static_cast<std::size_t>(c * s);
  const float m = static_cast<float>(n * s);
  const float* mu = mean.data_as<float>();
  const float* rs = rstd.data_as<float>();
  const std::int64_t chunks = (n + kImagesPerChunk - 1) / kImagesPerChunk;
  std::vector<double> dy_sums(static_cast<std::size_t>(chunks) * uc, 0.0), dy_xhat_sums(dy_sums.size(), 0.0);
  const bool converted = !((x.dtype() == DType::f32 || x.dtype() == DType::bf16) &&
                           (grad_y.dtype() == DType::f32 || grad_y.dtype() == DType::bf16));
#pragma omp parallel if (chunks > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xs(converted ? image : 0), gs(converted ? image : 0), a(uc), b(uc);
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < chunks; ++k) {
      for (std::int64_t i = k * kImagesPerChunk; i < std::min(n, (k + 1) * kImagesPerChunk); ++i) {
        std::fill(a.begin(), a.end(), 0.0f);
        std::fill(b.begin(), b.end(), 0.0f);
        with_image(x, &grad_y, i, xs, gs, [&](const auto* xv, const auto* gv) {
          image_backward_sums(xv, gv, s, c, mu, rs, a.data(), b.data());
        });
        for (std::size_t ch = 0; ch < uc; ++ch) {
          dy_sums[static_cast<std::size_t>(k) * uc + ch] += a[ch];
          dy_xhat_sums[static_cast<std::size_t>(k) * uc + ch] += b[ch];
        }
      }
    }
  }
  const std::vector<double> t_dy = channel_totals(dy_sums, c), t_dy_xhat = channel_totals(dy_xhat_sums, c);
  const std::vector<float> g = channel_values(gamma, c);
  std::vector<float> scale(uc), sum_dy(uc), sum_dy_xhat(uc);
  for (std::size_t ch = 0; ch < uc; ++ch) {
    scale[ch] = g[ch] * rs[ch] / m;
    sum_dy[ch] = static_cast<float>(t_dy[ch]);
    sum_dy_xhat[ch] = static_cast<float>(t_dy_xhat[ch]);
  }
#pragma omp parallel if (n > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xs(converted ? image : 0), gs(converted ? image : 0), out(grad_x.dtype() != DType::f32 ? image : 0);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      // grad_x may be grad_y: an image is read whole (into registers, row by row) before it is written.
      float* o = grad_x.dtype() == DType::f32 ? grad_x.data_as<float>() + i * c * s : out.data();
      with_image(x, &grad_y, i, xs, gs, [&](const auto* xv, const auto* gv) {
        image_backward_apply(xv, gv, o, s, c, mu, rs, scale.data(), m, sum_dy.data(), sum_dy_xhat.data());
      });
      if (grad_x.dtype() != DType::f32) store_span(grad_x, i * c * s, c * s, o);
    }
  }
  write_parameter_gradients(t_dy_xhat, t_dy, grad_gamma, grad_beta);
}

}  // namespace

void cpu_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
  if (rows_of_channels(x)) return batch_norm_rows(x, gamma, beta, eps, y, mean, rstd);
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const double count = static_cast<double>(n * s);
  // One pass for both statistics, shifted by each channel's first value (see shifted_sums).
  std::vector<float> shift(static_cast<std::size_t>(c));
  for (std::int64_t ch = 0; ch < c; ++ch) load_f32(x, ch * s, 1, 1, &shift[static_cast<std::size_t>(ch)]);
  std::vector<double> sums, squares;
  chunk_sums(x, nullptr, sums, &squares, [&](const auto* v, const auto*, std::int64_t ch, double& a, double& b) {
    shifted_sums(v, s, shift[static_cast<std::size_t>(ch)], a, b);
  });
  const ChannelStats st = channel_statistics(sums, squares, shift, count, eps);
  const std::vector<float>&mu = st.mu, &rs = st.rs, &offset = st.offset;
  const std::vector<float> g = channel_values(gamma, c), b = channel_values(beta, c);
#pragma omp parallel if (n * c > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> v(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < n * c; ++plane) {
      const auto ch = static_cast<std::size_t>(plane % c);
      float* out = write_plane(y, plane, s, v.data());
      if (x.dtype() == DType::f32 || x.dtype() == DType::bf16) {
        with_plane(x, plane, s, nullptr, [&](const auto* in) { normalize(in, out, s, shift[ch], offset[ch], rs[ch], g[ch], b[ch]); });
      } else {
        load_plane(x, plane, s, out);
        normalize(static_cast<const float*>(out), out, s, shift[ch], offset[ch], rs[ch], g[ch], b[ch]);
      }
      finish_plane(y, plane, s, out);
    }
  }
  std::copy(mu.begin(), mu.end(), mean.data_as<float>());
  std::copy(rs.begin(), rs.end(), rstd.data_as<float>());
}

void cpu_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                             const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                             const Tensor& grad_beta) {
  if (rows_of_channels(x)) return batch_norm_backward_rows(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
  const std::int64_t n = x.size(0), c = x.size(1), s = x.size(2);
  const float m = static_cast<float>(n * s);
  const float* mu = mean.data_as<float>();
  const float* rs = rstd.data_as<float>();
  std::vector<double> dy_sums, dy_xhat_sums;
  chunk_sums(x, &grad_y, dy_sums, &dy_xhat_sums,
             [&](const auto* xv, const auto* gv, std::int64_t ch, double& a, double& b) {
               float sum_dy = 0, sum_dy_xhat = 0;
               backward_sums(xv, gv, s, mu[ch], rs[ch], sum_dy, sum_dy_xhat);
               a += sum_dy;
               b += sum_dy_xhat;
             });
  const std::vector<double> t_dy = channel_totals(dy_sums, c), t_dy_xhat = channel_totals(dy_xhat_sums, c);
  const std::vector<float> g = channel_values(gamma, c);
#pragma omp parallel if (n * c > 1 && x.numel() >= (1 << 15))
  {
    std::vector<float> xv(static_cast<std::size_t>(s)), gv(static_cast<std::size_t>(s)), ov(static_cast<std::size_t>(s));
#pragma omp for schedule(static)
    for (std::int64_t plane = 0; plane < n * c; ++plane) {
      const std::int64_t ch = plane % c;
      const auto u = static_cast<std::size_t>(ch);
      float* out = write_plane(grad_x, plane, s, ov.data());  // grad_x may be grad_y: each value is read before it is written
      with_plane(x, plane, s, xv.data(), [&](const auto* xp) {
        with_plane(grad_y, plane, s, gv.data(), [&](const auto* gp) {
          backward_apply(xp, gp, out, s, mu[ch], rs[ch], g[u] * rs[ch] / m, m, static_cast<float>(t_dy[u]),
                         static_cast<float>(t_dy_xhat[u]));
        });
      });
      finish_plane(grad_x, plane, s, out);
    }
  }
  write_parameter_gradients(t_dy_xhat, t_dy, grad_gamma, grad_beta);
}

}  // namespace mantissa::detail
