// Fused cross-entropy on the CPU. The forward computes the softmax probabilities into an f32 buffer
// kept for backward, and each row's loss from its log-sum-exp:
//   loss = -(1 - eps) (x_t - lse) - eps / C (sum_c x_c - C lse)
// Where oneDNN computes the softmax (f32 and bf16 logits), lse comes from one class's probability,
// lse = x_j - log p_j, with j the target while p_t is a normal number (its log is then as exact as
// p_t), else the most likely class (p_m >= 1/C cannot underflow). Otherwise one pass per row in L1
// computes both. The backward is one elementwise pass, (p - w) g. Rows are split across threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"
#include "softmax_rows.h"

namespace mantissa::detail {

namespace {

// Row r of the logits, as f32, into x.
void load_row(const Tensor& logits, std::int64_t r, float* x) {
  const std::int64_t c = logits.size(1);
  for (std::int64_t at = 0; at < c; at += kRowBlock) {
    load_f32(logits, r * logits.strides()[0] + at * logits.strides()[1], logits.strides()[1],
             std::min(kRowBlock, c - at), x + at);
  }
}

float row_loss(float x_t, float lse, float sum_x, float eps, std::int64_t c) {
  const auto cf = static_cast<float>(c);
  return eps == 0 ? -(x_t - lse) : -(1 - eps) * (x_t - lse) - eps / cf * (sum_x - cf * lse);
}

// The losses from probabilities oneDNN computed.
void losses_from_probs(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                       float eps, const float* p, float* loss) {
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
#pragma omp parallel if (n > 1 && n * c >= (1 << 15))
  {
    std::vector<float> x(eps != 0 ? static_cast<std::size_t>(c) : 0);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      if (t == ignore_index) {
        loss[r] = 0;
        continue;
      }
      const float* pr = p + r * c;
      const std::int64_t j = pr[t] >= std::numeric_limits<float>::min() ? t : std::max_element(pr, pr + c) - pr;
      float x_j = 0, x_t = 0;
      load_f32(logits, r * logits.strides()[0] + j * logits.strides()[1], 1, 1, &x_j);
      load_f32(logits, r * logits.strides()[0] + t * logits.strides()[1], 1, 1, &x_t);
      float sum_x = 0;
      if (eps != 0) {
        load_row(logits, r, x.data());
        sum_x = sum_f32(x.data(), c);
      }
      loss[r] = row_loss(x_t, x_j - std::log(pr[j]), sum_x, eps, c);
    }
  }
}

}  // namespace

void cpu_cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                       double smoothing, const Tensor& probs, const Tensor& losses) {
  if (onednn_softmax(logits, probs, false)) {
    losses_from_probs(logits, targets, ignore_index, static_cast<float>(smoothing), probs.data_as<float>(),
                      losses.data_as<float>());
    return;
  }
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  const auto eps = static_cast<float>(smoothing);
  float* p = probs.data_as<float>();
  float* loss = losses.data_as<float>();
#pragma omp parallel if (n > 1 && n * c >= (1 << 15))
  {
    std::vector<float> x(static_cast<std::size_t>(c));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      load_row(logits, r, x.data());
      const float lse = softmax_row(x.data(), p + r * c, c, c, 1.0f);
      loss[r] = t == ignore_index ? 0.0f : row_loss(x[t], lse, sum_f32(x.data(), c), eps, c);
    }
  }
}

void cpu_cross_entropy_backward(const Tensor& probs, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                                double smoothing, const Tensor& grad_losses, const Tensor& grad_logits) {
  const std::int64_t n = probs.size(0);
  const std::int64_t c = probs.size(1);
  const auto uniform = static_cast<float>(smoothing / static_cast<double>(c));
  const auto keep = static_cast<float>(1 - smoothing);
  const float* p = probs.data_as<float>();
#pragma omp parallel if (n > 1 && n * c >= (1 << 15))
  {
    std::vector<float> g(static_cast<std::size_t>(c));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int64_t t = targets[static_cast<std::size_t>(r)];
      float scale = 0;
      if (t != ignore_index) load_f32(grad_losses, r * grad_losses.strides()[0], 1, 1, &scale);
      const float* pr = p + r * c;
      for (std::int64_t j = 0; j < c; ++j) g[j] = (pr[j] - uniform) * scale;
      if (t != ignore_index) g[t] -= keep * scale;
      for (std::int64_t at = 0; at < c; at += kRowBlock) {
        store_f32(grad_logits, r * grad_logits.strides()[0] + at * grad_logits.strides()[1], grad_logits.strides()[1],
                  std::min(kRowBlock, c - at), g.data() + at);
      }
    }
  }
}

}  // namespace mantissa::detail
