// AVX-512 kernels (F, BW, VL, DQ): the rounding rule of encode_rules.h on 16 lanes, step for step, for
// every format and rounding mode; fp16 through the hardware converter; decoding of fp16, bf16 and 8-bit
// formats. Compiled with AVX-512 flags; bulk.cpp calls it only on CPUs that have AVX-512.
#include <immintrin.h>

#include "bulk_kernels.h"

namespace mantissa::detail {
namespace {

__m512i set1(std::uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
__m512i shift_left(__m512i v, std::uint32_t n) { return _mm512_sll_epi32(v, _mm_cvtsi32_si128(static_cast<int>(n))); }
__m512i shift_right(__m512i v, std::uint32_t n) { return _mm512_srl_epi32(v, _mm_cvtsi32_si128(static_cast<int>(n))); }

__mmask16 tail_mask(std::size_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1U << left) - 1);
}

__m512i mix32(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, set1(0x7feb352dU));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  x = _mm512_mullo_epi32(x, set1(0x846ca68bU));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

void store(int bytes, void* dst, std::size_t i, __mmask16 m, __m512i bits) {
  switch (bytes) {
    case 1: _mm512_mask_cvtepi32_storeu_epi8(static_cast<std::uint8_t*>(dst) + i, m, bits); break;
    case 2: _mm512_mask_cvtepi32_storeu_epi16(static_cast<std::uint16_t*>(dst) + i, m, bits); break;
    default: _mm512_mask_storeu_epi32(static_cast<std::uint32_t*>(dst) + i, m, bits); break;
  }
}

// Lanes whose fp32 magnitude `a` is infinite or NaN get their pattern (special_bits() of encode_rules.h).
__m512i with_specials(const EncodeParams& p, __m512i a, __m512i bits) {
  const __mmask16 special = _mm512_cmpge_epu32_mask(a, set1(0x7f800000U));
  if (special == 0) return bits;
  const __mmask16 inf = _mm512_cmpeq_epi32_mask(a, set1(0x7f800000U));
  const __m512i payload =
      _mm512_and_si512(shift_right(_mm512_and_si512(a, set1(0x7fffffU)), p.payload_shift), set1(p.payload_mask));
  bits = _mm512_mask_mov_epi32(bits, special & ~inf, _mm512_or_si512(set1(p.quiet_nan), payload));
  return _mm512_mask_mov_epi32(bits, inf, set1(p.on_overflow));
}

// encode_bits() on 16 lanes; `lane_index` holds the low 32 bits of each lane's counter.
__m512i encode16(const EncodeJob& job, __m512i x, __m512i lane_index) {
  const EncodeParams& p = job.params;
  const __m512i one = set1(1);
  const __m512i sign = shift_left(_mm512_srli_epi32(x, 31), p.sign_shift);
  const __m512i a = _mm512_and_si512(x, set1(0x7fffffffU));
  const __m512i e32 = _mm512_srli_epi32(a, 23);
  const __mmask16 normal = _mm512_test_epi32_mask(e32, e32);
  const __m512i sig =
      _mm512_mask_or_epi32(a, normal, _mm512_and_si512(a, set1(0x7fffffU)), set1(0x800000U));
  const __m512i eeff = _mm512_max_epi32(_mm512_sub_epi32(e32, set1(127)), set1(static_cast<std::uint32_t>(p.emin)));
  const __m512i shift = _mm512_sub_epi32(
      _mm512_add_epi32(eeff, set1(150 - p.man_bits)), _mm512_max_epi32(e32, one));

  const __m512i exponent_part =
      shift_left(_mm512_sub_epi32(eeff, set1(static_cast<std::uint32_t>(p.emin))), p.man_bits);
  __m512i q;
  switch (p.rounding) {
    case Rounding::nearest_even: {
      const __m512i s = _mm512_min_epu32(_mm512_add_epi32(shift, one), set1(27));
      const __m512i sig2 = _mm512_slli_epi32(sig, 1);
      const __m512i half_minus_one = _mm512_srli_epi32(_mm512_sub_epi32(_mm512_sllv_epi32(one, s), one), 1);
      const __m512i odd = _mm512_and_si512(_mm512_add_epi32(_mm512_srlv_epi32(sig2, s), exponent_part), one);
      q = _mm512_srlv_epi32(_mm512_add_epi32(_mm512_add_epi32(sig2, half_minus_one), odd), s);
      break;
    }
    case Rounding::toward_zero:
      q = _mm512_srlv_epi32(sig, shift);  // counts of 32 or more give 0, as sig >> min(shift, 31) does
      break;
    default: {  // stochastic
      const __m512i random = mix32(_mm512_add_epi32(
          mix32(_mm512_xor_si512(lane_index, set1(job.key.k0))), set1(job.key.k1)));
      const __m512i trunc = _mm512_srlv_epi32(sig, shift);
      const __m512i rem = _mm512_and_si512(sig, _mm512_sub_epi32(_mm512_sllv_epi32(one, shift), one));
      const __mmask16 far = _mm512_cmpgt_epu32_mask(shift, set1(32));
      const __m512i threshold = _mm512_mask_mov_epi32(
          _mm512_srlv_epi32(random, _mm512_sub_epi32(set1(32), shift)), far, random);
      const __m512i limit =
          _mm512_mask_srlv_epi32(rem, far, rem, _mm512_sub_epi32(shift, set1(32)));
      q = _mm512_mask_add_epi32(trunc, _mm512_cmplt_epu32_mask(threshold, limit), trunc, one);
      break;
    }
  }
  __m512i bits = _mm512_add_epi32(exponent_part, q);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpgt_epu32_mask(bits, set1(p.max_finite)), set1(job.overflow));

