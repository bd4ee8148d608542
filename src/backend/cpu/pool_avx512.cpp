// The 2x2 max-pooling backward with AVX-512, compiled for it alone (like numeric/bulk_avx512.cpp) and
// called only where the CPU has it: eight windows at a time, in the rows' interleaved layout (lanes 2j
// and 2j + 1 hold window j's two columns), the first-NaN-else-first-maximum rule as mask arithmetic.
// The scalar loop took ~15 cycles a window, a scatter GCC does not vectorize.
#include <immintrin.h>

#include <cstdint>

#include "pool_avx512.h"

namespace mantissa::detail {
namespace {

// The larger of a and b in each lane, a NaN winning (a's first).
__m512 max_nan(__m512 a, __m512 b) {
  const __mmask16 a_nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
  const auto take_b = static_cast<__mmask16>(
      (_mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q)) & ~a_nan);
  return _mm512_mask_blend_ps(take_b, a, b);
}

// Of each window's two lanes flagged in e (lanes 2j, 2j + 1), the first.
__mmask16 first_of_pairs(__mmask16 e) {
  constexpr unsigned kEven = 0x5555U;
  constexpr unsigned kOdd = 0xAAAAU;
  const unsigned v = e;
  return static_cast<__mmask16>((v & kEven) | (v & kOdd & ~(v << 1)));
}

// Both lanes of each window of which either lane is flagged in e.
__mmask16 whole_pairs(__mmask16 e) {
  const unsigned v = e;
  const unsigned any = (v | (v >> 1)) & 0x5555U;
  return static_cast<__mmask16>(any | (any << 1));
}

}  // namespace

void max_pool_2x2_backward_avx512(const float* in, const float* g, float* gin, std::int64_t w, std::int64_t oh,
                                  std::int64_t ow, std::int64_t windows) {
  const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (std::int64_t y = 0; y < oh; ++y) {
    const float* i0 = in + 2 * y * w;
    const float* i1 = i0 + w;
    float* g0 = gin + 2 * y * w;
    float* g1 = g0 + w;
    const float* gy = g + y * ow;
    for (std::int64_t x = 0; x + 8 <= windows; x += 8) {
      const __m512 r0 = _mm512_loadu_ps(i0 + 2 * x);
      const __m512 r1 = _mm512_loadu_ps(i1 + 2 * x);
      const __m512 rows = max_nan(r0, r1);
      const __m512 m = max_nan(rows, _mm512_permute_ps(rows, 0xB1));  // with the pair's other lane
      // A lane takes the gradient if it equals the window's maximum, or is NaN (then the maximum is).
      const __mmask16 e0 = _mm512_cmp_ps_mask(r0, m, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(r0, r0, _CMP_UNORD_Q);
      const __mmask16 e1 = _mm512_cmp_ps_mask(r1, m, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(r1, r1, _CMP_UNORD_Q);
      const __mmask16 t0 = first_of_pairs(e0);
      const auto t1 = static_cast<__mmask16>(first_of_pairs(e1) & ~whole_pairs(e0));
      const __m512 gv = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(_mm256_loadu_ps(gy + x)));
      _mm512_storeu_ps(g0 + 2 * x, _mm512_maskz_mov_ps(t0, gv));
      _mm512_storeu_ps(g1 + 2 * x, _mm512_maskz_mov_ps(t1, gv));
    }
  }
}

}  // namespace mantissa::detail
