// The block quantizer on the CPU: FP8's fit rule by the vectorized FP8 quantizer (cpu_fp8.cpp); the
// microscaled rules with the operand gathered into f32 rows, quantized by the one definition
// (numeric/microscale.cpp, threaded over strips of blocks), and scaled back into bf16 rows in parallel.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "../fit_quantize.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/convert.h"
#include "rows.h"

namespace mantissa::detail {

Fp8QuantizeStats cpu_block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale,
                                    const Tensor& out) {
  if (spec.rule == ScaleRule::fit) return fit_quantize(x, spec, given_scale, out, cpu_fp8_quantize_current, cpu_fp8_quantize);
  if (given_scale != 0) throw std::invalid_argument("block_quantize: only the fit rule takes a given scale");
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t at = 0; at < cols; at += kRowBlock) {
      load_f32(x, r * x.strides()[0] + at * x.strides()[1], x.strides()[1], std::min(kRowBlock, cols - at),
               v.data() + r * cols + at);
    }
  }
  const QuantizedBlocks q = quantize_blocks(v, rows, cols, spec, seed);
  // The values back: element times block scale, exact in f32 and in bf16.
  float element[256];
  for (std::uint32_t b = 0; b < 256; ++b) element[b] = b < (2U << (spec.element.bits() - 1)) ? decode(spec.element, b) : 0.0f;
  const std::int64_t nbc = (cols + spec.block_cols - 1) / spec.block_cols;
  std::vector<float> block_scale(q.scale_codes.size());
  for (std::size_t b = 0; b < block_scale.size(); ++b) block_scale[b] = decode_scale(spec.scale, q.scale_codes[b]);
  std::int64_t nonfinite = 0;
#pragma omp parallel for schedule(static) reduction(+ : nonfinite) if (rows * cols >= 65536)
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<float> back(static_cast<std::size_t>(cols));
    const float* scales = block_scale.data() + (r / spec.block_rows) * nbc;
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      nonfinite += !std::isfinite(v[i]);
      back[static_cast<std::size_t>(c)] = element[q.codes[i]] * scales[c / spec.block_cols];
    }
    store_row(out, r, back);
  }
  return {.amax = q.amax, .saturated = q.saturated, .underflowed = q.underflowed, .nonfinite = nonfinite,
          .count = rows * cols, .tensor_scale = q.tensor_scale};
}

}  // namespace mantissa::detail
