// attention_rows.h's rows with AVX-512, compiled for it alone (like pool_avx512.cpp) and called only
// where the CPU has it: sixteen keys a step, the row's last ones under a mask, bf16 read and written in
// place. Each step is the plain loop's (attention_rows.cpp) for its sixteen lanes, in its order.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "attention_rows.h"

namespace mantissa::detail {
namespace {

// The lanes of keys j.. below n (all sixteen when 16 or more are left; none when none are).
__mmask16 lanes_below(std::int64_t left) {
  if (left >= 16) return static_cast<__mmask16>(0xffff);
  if (left <= 0) return static_cast<__mmask16>(0);
  return static_cast<__mmask16>((1U << left) - 1U);
}

__m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
__m512 load(const std::uint16_t* p, __mmask16 m) {  // a bf16 is the top half of an f32
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

// encode_rules.h's bf16_bits_of, lane by lane.
__m256i bf16_of(__m512 v) {
  const __m512i x = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i magnitude = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}
void store(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
void store(std::uint16_t* p, __mmask16 m, __m512 v) { _mm256_mask_storeu_epi16(p, m, bf16_of(v)); }

// The fixed tree: lanes l and l + 8, l + 4, l + 2, l + 1 (max_ps(a, b) is a > b ? a : b, as the plain max).
float max_tree(__m512 v) {
  const __m256 a = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_max_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_max_ss(b, _mm_shuffle_ps(b, b, 1)));
}
float add_tree(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  b = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_shuffle_ps(b, b, 1)));
}

// unary_math.h's exp_of_nonpositive, step for step (a product then a sum where it has no fma).
__m512 exp_of_nonpositive(__m512 y_in) {
  const __m512 y = _mm512_max_ps(_mm512_set1_ps(-104.0f), y_in);  // NaN stays NaN
  const __m512 shifter = _mm512_set1_ps(0x1.8p23f);
  const __m512 kf = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(y, _mm512_set1_ps(0x1.715476p0f)), shifter), shifter);
  __m512 r = _mm512_fmadd_ps(kf, _mm512_set1_ps(-0x1.62e43p-1f), y);
  r = _mm512_fmadd_ps(kf, _mm512_set1_ps(0x1.05c61p-29f), r);
  __m512 p = _mm512_set1_ps(0x1.6a1a70p-10f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.123fc6p-7f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.555916p-5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.55548ap-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0x1.fffffcp-2f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i k = _mm512_cvttps_epi32(kf);
  const __m512 two_k64 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(64 + 127)), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, two_k64), _mm512_set1_ps(0x1p-64f));
}

template <class Out>
void softmax_row(const float* s, float* work, Out* p, std::int64_t n, std::int64_t len, float scale) {
  if (n == 0) {
    const __m512 nan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t j = 0; j < len; j += 16) store(p + j, lanes_below(len - j), nan);
    return;
  }
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_below(n - j);
    mx = _mm512_mask_max_ps(mx, m, mx, _mm512_mul_ps(sc, load(s + j, m)));
  }
  const __m512 row_max = _mm512_set1_ps(max_tree(mx));
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_below(n - j);
    const __m512 e = exp_of_nonpositive(_mm512_sub_ps(_mm512_mul_ps(sc, load(s + j, m)), row_max));
    _mm512_mask_storeu_ps(work + j, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / add_tree(sum));
  for (std::int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes_below(n - j);
    store(p + j, lanes_below(len - j), _mm512_maskz_mul_ps(m, load(work + j, m), inv));
  }
}

template <class In, class Out>
void softmax_backward_row(const In* p, const float* dp, Out* g, std::int64_t n, std::int64_t len, float scale) {
  __m512 dot = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = lanes_below(n - j);
    dot = _mm512_mask3_fmadd_ps(load(p + j, m), load(dp + j, m), dot, m);
  }
  const __m512 sc = _mm512_set1_ps(scale), row_dot = _mm512_set1_ps(add_tree(dot));
  for (std::int64_t j = 0; j < len; j += 16) {
    const __mmask16 m = lanes_below(n - j);
    const __m512 v = _mm512_maskz_mul_ps(m, _mm512_mul_ps(sc, load(p + j, m)), _mm512_sub_ps(load(dp + j, m), row_dot));
    store(g + j, lanes_below(len - j), v);
  }
}

}  // namespace

void attention_softmax_row_avx512(const float* s, float* work, float* p, std::int64_t n, std::int64_t len, float scale) {
  softmax_row(s, work, p, n, len, scale);
}
void attention_softmax_row_avx512(const float* s, float* work, std::uint16_t* p, std::int64_t n, std::int64_t len, float scale) {
  softmax_row(s, work, p, n, len, scale);
}
void attention_softmax_backward_row_avx512(const float* p, const float* dp, float* g, std::int64_t n, std::int64_t len,
                                           float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}
void attention_softmax_backward_row_avx512(const float* p, const float* dp, std::uint16_t* g, std::int64_t n, std::int64_t len,
                                           float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}
void attention_softmax_backward_row_avx512(const std::uint16_t* p, const float* dp, float* g, std::int64_t n, std::int64_t len,
                                           float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}
void attention_softmax_backward_row_avx512(const std::uint16_t* p, const float* dp, std::uint16_t* g, std::int64_t n,
                                           std::int64_t len, float scale) {
  softmax_backward_row(p, dp, g, n, len, scale);
}

}  // namespace mantissa::detail
