// FP8 on the GPU, as on the CPU (emulated: fp8 values held exactly in bf16, multiplied by the bf16
// products): the blocks' amax, the quantizer (each value times its block's scale, rounded to the
// format's grid by the CPU's own rule, saturating; counted: clipped, lost to zero, not finite), and the
// scaled product (cuBLASLt with alpha, cuda_matmul.cu). The scales of current scaling are computed on
// the GPU by the CPU's own fp8_scale_for() (host and device code), so both devices pick the same scales
// and the amax never goes through the host.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

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

// amax[block] = max finite |x| over the block's elements (amax zeroed before), one thread an element.
__global__ void amax_kernel(Blocks b, ElementType tx, const void* x, unsigned* amax) {
  const std::int64_t n = b.rows * b.cols;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / b.cols, c = i % b.cols;
    const float v = fabsf(load(tx, x, r * b.row + c * b.col));
    if (isfinite(v) && v > 0) max_into(amax + b.block_of(r, c), v);
  }
}

// What the quantizer counts, on the GPU.
struct Counters {
  unsigned long long saturated, underflowed, nonfinite;
  unsigned amax;  // a float's pattern
};

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
    const float scaled = v * s;
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
  if (saturated > 0) atomicAdd(&counters->saturated, saturated);
  if (underflowed > 0) atomicAdd(&counters->underflowed, underflowed);
  if (nonfinite > 0) atomicAdd(&counters->nonfinite, nonfinite);
  if (amax > 0) max_into(&counters->amax, amax);
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

Fp8QuantizeStats fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                              std::int64_t block_cols, bool dequantize, const Tensor& out) {
  check_fp8("fp8_quantize", x, scales);
  Fp8QuantizeStats st;
  st.count = x.numel();
  if (x.numel() == 0) return st;
  const Rules rules{make_encode_params(format, CastOptions{Rounding::nearest_even, /*saturate=*/true, 0}),
                    make_encode_params(format, CastOptions{}), make_decode_params(format),
                    decode(format, format.max_finite_bits())};
  const DeviceTotals<Counters> counters(x.device());
  quantize_kernel<<<blocks_for(x.numel()), kThreads, 0, stream()>>>(
      blocks_of(x, block_rows, block_cols, scales), element_type(x.dtype()), x.data(),
      static_cast<const float*>(scales.data()), rules, dequantize, element_type(out.dtype()), out.data(), out.strides()[0],
      out.strides()[1], counters.get());
  check_launch("fp8_quantize");
  const Counters host = counters.read();
  st.saturated = static_cast<std::int64_t>(host.saturated);
  st.underflowed = static_cast<std::int64_t>(host.underflowed);
  st.nonfinite = static_cast<std::int64_t>(host.nonfinite);
  float amax = 0;
  std::memcpy(&amax, &host.amax, sizeof amax);
  st.amax = amax;
  return st;
}

Fp8QuantizeStats fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols,
                                      int margin, bool power_of_2, bool dequantize, const Tensor& scales, const Tensor& out) {
  fp8_amax(x, block_rows, block_cols, scales);
  const std::int64_t n = scales.numel();
  scales_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(static_cast<float*>(scales.data()), n,
                                                           static_cast<double>(decode(format, format.max_finite_bits())),
                                                           margin, power_of_2);
  check_launch("fp8_quantize_current");
  return fp8_quantize(x, format, scales, block_rows, block_cols, dequantize, out);
}

Fp8QuantizeStats block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t /*seed*/, float given_scale,
                                const Tensor& out) {
  if (spec.rule != ScaleRule::fit) {
    throw std::invalid_argument("block_quantize: no GPU kernel for " + spec.str() +
                                " yet (the microscaled recipes run on the CPU)");
  }
  return fit_quantize(x, spec, given_scale, out, fp8_quantize_current, fp8_quantize);
}

}  // namespace mantissa::detail::cuda
