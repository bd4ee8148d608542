// The rounding rule as plain loops over arrays, one instantiation per storage width and rounding mode
// so that the compiler vectorizes them. bulk.cpp instantiates them for any x86-64 (the portable
// kernels); bulk_avx2.cpp instantiates the same loops with AVX2, whose per-lane shifts they need.
#pragma once

#include <bit>
#include <cstdint>

#include "bulk_kernels.h"

namespace mantissa::detail {
namespace {  // internal linkage: each instruction-set level compiles its own copy (see encode_rules.h)

template <class Storage, Rounding R>
void encode_loop(const EncodeJob& job) {
  const EncodeParams p = job.params;
  const float* src = job.src;
  Storage* dst = static_cast<Storage*>(job.dst);
  const std::uint32_t first = job.index_low - static_cast<std::uint32_t>(job.begin);
  const StochasticKey key = job.key;
  const std::size_t begin = job.begin;  // locals: byte stores may alias the job's fields
  const std::size_t end = job.end;
  for (std::size_t i = begin; i < end; ++i) {
    std::uint32_t random = 0;
    if constexpr (R == Rounding::stochastic) random = random_bits(key, first + static_cast<std::uint32_t>(i));
    dst[i] = static_cast<Storage>(encode_bits_as<R>(p, std::bit_cast<std::uint32_t>(src[i]), random));
  }
}

// The rule where wide_nearest() holds: the fp32 pattern rounded to nearest even at bit 23 - M.
inline std::uint32_t encode_wide_nearest(const EncodeParams& p, std::uint32_t x) {
  const std::uint32_t s = 23 - p.man_bits;
  const std::uint32_t a = x & 0x7fffffffU;
  std::uint32_t bits = (a + ((1U << (s - 1)) - 1) + ((a >> s) & 1U)) >> s;
  bits = bits > p.max_finite ? p.on_overflow : bits;
  return ((x >> 31) << p.sign_shift) | ((a >> 23) == 255 ? special_bits(p, a) : bits);
}

template <class Storage>
void encode_wide_nearest_loop(const EncodeJob& job) {
  const EncodeParams p = job.params;
  const float* src = job.src;
  Storage* dst = static_cast<Storage*>(job.dst);
  const std::size_t end = job.end;
  for (std::size_t i = job.begin; i < end; ++i) {
    dst[i] = static_cast<Storage>(encode_wide_nearest(p, std::bit_cast<std::uint32_t>(src[i])));
  }
}

template <class Storage>
void encode_loops(const EncodeJob& job) {
  switch (job.params.rounding) {
    case Rounding::nearest_even:
      if (wide_nearest(job.params)) {
        encode_wide_nearest_loop<Storage>(job);
      } else {
        encode_loop<Storage, Rounding::nearest_even>(job);
      }
      break;
    case Rounding::toward_zero: encode_loop<Storage, Rounding::toward_zero>(job); break;
    case Rounding::stochastic: encode_loop<Storage, Rounding::stochastic>(job); break;
  }
}

inline void encode_any_width(const EncodeJob& job) {
  switch (job.storage_bytes) {
    case 1: encode_loops<std::uint8_t>(job); break;
    case 2: encode_loops<std::uint16_t>(job); break;
    default: encode_loops<std::uint32_t>(job); break;
  }
}

template <class Storage>
void decode_loop(const DecodeJob& job) {
  const DecodeParams p = job.params;
  const Storage* src = static_cast<const Storage*>(job.src);
  float* dst = job.dst;
  const std::size_t end = job.end;
  for (std::size_t i = job.begin; i < end; ++i) dst[i] = std::bit_cast<float>(decode_bits(p, src[i]));
}

inline void decode_any_width(const DecodeJob& job) {
  if (job.table != nullptr) {
    const auto* src = static_cast<const std::uint8_t*>(job.src);
    const float* table = job.table;
    float* dst = job.dst;
    const std::size_t end = job.end;
    for (std::size_t i = job.begin; i < end; ++i) dst[i] = table[src[i]];
    return;
  }
  switch (job.storage_bytes) {
    case 1: decode_loop<std::uint8_t>(job); break;
    case 2: decode_loop<std::uint16_t>(job); break;
    default: decode_loop<std::uint32_t>(job); break;
  }
}

}  // namespace
}  // namespace mantissa::detail
