// FP8 on the GPU, as on the CPU (emulated: fp8 values held exactly in bf16, multiplied by the bf16
// products): the blocks' amax, the quantizer (each value times its block's scale, rounded to the
// format's grid by the CPU's own rule, saturating; counted: clipped, lost to zero, not finite), and the
// scaled product (cuBLASLt with alpha, cuda_matmul.cu). The scales of current scaling are computed on
// the GPU by the CPU's own fp8_scale_for() (host and device code), so both devices pick the same scales
// and the amax never goes through the host. The microscaled recipes' block quantizer likewise runs the
// CPU's own scale rules (numeric/microscale_rules.h).
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "../../numeric/hadamard_rules.h"
#include "../../numeric/microscale_rules.h"
#include "../fit_quantize.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "mantissa/numeric/convert.h"

namespace mantissa::detail::cuda {
namespace {

struct Blocks {
  std::int64_t rows, cols, row, col;  // x's shape and strides
  std::int64_t block_rows, block_cols, per_row;  // per_row: blocks across a row of blocks
  __device__ std::int64_t block_of(std::int64_t r, std::int64_t c) const { return (r / block_rows) * per_row + c / block_cols; }
};

// Magnitudes as unsigned patterns: for non-negative floats the order of the patterns is the order of
// the values, so atomicMax on them takes the larger value.
__device__ void max_into(unsigned* at, float v) { atomicMax(at, __float_as_uint(v)); }

// The largest of the warp's patterns, into *at by its first lane (every lane takes part): the kernels
// below reduce a warp before their atomics, or a per-tensor pass over 12M values would make 12M atomic
// operations on one word.
__device__ void warp_max_into(unsigned* at, unsigned bits) {
  bits = __reduce_max_sync(0xffffffffU, bits);
  if ((threadIdx.x & 31) == 0 && bits > 0) atomicMax(at, bits);
}

// amax[block] = max finite |x| over the block's elements (amax zeroed before), one thread an element;
// one block (per-tensor scaling): each thread's largest, then the warp's.
__global__ void amax_kernel(Blocks b, ElementType tx, const void* x, unsigned* amax) {
  const std::int64_t n = b.rows * b.cols;
  const bool one_block = b.block_rows >= b.rows && b.block_cols >= b.cols;
  float mine = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / b.cols, c = i % b.cols;
    const float v = fabsf(load(tx, x, r * b.row + c * b.col));
    if (!isfinite(v) || !(v > 0)) continue;
    if (one_block) {
      mine = fmaxf(mine, v);
    } else {
      max_into(amax + b.block_of(r, c), v);
    }
  }
  if (one_block) warp_max_into(amax, __float_as_uint(mine));
}

// What the quantizer counts, on the GPU: kernels.h's Fp8Counts (the layout a caller reads later).
using Counters = Fp8Counts;

// A thread's counts added to the warp's, then into *c by the first lane (every lane takes part).
__device__ void add_warp_counts(Counters* c, unsigned long long saturated, unsigned long long underflowed,
                                unsigned long long nonfinite, unsigned amax_bits) {
  saturated = warp_sum(saturated);
  underflowed = warp_sum(underflowed);
  nonfinite = warp_sum(nonfinite);
  if ((threadIdx.x & 31) == 0) {
    if (saturated > 0) atomicAdd(reinterpret_cast<unsigned long long*>(&c->saturated), saturated);
    if (underflowed > 0) atomicAdd(reinterpret_cast<unsigned long long*>(&c->underflowed), underflowed);
    if (nonfinite > 0) atomicAdd(reinterpret_cast<unsigned long long*>(&c->nonfinite), nonfinite);
  }
  warp_max_into(&c->amax_bits, amax_bits);
}

struct Rules {
  EncodeParams saturating, plain;
  DecodeParams decode;
  float max_finite;
};

__global__ void quantize_kernel(Blocks b, ElementType tx, const void* x, const float* scales, Rules rules, bool dequantize,
                                ElementType to, void* out, std::int64_t orow, std::int64_t ocol, Counters* counters) {
  const std::int64_t n = b.rows * b.cols;
  unsigned long long saturated = 0, underflowed = 0, nonfinite = 0;
  float amax = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / b.cols, c = i % b.cols;
    const float v = load(tx, x, r * b.row + c * b.col);
    const float s = scales[b.block_of(r, c)];
    const float scaled = mul_as_cpu(v, s);
    float q = scaled;  // inf and NaN stay
    if (isfinite(v)) {
      amax = fmaxf(amax, fabsf(v));
      q = __uint_as_float(decode_bits(rules.decode, encode_value(rules.saturating, scaled)));
      // Saturated: the scaled value lay past the largest finite value by more than rounding reaches.
      if (fabsf(scaled) > rules.max_finite && __uint_as_float(decode_bits(rules.decode, encode_value(rules.plain, scaled))) != q) {
        ++saturated;
      }
      if (scaled != 0 && q == 0) ++underflowed;
      if (dequantize) q = q * (1.0f / s);
    } else {
      ++nonfinite;
    }
    store(to, out, r * orow + c * ocol, q);
  }
  add_warp_counts(counters, saturated, underflowed, nonfinite, __float_as_uint(amax));
}

