// Softmax rows, compiled per ISA (MANTISSA_VECTOR_CLONES) with libmvec's vector exp: one exponential
// per element, and a max, a sum and a scaling pass that stay in L1.
#include "softmax_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "rows.h"

extern "C" {
#pragma omp declare simd notinbranch
float expf(float);  // libmvec's vector exp, see cpu_elementwise.cpp
}

namespace mantissa::detail {

MANTISSA_VECTOR_CLONES float softmax_row(const float* s, float* p, std::int64_t n, std::int64_t len, float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  // A NaN lost by the vector max still makes every output NaN, through exp(NaN - mx).
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, scale * s[j]);
  float total = 0;
#pragma omp simd reduction(+ : total)
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] = std::exp(scale * s[j] - mx);
    total += p[j];
  }
  const float inv = n > 0 ? 1.0f / total : std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t j = 0; j < n; ++j) p[j] *= inv;
  for (std::int64_t j = n; j < len; ++j) p[j] = n > 0 ? 0.0f : inv;
  return n > 0 ? mx + std::log(total) : inv;
}

MANTISSA_VECTOR_CLONES void softmax_backward_row(const float* p, const float* dp, float* g, std::int64_t n,
                                                 std::int64_t len, float scale) {
  float dot = 0;
#pragma omp simd reduction(+ : dot)
  for (std::int64_t j = 0; j < n; ++j) dot += p[j] * dp[j];
  for (std::int64_t j = 0; j < n; ++j) g[j] = scale * p[j] * (dp[j] - dot);
  for (std::int64_t j = n; j < len; ++j) g[j] = 0.0f;
}

MANTISSA_VECTOR_CLONES void log_softmax_backward_row(const float* y, float* g, std::int64_t n) {
  const float s = sum_f32(g, n);
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) g[j] -= std::exp(y[j]) * s;
}

}  // namespace mantissa::detail
