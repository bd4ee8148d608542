// Names and formats of the tensor dtypes, and device names.
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/core/device.h"
#include "mantissa/core/dtype.h"

namespace mantissa {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes) {
    if (name == dtype_name(t)) return t;
  }
  if (name == "fp32") return DType::f32;
  if (name == "fp16") return DType::f16;
  if (name == "fp64") return DType::f64;
  throw std::invalid_argument("unknown dtype '" + std::string(name) +
                              "' (expected f64, f32, f16, bf16, e4m3 or e5m2)");
}

Format format_of(DType t) {
  switch (t) {
    case DType::f32: return Format::fp32();
    case DType::f16: return Format::fp16();
    case DType::bf16: return Format::bf16();
    case DType::e4m3: return Format::e4m3();
    case DType::e5m2: return Format::e5m2();
    case DType::f64: break;
  }
  throw std::invalid_argument("f64 is not one of the number formats");
}

std::optional<DType> dtype_of(const Format& f) {
  for (const DType t : kAllDTypes) {
    if (t != DType::f64 && format_of(t) == f) return t;
  }
  return std::nullopt;
}

double dtype_epsilon(DType t) {
  return t == DType::f64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -format_of(t).man_bits());
}

std::string Device::str() const {
  return type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(index);
}

}  // namespace mantissa