// The microscaled rules (QuantSpec's floor, even and rceil E8M0 scales, NVFP4's E4M3 scales under an f32
// tensor scale) in three kernels, by the CPU's own rules (numeric/microscale_rules.h, host and device
// code): each block's amax and the tensor's, NaN if any value is NaN (the patterns of magnitudes order
// NaN above inf, so atomicMax keeps it); each block's scale; the values.
__global__ void block_amax_kernel(Blocks b, ElementType tx, const void* x, unsigned* amax, Counters* totals) {
  const std::int64_t n = b.rows * b.cols;
  unsigned mine = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / b.cols, c = i % b.cols;
    const unsigned bits = __float_as_uint(fabsf(load(tx, x, r * b.row + c * b.col)));
    if (bits > 0) atomicMax(amax + b.block_of(r, c), bits);
    mine = max(mine, bits);
  }
  warp_max_into(&totals->amax_bits, mine);
}

struct MicroscaleRules {
  ElementRule element;
  bool e4m3_scales, rceil, even, te;  // te: Transformer Engine's NVFP4 rule (QuantSpec's te)
  EncodeParams e4m3;
  DecodeParams e4m3_decode;
};

// Each block's multiplier and the value of its scale (one thread a block).
__global__ void block_scales_kernel(std::int64_t blocks, const unsigned* amax, MicroscaleRules rules, const Counters* totals,
                                    float* multiply, float* scale_value) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= blocks) return;
  const float a = __uint_as_float(amax[i]);
  BlockScale s;
  if (rules.e4m3_scales) {
    const float tensor_amax = __uint_as_float(totals->amax_bits);
    s = rules.te ? te_e4m3_block_scale(a, tensor_amax, rules.element, rules.e4m3, rules.e4m3_decode)
                 : e4m3_block_scale(a, nvfp4_tensor_scale(tensor_amax), rules.element, rules.e4m3, rules.e4m3_decode);
    scale_value[i] = __uint_as_float(decode_bits(rules.e4m3_decode, s.code));
  } else {
    s = rules.rceil ? e8m0_rceil(a, rules.element) : e8m0_floor(a, rules.even, rules.element);
    scale_value[i] = e8m0_value(s.code);
  }
  multiply[i] = s.multiply;
}

