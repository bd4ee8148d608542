// Layer norm on the CPU, in f32 over rows, rows split across threads. Layer norm's
// parameter gradients are summed per thread and then across threads.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

void load_vector(const Tensor& t, std::vector<float>& v) {
  v.resize(static_cast<std::size_t>(t.size(0)));
  for (std::int64_t at = 0; at < t.size(0); at += kRowBlock) {
    load_f32(t, at * t.strides()[0], t.strides()[0], std::min(kRowBlock, t.size(0) - at), v.data() + at);
  }
}

}  // namespace

void cpu_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  std::vector<float> g, b;
  load_vector(gamma, g);
  load_vector(beta, b);
  float* mean_p = mean.data_as<float>();
  float* rstd_p = rstd.data_as<float>();
#pragma omp parallel if (rows > 1 && rows * cols >= (1 << 14))
  {
    std::vector<float> v(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load_row(x, r, v);
      const float mu = sum_f32(v.data(), cols) / static_cast<float>(cols);
      for (float& e : v) e -= mu;
      float var = 0;
      for (float e : v) var += e * e;
      const float rs = 1.0f / std::sqrt(var / static_cast<float>(cols) + static_cast<float>(eps));
      for (std::int64_t c = 0; c < cols; ++c) v[c] = v[c] * rs * g[c] + b[c];
      store_row(y, r, v);
      mean_p[r * mean.strides()[0]] = mu;
      rstd_p[r * rstd.strides()[0]] = rs;
    }
  }
}

void cpu_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                             const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                             const Tensor& grad_beta) {
  const std::int64_t rows = x.size(0);
  const std::int64_t cols = x.size(1);
  std::vector<float> g;
  load_vector(gamma, g);
  const int threads = omp_get_max_threads();
  std::vector<std::vector<float>> dg(static_cast<std::size_t>(threads), std::vector<float>(static_cast<std::size_t>(cols), 0.0f));
  std::vector<std::vector<float>> db(dg);
#pragma omp parallel num_threads(threads) if (rows > 1 && rows * cols >= (1 << 14))
  {
    std::vector<float> xv(static_cast<std::size_t>(cols));
    std::vector<float> gy(static_cast<std::size_t>(cols));
    std::vector<float>& my_dg = dg[static_cast<std::size_t>(omp_get_thread_num())];
    std::vector<float>& my_db = db[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load_row(x, r, xv);
      load_row(grad_y, r, gy);
      const float mu = mean.data_as<float>()[r * mean.strides()[0]];
      const float rs = rstd.data_as<float>()[r * rstd.strides()[0]];
      float mean_g = 0;
      float mean_gx = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const float xhat = (xv[c] - mu) * rs;
        const float gc = gy[c] * g[c];
        mean_g += gc;
        mean_gx += gc * xhat;
        my_dg[c] += gy[c] * xhat;
        my_db[c] += gy[c];
        xv[c] = xhat;
      }
      mean_g /= static_cast<float>(cols);
      mean_gx /= static_cast<float>(cols);
      for (std::int64_t c = 0; c < cols; ++c) gy[c] = rs * (gy[c] * g[c] - mean_g - xv[c] * mean_gx);
      store_row(grad_x, r, gy);
    }
  }
  for (std::size_t t = 1; t < dg.size(); ++t) {
    for (std::int64_t c = 0; c < cols; ++c) {
      dg[0][c] += dg[t][c];
      db[0][c] += db[t][c];
    }
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    grad_gamma.data_as<float>()[c * grad_gamma.strides()[0]] = dg[0][c];
    grad_beta.data_as<float>()[c * grad_beta.strides()[0]] = db[0][c];
  }
}

}  // namespace mantissa::detail
