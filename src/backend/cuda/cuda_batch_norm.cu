// Batch norm in training mode on the GPU, x [N, C, S] contiguous: one block per channel, the statistics
// summed in f64 (the CPU's are too: a channel holds N x S values, 200k for a 256-image batch of 28x28,
// where f32 sums would lose digits), two passes for the variance, then the f32 normalization. The
// backward's two per-channel sums likewise, then dx = gamma rstd / m (m dy - sum dy - x-hat sum dy x-hat).
#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

struct Planes {
  std::int64_t n, c, s;
  __device__ std::int64_t at(std::int64_t i, std::int64_t ch, std::int64_t k) const { return (i * c + ch) * s + k; }
};

__global__ void batch_norm_kernel(Planes p, ElementType tx, const void* x, ElementType tg, const void* gamma, ElementType tb,
                                  const void* beta, double eps, ElementType ty, void* y, ElementType tm, void* mean,
                                  ElementType tr, void* rstd) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t ch = blockIdx.x, count = p.n * p.s;
  double sum = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += kThreads) sum += load(tx, x, p.at(j / p.s, ch, j % p.s));
  const double mu = block_sum(sum, scratch) / static_cast<double>(count);
  double var = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += kThreads) {
    const double d = load(tx, x, p.at(j / p.s, ch, j % p.s)) - mu;
    var += d * d;
  }
  const double rs = 1.0 / sqrt(block_sum(var, scratch) / static_cast<double>(count) + eps);
  const float muf = static_cast<float>(mu), rsf = static_cast<float>(rs);
  const float g = load(tg, gamma, ch), b = load(tb, beta, ch);
  for (std::int64_t j = threadIdx.x; j < count; j += kThreads) {
    const std::int64_t at = p.at(j / p.s, ch, j % p.s);
    // x - mean in f64: data far from zero keeps the mean's digits that one f32 would round away (the
    // CPU shifts by a data value for the same end).
    store(ty, y, at, static_cast<float>((static_cast<double>(load(tx, x, at)) - mu) * rs) * g + b);
  }
  if (threadIdx.x == 0) {
    store(tm, mean, ch, muf);
    store(tr, rstd, ch, rsf);
  }
}

__global__ void batch_norm_backward_kernel(Planes p, ElementType tx, const void* x, ElementType tg, const void* gamma,
                                           ElementType tm, const void* mean, ElementType tr, const void* rstd,
                                           ElementType tgy, const void* grad_y, ElementType tgx, void* grad_x,
                                           ElementType tgg, void* grad_gamma, ElementType tgb, void* grad_beta) {
  __shared__ double scratch[kThreads / 32];
  const std::int64_t ch = blockIdx.x, count = p.n * p.s;
  const float mu = load(tm, mean, ch), rs = load(tr, rstd, ch), g = load(tg, gamma, ch);
  double sum_dy = 0, sum_dy_xhat = 0;
  for (std::int64_t j = threadIdx.x; j < count; j += kThreads) {
    const std::int64_t at = p.at(j / p.s, ch, j % p.s);
    const float dy = load(tgy, grad_y, at);
    sum_dy += dy;
    sum_dy_xhat += static_cast<double>(dy) * ((load(tx, x, at) - mu) * rs);
  }
  sum_dy = block_sum(sum_dy, scratch);
  sum_dy_xhat = block_sum(sum_dy_xhat, scratch);
  const float m = static_cast<float>(count), sdy = static_cast<float>(sum_dy), sdx = static_cast<float>(sum_dy_xhat);
  const float k = g * rs / m;
  for (std::int64_t j = threadIdx.x; j < count; j += kThreads) {
    const std::int64_t at = p.at(j / p.s, ch, j % p.s);
    const float xhat = (load(tx, x, at) - mu) * rs;
    store(tgx, grad_x, at, k * (m * load(tgy, grad_y, at) - sdy - xhat * sdx));
  }
  if (threadIdx.x == 0) {
    store(tgg, grad_gamma, ch, sdx);
    store(tgb, grad_beta, ch, sdy);
  }
}

Planes planes_of(const Tensor& x, const char* what) {
  if (x.dim() != 3 || !x.is_contiguous()) throw std::invalid_argument(std::string(what) + ": x [N, C, S] contiguous expected");
  if (x.size(1) > 0x7fffffff) throw std::invalid_argument(std::string(what) + ": too many channels for one launch");
  return {x.size(0), x.size(1), x.size(2)};
}

void check_vectors(const char* what, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    refuse_f64(what, *t);
    if (!t->is_contiguous()) throw std::invalid_argument(std::string(what) + ": tensors must be contiguous");
  }
}

}  // namespace

void batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y, const Tensor& mean,
                const Tensor& rstd) {
  check_vectors("batch_norm", {&x, &gamma, &beta, &y, &mean, &rstd});
  const Planes p = planes_of(x, "batch_norm");
  if (p.c == 0) return;
  batch_norm_kernel<<<static_cast<unsigned>(p.c), kThreads, 0, stream()>>>(
      p, element_type(x.dtype()), x.data(), element_type(gamma.dtype()), gamma.data(), element_type(beta.dtype()),
      beta.data(), eps, element_type(y.dtype()), y.data(), element_type(mean.dtype()), mean.data(),
      element_type(rstd.dtype()), rstd.data());
  check_launch("batch_norm");
}

void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                         const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta) {
  check_vectors("batch_norm_backward", {&x, &gamma, &mean, &rstd, &grad_y, &grad_x, &grad_gamma, &grad_beta});
  const Planes p = planes_of(x, "batch_norm_backward");
  if (p.c == 0) return;
  batch_norm_backward_kernel<<<static_cast<unsigned>(p.c), kThreads, 0, stream()>>>(
      p, element_type(x.dtype()), x.data(), element_type(gamma.dtype()), gamma.data(), element_type(mean.dtype()),
      mean.data(), element_type(rstd.dtype()), rstd.data(), element_type(grad_y.dtype()), grad_y.data(),
      element_type(grad_x.dtype()), grad_x.data(), element_type(grad_gamma.dtype()), grad_gamma.data(),
      element_type(grad_beta.dtype()), grad_beta.data());
  check_launch("batch_norm_backward");
}

}  // namespace mantissa::detail::cuda
