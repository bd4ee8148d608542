// AVX2 kernels, for CPUs without AVX-512: fp32 <-> fp16 with the F16C converter, eight values at a
// time (nearest even or toward zero); fp32 <-> bf16 (nearest even) as integer arithmetic on the top
// half, eight at a time, since a bf16 model on an AVX2 CPU converts every product's operands (the
// rule's generic loops ran at a third of the speed); and the rule's loops (bulk_loops.h) vectorized by
// the compiler with AVX2 for every other format and rounding.
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

namespace {

// Eight fp32 patterns to bf16, nearest even: add 0x7fff plus the kept part's lowest bit, keep the top
// half. NaN keeps its sign and top payload bits and is made quiet (the rule's encode_special); the
// addition cannot wrap for any other pattern (the largest, -max finite, gives 0xff807fff: -inf).
__m128i bf16_from_f32(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);
  // Every lane is below 0x10000: packing with unsigned saturation keeps it; the lanes come out in
  // 128-bit halves, put back in order.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
  return _mm256_castsi256_si128(packed);
}

__m256i f32_from_bf16(__m128i h) {
  const __m256i f = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  // NaNs come back quiet, as from every other format.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(f, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_or_si256(f, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000)));
}

}  // namespace

void encode_bf16_avx2(const EncodeJob& job) {
  auto* dst = static_cast<std::uint16_t*>(job.dst);
  std::size_t i = job.begin;
  for (; i + 8 <= job.end; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(job.src + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), bf16_from_f32(x));
  }
  if (i < job.end) {
    alignas(32) float in[8] = {};
    alignas(16) std::uint16_t out[8];
    for (std::size_t k = 0; k < job.end - i; ++k) in[k] = job.src[i + k];
    _mm_store_si128(reinterpret_cast<__m128i*>(out), bf16_from_f32(_mm256_load_si256(reinterpret_cast<const __m256i*>(in))));
    for (std::size_t k = 0; k < job.end - i; ++k) dst[i + k] = out[k];
  }
}

void decode_bf16_avx2(const DecodeJob& job) {
  const auto* src = static_cast<const std::uint16_t*>(job.src);
  std::size_t i = job.begin;
  for (; i + 8 <= job.end; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(job.dst + i), f32_from_bf16(h));
  }
  if (i < job.end) {
    alignas(16) std::uint16_t in[8] = {};
    alignas(32) float out[8];
    for (std::size_t k = 0; k < job.end - i; ++k) in[k] = src[i + k];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), f32_from_bf16(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    for (std::size_t k = 0; k < job.end - i; ++k) job.dst[i + k] = out[k];
  }
}

}  // namespace mantissa::detail