  return _mm512_or_si512(sign, with_specials(p, a, bits));
}

// encode_wide_nearest() of bulk_loops.h on 16 lanes: 8 exponent bits, nearest even, M < 23.
__m512i encode16_wide_nearest(const EncodeJob& job, __m512i x) {
  const EncodeParams& p = job.params;
  const std::uint32_t s = 23 - p.man_bits;
  const __m512i a = _mm512_and_si512(x, set1(0x7fffffffU));
  const __m512i odd = _mm512_and_si512(shift_right(a, s), set1(1));
  __m512i bits = shift_right(_mm512_add_epi32(_mm512_add_epi32(a, set1((1U << (s - 1)) - 1)), odd), s);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpgt_epu32_mask(bits, set1(p.max_finite)), set1(p.on_overflow));
  return _mm512_or_si512(shift_left(_mm512_srli_epi32(x, 31), p.sign_shift), with_specials(p, a, bits));
}

}  // namespace

void encode_avx512(const EncodeJob& job) {
  if (wide_nearest(job.params)) {
    for (std::size_t i = job.begin; i < job.end; i += 16) {
      const __mmask16 m = tail_mask(job.end - i);
      const __m512i x = _mm512_maskz_loadu_epi32(m, job.src + i);
      store(job.storage_bytes, job.dst, i, m, encode16_wide_nearest(job, x));
    }
    return;
  }
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::size_t i = job.begin; i < job.end; i += 16) {
    const __mmask16 m = tail_mask(job.end - i);
    const __m512i x = _mm512_maskz_loadu_epi32(m, job.src + i);
    const auto offset = static_cast<std::uint32_t>(i - job.begin) + job.index_low;
    const __m512i lanes = _mm512_add_epi32(set1(offset), iota);
    store(job.storage_bytes, job.dst, i, m, encode16(job, x, lanes));
  }
}

void encode_fp16_avx512(const EncodeJob& job) {
  const bool saturate = job.params.on_overflow == job.params.max_finite;
  auto* dst = static_cast<std::uint16_t*>(job.dst);
  for (std::size_t i = job.begin; i < job.end; i += 16) {
    const __mmask16 m = tail_mask(job.end - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, job.src + i);
    __m256i h = job.params.rounding == Rounding::toward_zero
                    ? _mm512_cvtps_ph(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC)
                    : _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (saturate) {  // infinities (from overflow or infinite inputs) become the largest finite value
      const __m256i mag = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
      const __mmask16 inf = _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7c00));
      const __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000)));
      h = _mm256_mask_mov_epi16(h, inf, _mm256_or_si256(sign, _mm256_set1_epi16(0x7bff)));
    }
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

void decode_fp16_avx512(const DecodeJob& job) {
  const auto* src = static_cast<const std::uint16_t*>(job.src);
  for (std::size_t i = job.begin; i < job.end; i += 16) {
    const __mmask16 m = tail_mask(job.end - i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, src + i);
    _mm512_mask_storeu_ps(job.dst + i, m, _mm512_cvtph_ps(h));
  }
}

void decode_bf16_avx512(const DecodeJob& job) {
  const auto* src = static_cast<const std::uint16_t*>(job.src);
  for (std::size_t i = job.begin; i < job.end; i += 16) {
    const __mmask16 m = tail_mask(job.end - i);
    __m512i f = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i)), 16);
    // NaNs come back quiet, as from every other format.
    const __m512i mag = _mm512_and_si512(f, set1(0x7fffffffU));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(mag, set1(0x7f800000U));
    f = _mm512_mask_or_epi32(f, nan, f, set1(0x00400000U));
    _mm512_mask_storeu_epi32(job.dst + i, m, f);
  }
}

void decode_8bit_avx512(const DecodeJob& job) {
  const auto* src = static_cast<const std::uint8_t*>(job.src);
  for (std::size_t i = job.begin; i < job.end; i += 16) {
    const __mmask16 m = tail_mask(job.end - i);
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, src + i));
    _mm512_mask_storeu_ps(job.dst + i, m, _mm512_i32gather_ps(idx, job.table, 4));
  }
}

// Shared with the AVX512-BF16 kernel, which needs the rule for fp32 subnormals the instruction flushes.
__m512i encode16_avx512(const EncodeJob& job, __m512i x) { return encode16(job, x, _mm512_setzero_si512()); }

}  // namespace mantissa::detail
