// The 2x2 max pooling, forward and backward, with AVX-512, compiled for it alone (like
// numeric/bulk_avx512.cpp) and called only where the CPU has it. Sixteen columns of a row pair at a time
// (eight windows: lanes 2j and 2j + 1 hold window j's two columns), the row's last ones under a mask, f32
// or bf16 read in place (a bf16 is the top half of an f32). The first-NaN-else-first-maximum rule of the
// backward is mask arithmetic; the scalar loops took ~15 cycles a window, a scatter GCC does not vectorize.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "pool_avx512.h"

namespace mantissa::detail {
namespace {

// The first n lanes (n <= 16).
__mmask16 first_lanes(std::int64_t n) { return static_cast<__mmask16>((1U << n) - 1U); }

// The first n values of p (the rest 0) as f32.
__m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
__m512 load(const std::uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
__m256 load8(const float* p, __mmask8 m) { return _mm256_maskz_loadu_ps(m, p); }
__m256 load8(const std::uint16_t* p, __mmask8 m) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_maskz_loadu_epi16(m, p)), 16));
}

// The larger of a and b in each lane, b if it is NaN: the scalar loops' max_nan(a, b), which decides
// which NaN a window of several keeps.
__m512 max_b_nan(__m512 a, __m512 b) {
  const auto take_b = static_cast<__mmask16>(_mm512_cmp_ps_mask(b, a, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q));
  return _mm512_mask_blend_ps(take_b, a, b);
}

// The larger of a and b in each lane, a NaN winning (a's first).
__m512 max_a_nan(__m512 a, __m512 b) {
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

template <class X>
void forward(const X* in, float* out, std::int64_t w, std::int64_t ow, std::int64_t pairs) {
  constexpr auto kEvenLanes = static_cast<__mmask16>(0x5555U);
  for (std::int64_t r = 0; r < pairs; ++r) {
    const X* r0 = in + 2 * r * w;
    const X* r1 = r0 + w;
    float* o = out + r * ow;
    for (std::int64_t k = 0; k < 2 * ow; k += 16) {
      const std::int64_t n = std::min<std::int64_t>(16, 2 * ow - k);
      const __mmask16 m = first_lanes(n);
      const __m512 rows = max_b_nan(load(r0 + k, m), load(r1 + k, m));
      const __m512 windows = max_b_nan(rows, _mm512_permute_ps(rows, 0xB1));  // lane 2j: window j
      _mm512_mask_storeu_ps(o + k / 2, first_lanes(n / 2), _mm512_maskz_compress_ps(kEvenLanes, windows));
    }
  }
}

template <class X>
void backward(const X* in, const X* g, float* gin, std::int64_t w, std::int64_t ow, std::int64_t pairs) {
  const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (std::int64_t r = 0; r < pairs; ++r) {
    const X* i0 = in + 2 * r * w;
    const X* i1 = i0 + w;
    float* g0 = gin + 2 * r * w;
    float* g1 = g0 + w;
    const X* gy = g + r * ow;
    for (std::int64_t k = 0; k < 2 * ow; k += 16) {
      const std::int64_t n = std::min<std::int64_t>(16, 2 * ow - k);
      const __mmask16 m = first_lanes(n);
      const __m512 a = load(i0 + k, m);
      const __m512 b = load(i1 + k, m);
      const __m512 rows = max_a_nan(a, b);
      const __m512 top = max_a_nan(rows, _mm512_permute_ps(rows, 0xB1));  // with the pair's other lane
      // A lane takes the gradient if it equals the window's maximum, or is NaN (then the maximum is).
      const __mmask16 e0 = _mm512_cmp_ps_mask(a, top, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
      const __mmask16 e1 = _mm512_cmp_ps_mask(b, top, _CMP_EQ_OQ) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
      const __mmask16 t0 = first_of_pairs(e0);
      const auto t1 = static_cast<__mmask16>(first_of_pairs(e1) & ~whole_pairs(e0));
      const __m512 gv = _mm512_permutexvar_ps(twice, _mm512_castps256_ps512(load8(gy + k / 2, static_cast<__mmask8>(first_lanes(n / 2)))));
      _mm512_mask_storeu_ps(g0 + k, m, _mm512_maskz_mov_ps(t0, gv));
      _mm512_mask_storeu_ps(g1 + k, m, _mm512_maskz_mov_ps(t1, gv));
    }
    if (w > 2 * ow) g0[w - 1] = g1[w - 1] = 0.0f;  // an odd width's last column is in no window
  }
}

}  // namespace

void max_pool_2x2_avx512(const float* in, float* out, std::int64_t w, std::int64_t ow, std::int64_t pairs) {
  forward(in, out, w, ow, pairs);
}
void max_pool_2x2_avx512(const std::uint16_t* in, float* out, std::int64_t w, std::int64_t ow, std::int64_t pairs) {
  forward(in, out, w, ow, pairs);
}
void max_pool_2x2_backward_avx512(const float* in, const float* g, float* gin, std::int64_t w, std::int64_t ow,
                                  std::int64_t pairs) {
  backward(in, g, gin, w, ow, pairs);
}
void max_pool_2x2_backward_avx512(const std::uint16_t* in, const std::uint16_t* g, float* gin, std::int64_t w,
                                  std::int64_t ow, std::int64_t pairs) {
  backward(in, g, gin, w, ow, pairs);
}

}  // namespace mantissa::detail
