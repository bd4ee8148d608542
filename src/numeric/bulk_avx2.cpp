// AVX2 kernels, for CPUs without AVX-512: fp32 <-> fp16 with the F16C converter, eight values at a
// time (nearest even or toward zero), and the rule's loops (bulk_loops.h) vectorized by the compiler
// with AVX2 for every other format and rounding.
#include <immintrin.h>

#include "bulk_loops.h"

namespace mantissa::detail {

void encode_avx2(const EncodeJob& job) { encode_any_width(job); }
void decode_avx2(const DecodeJob& job) { decode_any_width(job); }

void encode_fp16_f16c(const EncodeJob& job) {
  const bool saturate = job.params.on_overflow == job.params.max_finite;
  auto* dst = static_cast<std::uint16_t*>(job.dst);
  std::size_t i = job.begin;
  const auto convert = [&](__m256 x) {
    __m128i h = job.params.rounding == Rounding::toward_zero
                    ? _mm256_cvtps_ph(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
                    : _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (saturate) {  // infinities (from overflow or infinite inputs) become the largest finite value
      const __m128i sign = _mm_and_si128(h, _mm_set1_epi16(static_cast<short>(0x8000)));
      const __m128i inf = _mm_cmpeq_epi16(_mm_andnot_si128(_mm_set1_epi16(static_cast<short>(0x8000)), h),
                                          _mm_set1_epi16(0x7c00));
      h = _mm_blendv_epi8(h, _mm_or_si128(sign, _mm_set1_epi16(0x7bff)), inf);
    }
    return h;
  };
  for (; i + 8 <= job.end; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), convert(_mm256_loadu_ps(job.src + i)));
  }
  if (i < job.end) {
    alignas(32) float in[8] = {};
    alignas(16) std::uint16_t out[8];
    for (std::size_t k = 0; k < job.end - i; ++k) in[k] = job.src[i + k];
    _mm_store_si128(reinterpret_cast<__m128i*>(out), convert(_mm256_load_ps(in)));
    for (std::size_t k = 0; k < job.end - i; ++k) dst[i + k] = out[k];
  }
}

void decode_fp16_f16c(const DecodeJob& job) {
  const auto* src = static_cast<const std::uint16_t*>(job.src);
  std::size_t i = job.begin;
  for (; i + 8 <= job.end; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(job.dst + i, _mm256_cvtph_ps(h));
  }
  if (i < job.end) {
    alignas(16) std::uint16_t in[8] = {};
    alignas(32) float out[8];
    for (std::size_t k = 0; k < job.end - i; ++k) in[k] = src[i + k];
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    for (std::size_t k = 0; k < job.end - i; ++k) job.dst[i + k] = out[k];
  }
}

}  // namespace mantissa::detail
