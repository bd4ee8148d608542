// Fused cross-entropy on the CPU. Both directions work row by row in L1 from the logits: the forward
// takes the loss from the row's log-sum-exp,
//   loss = -(1 - eps) (x_t - lse) - eps / C (sum_c x_c - C lse)
// A row with a NaN or +inf logit gets a NaN loss and NaN gradients, as in the reference (oneDNN 2.6's
// softmax made numbers of them, so a loss scaler could not see them). The backward recomputes the
// row's softmax p and writes (p - w) g, in place where the caller passes the logits as the gradient.
// Rows are split across threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"
#include "softmax_rows.h"

namespace mantissa::detail {

namespace {

float row_loss(float x_t, float lse, float sum_x, float eps, std::int64_t c) {
  const auto cf = static_cast<float>(c);
  return eps == 0 ? -(x_t - lse) : -(1 - eps) * (x_t - lse) - eps / cf * (sum_x - cf * lse);
}

}  // namespace

void cpu_cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                       double smoothing, const Tensor& losses) {
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  const auto eps = static_cast<float>(smoothing);
#pragma omp parallel if (n > 1 && n * c >= (1 << 15))
  {
    std::vector<float> x(static_cast<std::size_t>(c)), p(static_cast<std::size_t>(c));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      load_row(logits, r, x.data());
      const float lse = softmax_row(x.data(), p.data(), c, c, 1.0f);
      const float loss = t == ignore_index ? 0.0f : row_loss(x[t], lse, sum_f32(x.data(), c), eps, c);
      store_f32(losses, r * losses.strides()[0], 1, 1, &loss);
    }
  }
}

void cpu_cross_entropy_backward(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                                double smoothing, const Tensor& grad_losses, const Tensor& grad_logits, const Tensor& losses) {
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  const auto uniform = static_cast<float>(smoothing / static_cast<double>(c));
  const auto keep = static_cast<float>(1 - smoothing);
#pragma omp parallel if (n > 1 && n * c >= (1 << 15))
  {
    std::vector<float> x(static_cast<std::size_t>(c)), g(static_cast<std::size_t>(c));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      float scale = 0;
      if (t != ignore_index) load_f32(grad_losses, r * grad_losses.strides()[0], 1, 1, &scale);
      load_row(logits, r, x.data());  // the whole row, before grad_logits (perhaps the same row) is written
      const float lse = softmax_row(x.data(), g.data(), c, c, 1.0f);
      if (losses.defined()) {  // as cpu_cross_entropy computes it
        const float loss = t == ignore_index ? 0.0f : row_loss(x[t], lse, sum_f32(x.data(), c), static_cast<float>(smoothing), c);
        store_f32(losses, r * losses.strides()[0], 1, 1, &loss);
      }
      const float p_t = t != ignore_index ? g[t] : 0.0f;
      for (std::int64_t j = 0; j < c; ++j) g[j] = (g[j] - uniform) * scale;
      if (t != ignore_index) g[t] = (p_t - uniform - keep) * scale;  // (p - w) g, w = 1 - eps + eps / C
      for (std::int64_t at = 0; at < c; at += kRowBlock) {
        store_f32(grad_logits, r * grad_logits.strides()[0] + at * grad_logits.strides()[1], grad_logits.strides()[1],
                  std::min(kRowBlock, c - at), g.data() + at);
      }
    }
  }
}

}  // namespace mantissa::detail
