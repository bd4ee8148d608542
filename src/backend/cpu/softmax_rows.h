// One row of softmax (and its backward) over f32 values in L1, vectorized with libmvec's exp: shared by
// the softmax op and the fused cross-entropy, which spend most of their time here. (Attention has rows
// of its own, attention_rows.h.)
#pragma once

#include <cstdint>

namespace mantissa::detail {

// p[0, n) = softmax(scale * s[0, n)), p[n, len) = 0; returns log(sum_j exp(scale * s[j])), the
// log-sum-exp. n == 0 gives NaN (0 / 0) throughout, and returns NaN.
float softmax_row(const float* s, float* p, std::int64_t n, std::int64_t len, float scale);

// g[j] = scale * p[j] * (dp[j] - sum_k p[k] dp[k]) for j < n (only those are read), g[n, len) = 0.
void softmax_backward_row(const float* p, const float* dp, float* g, std::int64_t n, std::int64_t len, float scale);

// g[j] -= exp(y[j]) * sum_k g[k] over [0, n): the backward of log-softmax, y its output, in place.
void log_softmax_backward_row(const float* y, float* g, std::int64_t n);

}  // namespace mantissa::detail
