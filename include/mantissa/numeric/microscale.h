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
#include <functional>
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
  f32,   // any f32: one scale for the whole tensor (FP8's per-tensor recipes, delayed and current)
};

// How a scale is fitted to the block's amax. For E8M0 scales, as torchao's ScaleCalculationMode says:
//   floor    2^(floor(log2 amax) - emax(element)): OCP MX 1.0's rule (torchao FLOOR); may saturate
//   even     as floor, with amax first rounded to the element's mantissa width (torchao EVEN)
//   rceil    2^ceil(log2(amax / max(element))): never saturates (cuBLAS and TE; torchao RCEIL)
// and Transformer Engine's FP8 rule, for f32 scales and E8M0 ones (its per-tensor and block recipes):
//   fit      values are multiplied by (max(element) / amax) / 2^margin, amax the largest FINITE
//            magnitude (1 where there is none); for E8M0 the largest power of 2 not above that, kept
//            within 2^-100..2^100. Non-finite values pass through unclipped, so the loss scaler still
//            sees an overflowed gradient; the elements round to nearest even.
// E4M3 scales under an f32 tensor scale (NVFP4) have two rules: floor stands there for torchao's
// (block amax / max(element) / tensor scale, clamped to [2^-6, 448]), and
//   te       Transformer Engine's: encode scale (448 * max(element)) / amax, block scale block amax x
//            (encode x 1 / max(element)) clamped to 448 only (subnormal or 0 allowed), values times
//            1 / (scale x 1 / encode); NaN values give code 0, as TE's E2M1 cast does.
enum class ScaleRule : std::uint8_t { floor, even, rceil, fit, te };
// "floor", "even", "rceil", "fit", "te"; throws std::invalid_argument.
ScaleRule parse_scale_rule(std::string_view name);
std::string_view scale_rule_name(ScaleRule rule);

struct QuantSpec {
  Format element = Format::e4m3();
  std::int64_t block_rows = 1;  // a block: block_rows x block_cols values of a [R, C] tensor;
  std::int64_t block_cols = 32;  // 0 x 0: the whole tensor, whatever its shape (f32 scales)
  ScaleFormat scale = ScaleFormat::e8m0;
  ScaleRule rule = ScaleRule::floor;  // e4m3 scales: floor (torchao's) or te; f32 scales: fit only
  Rounding rounding = Rounding::nearest_even;  // of the elements; stochastic draws from (seed, index)
  int margin = 0;  // the fit rule's headroom: scales divided by 2^margin

  // "e4m3 1x32 e8m0 floor nearest"; "e4m3 tensor f32 fit nearest" (a margin shows as "margin 2");
  // "e2m1 1x16 e4m3*f32 nearest" (torchao's rule goes unsaid), "e2m1 1x16 e4m3*f32 te nearest"
  std::string str() const;
  // The spec str() wrote (words in that order; "margin N" optional). Throws std::invalid_argument naming
  // the word it could not read, or what check() refuses.
  static QuantSpec parse(std::string_view text);
  // Throws std::invalid_argument for an element format other than e4m3, e5m2, e2m1, e2m3, e3m2, a block side below
  // 1 or above 65536 (but 0 x 0 with f32 scales, which need it), e4m3 scales with a rule other than
  // floor or te, te with other scales, the fit rule with e4m3 scales, an element other than fp8's or stochastic rounding, a margin outside 0..30
  // or without the fit rule, or rounding toward zero.
  void check() const;
  // The whole tensor as one block (0 x 0).
  bool per_tensor() const { return block_rows == 0 && block_cols == 0; }
  // The quantized values stay on the element's grid (one f32 scale per tensor, fitted: the product
  // applies the scale), so they can be held in the element's own dtype where it has one (e4m3, e5m2).
  bool stays_on_grid() const { return per_tensor() && scale == ScaleFormat::f32 && rule == ScaleRule::fit; }
  // Quantizing a tensor's transpose with the spec gives the transposed result (square blocks, or the
  // whole tensor, and nearest rounding): one quantization serves a product along either dimension.
  bool turns() const { return block_rows == block_cols && rounding == Rounding::nearest_even; }
  friend bool operator==(const QuantSpec&, const QuantSpec&) = default;
};

// A microscaled recipe's forward spec by the recipe table's name (mantissa/numeric/recipes.h): "mxfp8"
// is e4m3 1x32 e8m0 floor (OCP's rule), "nvfp4" e2m1 1x16 e4m3*f32; an E8M0 one with "-rceil"
// ("mxfp8-rceil") for rceil scales. Throws std::invalid_argument.
QuantSpec quant_spec(std::string_view name);

// A tensor quantized: element codes (one per value, in the element format's low bits), one scale code
// per block ([ceil(R / block_rows), ceil(C / block_cols)], row-major), and the tensor scale (1 but for
// e4m3 scales). values(i) = decode(code) * decode(block scale) * tensor_scale.
struct QuantizedBlocks {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scale_codes;
  float tensor_scale = 1;
  // How the values fared: finite values clipped to the element's largest, non-zero values that became
  // zero, values that were not finite, and the amax of the input (NaN when it held one).
  std::int64_t saturated = 0, underflowed = 0, nonfinite = 0;
  float amax = 0;
};

// Quantizes x, a row-major [rows, cols] f32 array, as `spec` says (a block-scaled spec: the fit rule is
// run by the BlockQuantize kernel, whose oracle is the FP8 quantizer's written-out definition). `seed` keys stochastic rounding: the
// random bits of element i are stochastic_bits(seed, i), whatever the threads. Runs on the calling
// thread and OpenMP's (blocks of rows share no state). Throws std::invalid_argument for a bad spec or a
// size that does not fit.
QuantizedBlocks quantize_blocks(std::span<const float> x, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                                std::uint64_t seed = 0);
namespace detail {
// The quantizer streaming rows, for kernels that read and write tensors of their own: the same codes,
// scales and counts as quantize_blocks, each strip of blocks loaded, quantized and handed on while it is
// in cache. load(r, row) fills row r as f32; emit(r, codes, scale_values) takes row r's codes and each
// column's block scale value (a code's value times it is the value, the tensor scale apart), from the
// quantizing threads, a row at a time; amax() is the tensor's largest magnitude (NaN if any value is
// NaN), asked first for two-level scales only; left empty, the quantizer finds it over load()'s rows.
// The result's codes are empty.
struct BlockRows {
  std::function<void(std::int64_t r, float* row)> load;
  std::function<void(std::int64_t r, const std::uint8_t* codes, const float* scale_values)> emit;
  std::function<float()> amax;
};
QuantizedBlocks quantize_block_rows(std::int64_t rows, std::int64_t cols, const QuantSpec& spec, std::uint64_t seed,
                                    const BlockRows& io);
}  // namespace detail

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
