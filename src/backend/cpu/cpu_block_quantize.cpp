// The block quantizer on the CPU: FP8's fit rule by the vectorized FP8 quantizer (cpu_fp8.cpp); the
// microscaled rules by the one definition (numeric/microscale.cpp) streaming strips of blocks: each
// strip's rows loaded as f32, quantized and scaled back into bf16 while in cache, threaded over strips.
#include <algorithm>
#include <cmath>
#include <limits>
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
  const auto load = [&](std::int64_t r, float* row) {
    for (std::int64_t at = 0; at < cols; at += kRowBlock) {
      load_f32(x, r * x.strides()[0] + at * x.strides()[1], x.strides()[1], std::min(kRowBlock, cols - at), row + at);
    }
  };
  // The values back as each row is quantized: element times block scale, exact in f32 and in bf16.
  float element[256];
  for (std::uint32_t b = 0; b < 256; ++b) element[b] = b < (2U << (spec.element.bits() - 1)) ? decode(spec.element, b) : 0.0f;
  const auto emit = [&](std::int64_t r, const std::uint8_t* codes, const float* scale_values) {
    thread_local std::vector<float> back;
    back.resize(static_cast<std::size_t>(cols));
    for (std::int64_t c = 0; c < cols; ++c) back[static_cast<std::size_t>(c)] = element[codes[c]] * scale_values[c];
    store_row(out, r, back);
  };
  // NVFP4's tensor scale needs the amax first: one pass of its own.
  const auto amax = [&] {
    float m = 0;
    bool nan = false;
#pragma omp parallel reduction(max : m) reduction(|| : nan) if (rows * cols >= 65536)
    {
      std::vector<float> row(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) {
        load(r, row.data());
        for (const float v : row) {
          nan = nan || v != v;
          m = std::max(m, std::fabs(v));
        }
      }
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : m;
  };
  const QuantizedBlocks q = quantize_block_rows(rows, cols, spec, seed, {load, emit, amax});
  return {.amax = q.amax, .saturated = q.saturated, .underflowed = q.underflowed, .nonfinite = q.nonfinite,
          .count = rows * cols, .tensor_scale = q.tensor_scale};
}

}  // namespace mantissa::detail
