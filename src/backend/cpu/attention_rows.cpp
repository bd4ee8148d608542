// The plain loops of attention_rows.h, compiled per ISA (MANTISSA_VECTOR_CLONES): the arithmetic the
// AVX-512 kernel does lane by lane, in its order, so that every CPU gets the same bits.
#include "attention_rows.h"

#include <limits>

#include "rows.h"
#include "unary_math.h"

namespace mantissa::detail {
namespace {

constexpr int kLanes = 16;

// Everything below is inlined into each ISA's copy of the functions at the end (a helper left out of
// line, lambdas included, would be compiled for the baseline alone: 15x slower).

// The lanes' values met in attention_rows.h's fixed tree.
template <class Op>
[[gnu::always_inline]] inline float tree(float* lanes, Op op) {
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) lanes[l] = op(lanes[l], lanes[l + w]);
  }
  return lanes[0];
}
// The max instruction's rule: b where either is NaN.
[[gnu::always_inline]] inline float max_lane(float a, float b) { return a > b ? a : b; }
[[gnu::always_inline]] inline float add_lane(float a, float b) { return a + b; }

// Each of n values to its lane (j % 16): whole blocks of 16, then the last one's first n % 16.
template <class Step>
[[gnu::always_inline]] inline void by_lanes(std::int64_t n, Step step) {
  const std::int64_t whole = n / kLanes * kLanes;
  for (std::int64_t j = 0; j < whole; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) step(j + l, l);
  }
  for (std::int64_t j = whole; j < n; ++j) step(j, static_cast<int>(j - whole));
}

template <class Out>
[[gnu::always_inline]] inline void softmax_row(const float* s, float* work, Out* p, std::int64_t n, std::int64_t len,
                                               float scale) {
  if (n == 0) {
    for (std::int64_t j = 0; j < len; ++j) store_as(p[j], std::numeric_limits<float>::quiet_NaN());
    return;
  }
  float lanes[kLanes];
  for (float& v : lanes) v = -std::numeric_limits<float>::infinity();
  by_lanes(n, [&](std::int64_t j, int l) __attribute__((always_inline)) {
    lanes[l] = max_lane(lanes[l], scale * s[j]);
  });
  const float mx = tree(lanes, max_lane);
  for (float& v : lanes) v = 0.0f;
  by_lanes(n, [&](std::int64_t j, int l) __attribute__((always_inline)) {
    work[j] = exp_of_nonpositive(scale * s[j] - mx);
    lanes[l] += work[j];
  });
  const float inv = 1.0f / tree(lanes, add_lane);
  for (std::int64_t j = 0; j < n; ++j) store_as(p[j], work[j] * inv);
  for (std::int64_t j = n; j < len; ++j) store_as(p[j], 0.0f);
}

template <class In, class Out>
[[gnu::always_inline]] inline void softmax_backward_row(const In* p, const float* dp, Out* g, std::int64_t n,
                                                        std::int64_t len, float scale) {
  float lanes[kLanes] = {};
  by_lanes(n, [&](std::int64_t j, int l) __attribute__((always_inline)) {
    lanes[l] = std::fma(f32_of(p[j]), dp[j], lanes[l]);
  });
  const float dot = tree(lanes, add_lane);
  for (std::int64_t j = 0; j < n; ++j) store_as(g[j], (scale * f32_of(p[j])) * (dp[j] - dot));
  for (std::int64_t j = n; j < len; ++j) store_as(g[j], 0.0f);
}

}  // namespace

MANTISSA_VECTOR_CLONES void attention_softmax_row(const float* s, float* work, float* p, std::int64_t n, std::int64_t len,
                                                  float scale) {
  softmax_row(s, work, p, n, len, scale);
}
MANTISSA_VECTOR_CLONES void attention_softmax_row(const float* s, float* work, std::uint16_t* p, std::int64_t n,
                                                  std::int64_t len, float scale) {
  softmax_row(s, work, p, n, len, scale);
}
MANTISSA_VECTOR_CLONES void attention_softmax_backward_row(const float* p, const float* dp, float* g, std::int64_t n,
                                                           std::int64_t len, float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}
MANTISSA_VECTOR_CLONES void attention_softmax_backward_row(const float* p, const float* dp, std::uint16_t* g, std::int64_t n,
                                                           std::int64_t len, float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}
MANTISSA_VECTOR_CLONES void attention_softmax_backward_row(const std::uint16_t* p, const float* dp, float* g, std::int64_t n,
                                                           std::int64_t len, float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}
MANTISSA_VECTOR_CLONES void attention_softmax_backward_row(const std::uint16_t* p, const float* dp, std::uint16_t* g,
                                                           std::int64_t n, std::int64_t len, float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}

}  // namespace mantissa::detail
