// What the bulk dispatcher (bulk.cpp) hands to the kernels of each instruction-set level.
//
// A job covers a range of elements whose counters share their high 32 bits, so a kernel computes the
// stochastic key once. Kernels for a level live in their own file, compiled with that level's flags
// and called only when CPUID says the CPU has it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "encode_rules.h"

namespace mantissa::detail {

struct EncodeJob {
  EncodeParams params;
  std::uint32_t overflow;  // magnitude written for finite overflow under this job's rounding
  int storage_bytes;
  const float* src;
  void* dst;
  std::size_t begin, end;   // element range
  std::uint32_t index_low;  // low 32 bits of the counter of element `begin`
  StochasticKey key;
};

struct DecodeJob {
  DecodeParams params;
  int storage_bytes;
  const void* src;
  float* dst;
  std::size_t begin, end;
  const float* table;  // 256 decoded values, for 8-bit formats
};

void encode_portable(const EncodeJob& job);
void decode_portable(const DecodeJob& job);

// AVX2 with F16C: fp16 through the hardware converter (nearest even or toward zero); the loops of
// bulk_loops.h vectorized with AVX2 for everything else.
void encode_fp16_f16c(const EncodeJob& job);
void decode_fp16_f16c(const DecodeJob& job);
void encode_avx2(const EncodeJob& job);
void decode_avx2(const DecodeJob& job);
void encode_bf16_avx2(const EncodeJob& job);  // nearest even, not saturating
void decode_bf16_avx2(const DecodeJob& job);

// AVX-512 (F, BW, VL, DQ): every format and rounding mode.
void encode_avx512(const EncodeJob& job);
void encode_fp16_avx512(const EncodeJob& job);  // nearest even or toward zero
void decode_fp16_avx512(const DecodeJob& job);
void decode_bf16_avx512(const DecodeJob& job);
void decode_8bit_avx512(const DecodeJob& job);

// AVX512-BF16: bf16, rounding to nearest even, not saturating.
void encode_bf16_avx512bf16(const EncodeJob& job);

}  // namespace mantissa::detail