// Each value times its block's multiplier, clamped to the element's range (NaN kept), rounded by the one
// rule (stochastically from (seed, row-major index) if asked), and stored as element times block scale.
__global__ void block_encode_kernel(Blocks b, ElementType tx, const void* x, const float* multiply, const float* scale_value,
                                    EncodeParams encode, DecodeParams decode, float top, std::uint32_t mask, std::uint64_t seed,
                                    bool te, ElementType to, void* out, std::int64_t orow, std::int64_t ocol, Counters* totals) {
  const std::int64_t n = b.rows * b.cols;
  unsigned long long saturated = 0, underflowed = 0, nonfinite = 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / b.cols, c = i % b.cols;
    const std::int64_t block = b.block_of(r, c);
    const float v = load(tx, x, r * b.row + c * b.col);
    const float y = mul_as_cpu(v, multiply[block]);
    const bool finite = fabsf(v) <= 3.40282347e38f;
    saturated += (finite && fabsf(y) > top) ? 1 : 0;
    // As std::min(std::max(y, -top), top): NaN stays.
    const float low = y < -top ? -top : y;
    const float clamped = top < low ? top : low;
    const auto u = static_cast<std::uint64_t>(i);
    const std::uint32_t random =
        encode.rounding == Rounding::stochastic ? random_bits(stochastic_key(seed, static_cast<std::uint32_t>(u >> 32)), static_cast<std::uint32_t>(u)) : 0;
    std::uint32_t code = encode_bits(encode, __float_as_uint(clamped), random);
    if (te && (y != y || (y == 0 && signbit(y)))) code = 0;  // TE's E2M1 cast: NaN and -0 give code 0
    underflowed += (v != 0 && finite && (code & mask) == 0) ? 1 : 0;
    nonfinite += finite ? 0 : 1;
    store(to, out, r * orow + c * ocol, mul_as_cpu(__uint_as_float(decode_bits(decode, code)), scale_value[block]));
  }
  add_warp_counts(totals, saturated, underflowed, nonfinite, 0);
}

// The stats of `count` values from a quantizer's totals: whole, or only the count where the caller reads
// the counts itself (BlockQuantize's `counts`).
Fp8QuantizeStats stats_from(const DeviceTotals<Counters>& totals, std::int64_t count) {
  return totals.left() ? Fp8QuantizeStats{.count = count} : stats_of(totals.read(), count);
}

Blocks blocks_of(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& per_block) {
  return {x.size(0), x.size(1), x.strides()[0], x.strides()[1], block_rows, block_cols, per_block.size(1)};
}

void check_fp8(const char* what, const Tensor& x, const Tensor& per_block) {
  refuse_f64(what, x);
  if (x.dim() != 2 || per_block.dtype() != DType::f32 || !per_block.is_contiguous()) {
    throw std::invalid_argument(std::string(what) + ": x [R, C] and contiguous f32 blocks expected");
  }
}

// Current scaling's scales in place of the blocks' amax (float patterns), by the CPU's own fp8_scale_for.
__global__ void scales_kernel(float* amax_then_scales, std::int64_t n, double max_finite, int margin, bool power_of_2) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    amax_then_scales[i] = fp8_scale_for(amax_then_scales[i], max_finite, margin, power_of_2);
  }
}

// NVFP4's Hadamard transform: a thread per (group of 16 rows, column), neighbouring threads on
// neighbouring columns; the group's arithmetic is the host's (numeric/hadamard_rules.h), so the bits are.
__global__ void hadamard_rows_kernel(std::int64_t groups, std::int64_t cols, Rows x, ElementType tx, const void* xp,
                                     std::uint16_t signs, float* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < groups * cols;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t g = i / cols, c = i - g * cols;
    float v[16];
    for (int k = 0; k < 16; ++k) v[k] = load(tx, xp, (g * 16 + k) * x.row + c * x.col);
    hadamard16_group(v, signs);
    for (int k = 0; k < 16; ++k) out[(g * 16 + k) * cols + c] = v[k];
  }
}

}  // namespace

void fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax) {
  check_fp8("fp8_amax", x, amax);
  check(cudaMemsetAsync(amax.data(), 0, static_cast<std::size_t>(amax.numel()) * 4, stream()), "fp8_amax");
  if (x.numel() == 0) return;
  amax_kernel<<<blocks_for(x.numel()), kThreads, 0, stream()>>>(blocks_of(x, block_rows, block_cols, amax),
                                                                 element_type(x.dtype()), x.data(),
                                                                 static_cast<unsigned*>(amax.data()));
  check_launch("fp8_amax");
}

