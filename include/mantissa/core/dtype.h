// The element types a tensor can hold, chosen at run time. f64 exists for reference checks; the others
// are the number formats of mantissa/numeric (f32, f16, bf16 compute formats; e4m3, e5m2 storage only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mantissa/numeric/format.h"

namespace mantissa {

enum class DType : std::uint8_t { f64, f32, f16, bf16, e4m3, e5m2 };

inline constexpr DType kAllDTypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16, DType::e4m3, DType::e5m2};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::f16:
    case DType::bf16: return 2;
    case DType::e4m3:
    case DType::e5m2: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t);
// "f64", "f32", "f16", "bf16", "e4m3", "e5m2" (also "fp32", "fp16"); throws std::invalid_argument.
DType parse_dtype(std::string_view name);

// The number format of a dtype other than f64.
Format format_of(DType t);
// The dtype that stores a format's values as they are (f32, f16, bf16, e4m3, e5m2); nullopt for a
// format that has none (fp4, fp6, any other eXmY: held in a wider dtype).
std::optional<DType> dtype_of(const Format& f);
// Relative precision: the gap between 1 and the next larger value (2^-mantissa bits).
double dtype_epsilon(DType t);
// Half precision (f16, bf16) and fp8: formats whose arithmetic mantissa carries out in f32.
constexpr bool is_low_precision(DType t) { return t != DType::f64 && t != DType::f32; }
// fp8 formats are for storage: ops reach them through explicit casts only.
constexpr bool is_storage_only(DType t) { return t == DType::e4m3 || t == DType::e5m2; }

}  // namespace mantissa
