// Block-scaled quantization as a value: one QuantSpec says how a tensor becomes low-precision elements
// and scales (element format, block shape, scale format and rule, rounding), and one function does it.
// The recipes of the field are presets of values: MXFP8 and MXFP4 (OCP Microscaling 1.0: E4M3 / E2M1
// elements, a power-of-2 E8M0 scale per 32 values) and NVFP4 (E2M1 elements, an E4M3 scale per 16 values
// under one f32 scale per tensor). The numbers follow torchao's reference quantizers bit for bit
// (tests/golden/make_microscale_golden.py made the vectors the tests compare against), so a recipe can be
// studied on any CPU.
//
// A scale here is what a block's elements are multiplied by to give back the values: x ~ code * scale
// (times the tensor scale, for two-level scales).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/numeric/format.h"
#include "mantissa/numeric/rounding.h"

namespace mantissa {

// What a block's scale is stored as.
enum class ScaleFormat : std::uint8_t {
  e8m0,  // OCP E8M0: 2^(bits - 127), no sign, no zero; 0xFF is NaN
  e4m3,  // an E4M3 value (NVFP4's block scale), under one f32 scale per tensor
};

// How a power-of-2 (E8M0) scale is fitted to the block's amax, as torchao's ScaleCalculationMode says:
//   floor    2^(floor(log2 amax) - emax(element)): OCP MX 1.0's rule (torchao FLOOR); may saturate
//   even     as floor, with amax first rounded to the element's mantissa width (torchao EVEN)
//   rceil    2^ceil(log2(amax / max(element))): never saturates (cuBLAS and TE; torchao RCEIL)
enum class ScaleRule : std::uint8_t { floor, even, rceil };
// "floor", "even", "rceil"; throws std::invalid_argument.
ScaleRule parse_scale_rule(std::string_view name);
std::string_view scale_rule_name(ScaleRule rule);

struct QuantSpec {
  Format element = Format::e4m3();
  std::int64_t block_rows = 1;  // a block: block_rows x block_cols values of a [R, C] tensor
  std::int64_t block_cols = 32;
  ScaleFormat scale = ScaleFormat::e8m0;
  ScaleRule rule = ScaleRule::floor;  // e8m0 scales only
  Rounding rounding = Rounding::nearest_even;  // of the elements; stochastic draws from (seed, index)

  // "e4m3 1x32 e8m0 floor nearest"
  std::string str() const;
  // Throws std::invalid_argument for an element format other than e4m3, e5m2, e2m1, a block side below
  // 1 or above 65536, a rule other than floor for e4m3 scales, or rounding toward zero.
  void check() const;
  friend bool operator==(const QuantSpec&, const QuantSpec&) = default;
};

// The recipes by name: "mxfp8" (e4m3, 1x32, e8m0, floor), "mxfp8-rceil", "mxfp4" (e2m1, 1x32, e8m0,
// floor), "nvfp4" (e2m1, 1x16, e4m3 under an f32 tensor scale). Throws std::invalid_argument.
QuantSpec quant_spec(std::string_view recipe);

// A tensor quantized: element codes (one per value, in the element format's low bits), one scale code
// per block ([ceil(R / block_rows), ceil(C / block_cols)], row-major), and the tensor scale (1 but for
// e4m3 scales). values(i) = decode(code) * decode(block scale) * tensor_scale.
struct QuantizedBlocks {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scale_codes;
  float tensor_scale = 1;
  // How the values fared: finite values clipped to the element's largest, non-zero values that became
  // zero, and the amax of the input (NaN when it held one).
  std::int64_t saturated = 0, underflowed = 0;
  float amax = 0;
};

// Quantizes x, a row-major [rows, cols] f32 array, as `spec` says. `seed` keys stochastic rounding: the
// random bits of element i are stochastic_bits(seed, i), whatever the threads. Runs on the calling
// thread and OpenMP's (blocks of rows share no state). Throws std::invalid_argument for a bad spec or a
// size that does not fit.
QuantizedBlocks quantize_blocks(std::span<const float> x, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                                std::uint64_t seed = 0);
// The values the codes stand for, [rows, cols] f32: what a product of the quantized tensor sees. Without
// the tensor scale when `with_tensor_scale` is false (a product applies it to its result instead).
std::vector<float> dequantize_blocks(const QuantizedBlocks& q, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                                     bool with_tensor_scale = true);

// An E8M0 scale's value: 2^(bits - 127) (2^-127 is an f32 subnormal), NaN for 0xFF.
float decode_e8m0(std::uint8_t bits);
// The value of a block scale code of either format.
float decode_scale(ScaleFormat format, std::uint8_t bits);

// FP4 storage: two e2m1 codes a byte, the first value in the low nibble (torchao's pack_uint4, PyTorch's
// float4_e2m1fn_x2). An odd count leaves the last high nibble 0. unpack_fp4 gives `count` codes.
std::vector<std::uint8_t> pack_fp4(std::span<const std::uint8_t> codes);
std::vector<std::uint8_t> unpack_fp4(std::span<const std::uint8_t> packed, std::size_t count);

// The random Hadamard transform NVFP4 applies to the weight-gradient product's operands along their
// shared (inner) dimension: each group of 16 values along it becomes H16 diag(signs) x / 4, an orthonormal
// map, so the product of two transformed operands equals the product of the originals while the outliers
// spread over 16 values. `along_rows`: the groups run down the columns (the inner dimension is the rows);
// the dimension must be a multiple of 16. `signs`: bit i set flips value i of each group (fixed per run).
void hadamard16(std::span<float> x, std::int64_t rows, std::int64_t cols, bool along_rows, std::uint16_t signs);

}  // namespace mantissa