namespace {

// Fp8Quantize and Fp8QuantizeCurrent with BlockQuantize's `counts` (undefined: read back here).
Fp8QuantizeStats quantize_counted(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                                  std::int64_t block_cols, bool dequantize, const Tensor& out, const Tensor& counts) {
  check_fp8("fp8_quantize", x, scales);
  if (x.numel() == 0) return {};
  const Rules rules{make_encode_params(format, CastOptions{Rounding::nearest_even, /*saturate=*/true, 0}),
                    make_encode_params(format, CastOptions{}), make_decode_params(format),
                    decode(format, format.max_finite_bits())};
  const DeviceTotals<Counters> counters(x.device(), counts);
  quantize_kernel<<<blocks_for(x.numel()), kThreads, 0, stream()>>>(
      blocks_of(x, block_rows, block_cols, scales), element_type(x.dtype()), x.data(),
      static_cast<const float*>(scales.data()), rules, dequantize, element_type(out.dtype()), out.data(), out.strides()[0],
      out.strides()[1], counters.get());
  check_launch("fp8_quantize");
  return stats_from(counters, x.numel());
}

Fp8QuantizeStats quantize_current_counted(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols,
                                          int margin, bool power_of_2, bool dequantize, const Tensor& scales, const Tensor& out,
                                          const Tensor& counts) {
  fp8_amax(x, block_rows, block_cols, scales);
  const std::int64_t n = scales.numel();
  scales_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<float*>(scales.data()), n,
                                                           static_cast<double>(decode(format, format.max_finite_bits())),
                                                           margin, power_of_2);
  check_launch("fp8_quantize_current");
  return quantize_counted(x, format, scales, block_rows, block_cols, dequantize, out, counts);
}

// BlockQuantize's factor (kernels.h), written by one thread: 1 / *scale in f64 where a scale is given,
// NVFP4's tensor scale of the amax pattern where that is (by TE's rule where `te`), else `value`. The
// host never reads it.
__global__ void factor_kernel(const float* scale, const unsigned* amax_bits, bool te, double value, double* factor) {
  if (scale != nullptr) {
    value = 1.0 / static_cast<double>(*scale);
  } else if (amax_bits != nullptr) {
    const float a = __uint_as_float(*amax_bits);
    value = static_cast<double>(te ? te_nvfp4_tensor_scale(a) : nvfp4_tensor_scale(a));
  }
  *factor = value;
}

void write_factor(const Tensor& factor, const float* scale, const unsigned* amax_bits, double value, bool te = false) {
  factor_kernel<<<1, 1, 0, stream()>>>(scale, amax_bits, te, value, static_cast<double*>(factor.data()));
  check_launch("block_quantize");
}

// fit_quantize's set_factor on the GPU.
void set_factor(const Tensor& factor, const Tensor& scale, double value) {
  write_factor(factor, scale.defined() ? static_cast<const float*>(scale.data()) : nullptr, nullptr, value);
}

}  // namespace

Fp8QuantizeStats fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                              std::int64_t block_cols, bool dequantize, const Tensor& out) {
  return quantize_counted(x, format, scales, block_rows, block_cols, dequantize, out, Tensor());
}

Fp8QuantizeStats fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols,
                                      int margin, bool power_of_2, bool dequantize, const Tensor& scales, const Tensor& out) {
  return quantize_current_counted(x, format, block_rows, block_cols, margin, power_of_2, dequantize, scales, out, Tensor());
}

