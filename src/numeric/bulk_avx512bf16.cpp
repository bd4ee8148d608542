// AVX512-BF16 kernel: fp32 -> bf16 rounding to nearest even with vcvtneps2bf16, two values per cycle.
// The instruction treats fp32 subnormal inputs as zero, which IEEE does not; lanes holding one are
// recomputed with the exact rule (encode16_avx512), so the bits match the scalar encode() everywhere.
#include <immintrin.h>

#include "bulk_kernels.h"

namespace mantissa::detail {

__m512i encode16_avx512(const EncodeJob& job, __m512i x);

void encode_bf16_avx512bf16(const EncodeJob& job) {
  auto* dst = static_cast<std::uint16_t*>(job.dst);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i min_normal = _mm512_set1_epi32(0x00800000);
  for (std::size_t i = job.begin; i < job.end; i += 16) {
    const std::size_t left = job.end - i;
    const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1U << left) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, job.src + i);
    const __m256bh h = _mm512_cvtneps_pbh(x);
    __m256i bits;
    static_assert(sizeof(bits) == sizeof(h));
    __builtin_memcpy(&bits, &h, sizeof bits);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), abs_mask);
    const __mmask16 subnormal = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(a, a), a, min_normal);
    if (subnormal != 0) {
      const __m256i exact = _mm512_cvtepi32_epi16(encode16_avx512(job, _mm512_castps_si512(x)));
      bits = _mm256_mask_mov_epi16(bits, subnormal, exact);
    }
    _mm256_mask_storeu_epi16(dst + i, m, bits);
  }
}

}  // namespace mantissa::detail