namespace {

// The microscaled rules: block amaxes, then scales, then values, three launches; the counts read back
// unless the caller reads them, and NVFP4's amax for its tensor scale unless the caller gave a factor
// for it to be left in.
Fp8QuantizeStats microscaled_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, const Tensor& out,
                                      const Tensor& counts, const Tensor& factor) {
  spec.check();
  refuse_f64("block_quantize", x);
  if (x.dim() != 2) throw std::invalid_argument("block_quantize: x [R, C] expected");
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const std::int64_t nbr = (rows + spec.block_rows - 1) / spec.block_rows, nbc = (cols + spec.block_cols - 1) / spec.block_cols;
  if (x.numel() == 0) {
    if (factor.defined()) write_factor(factor, nullptr, nullptr, 1.0);
    return {};
  }
  const Blocks b{rows, cols, x.strides()[0], x.strides()[1], spec.block_rows, spec.block_cols, nbc};
  const std::int64_t blocks = nbr * nbc;
  // Zeroed scratch: the blocks' amax patterns; then each block's multiplier and scale value.
  const Tensor amax = Tensor::zeros({blocks * 4}, DType::e4m3, x.device());
  const Tensor multiply = Tensor::empty({blocks}, DType::f32, x.device());
  const Tensor scale_value = Tensor::empty({blocks}, DType::f32, x.device());
  const DeviceTotals<Counters> totals(x.device(), counts);
  block_amax_kernel<<<blocks_for(x.numel()), kThreads, 0, stream()>>>(b, element_type(x.dtype()), x.data(),
                                                                       static_cast<unsigned*>(amax.data()), totals.get());
  check_launch("block_quantize");
  const float top = decode(spec.element, spec.element.max_finite_bits());
  const MicroscaleRules rules{{top, std::ilogb(top), spec.element.man_bits()}, spec.scale == ScaleFormat::e4m3,
                              spec.rule == ScaleRule::rceil, spec.rule == ScaleRule::even, spec.rule == ScaleRule::te,
                              make_encode_params(Format::e4m3(), CastOptions{}), make_decode_params(Format::e4m3())};
  block_scales_kernel<<<blocks_for(blocks), kThreads, 0, stream()>>>(blocks, static_cast<const unsigned*>(amax.data()), rules,
                                                                      totals.get(), static_cast<float*>(multiply.data()),
                                                                      static_cast<float*>(scale_value.data()));
  check_launch("block_quantize");
  block_encode_kernel<<<blocks_for(x.numel()), kThreads, 0, stream()>>>(
      b, element_type(x.dtype()), x.data(), static_cast<const float*>(multiply.data()), static_cast<const float*>(scale_value.data()),
      make_encode_params(spec.element, CastOptions{.rounding = spec.rounding, .saturate = true}), make_decode_params(spec.element),
      top, spec.element.magnitude_mask(), seed, spec.rule == ScaleRule::te, element_type(out.dtype()), out.data(), out.strides()[0],
      out.strides()[1],
      totals.get());
  check_launch("block_quantize");
  const bool tensor_scale = spec.scale == ScaleFormat::e4m3;  // NVFP4's
  const bool te = spec.rule == ScaleRule::te;
  if (factor.defined()) write_factor(factor, nullptr, tensor_scale ? &totals.get()->amax_bits : nullptr, 1.0, te);
  Fp8QuantizeStats st = stats_from(totals, x.numel());
  if (tensor_scale && !factor.defined()) {
    const float a = std::bit_cast<float>(totals.read().amax_bits);
    st.tensor_scale = te ? te_nvfp4_tensor_scale(a) : nvfp4_tensor_scale(a);
  }
  return st;
}

}  // namespace

void hadamard_rows(const Tensor& x, std::uint16_t signs, const Tensor& out) {
  refuse_f64("hadamard_rows", x);
  if (x.dim() != 2 || x.size(0) % 16 != 0 || out.dtype() != DType::f32 || !out.is_contiguous() || out.shape() != x.shape()) {
    throw std::invalid_argument("hadamard_rows: x [R, C] with R a multiple of 16, out f32 contiguous of its shape");
  }
  const std::int64_t groups = x.size(0) / 16, cols = x.size(1);
  if (groups * cols == 0) return;
  hadamard_rows_kernel<<<blocks_for(groups * cols), kThreads, 0, stream()>>>(groups, cols, rows_of(x), element_type(x.dtype()),
                                                                             x.data(), signs, out.data_as<float>());
  check_launch("hadamard_rows");
}

Fp8QuantizeStats block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale,
                                const Tensor& out, const Tensor& counts, const Tensor& factor) {
  check_block_quantize_places(x, spec, out, counts, factor);
  return block_quantize_by(
      x, spec, given_scale, out, factor, [&](const auto&... a) { return quantize_current_counted(a..., counts); },
      [&](const auto&... a) { return quantize_counted(a..., counts); }, set_factor,
      [&] { return microscaled_quantize(x, spec, seed, out, counts, factor); });
}

}  // namespace mantissa::detail::cuda
