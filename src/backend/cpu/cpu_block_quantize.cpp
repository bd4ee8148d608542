// The block quantizer on the CPU: FP8's fit rule by the vectorized FP8 quantizer (cpu_fp8.cpp); the
// microscaled rules by the one definition (numeric/microscale.cpp) streaming strips of blocks: each
// strip's rows loaded as f32, quantized and scaled back into bf16 while in cache, threaded over strips.
// And NVFP4's Hadamard transform of the rows, by the definition (hadamard16).
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "../fit_quantize.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/convert.h"
#include "rows.h"

namespace mantissa::detail {

Fp8QuantizeStats cpu_block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale,
                                    const Tensor& out, const Tensor& counts, const Tensor& factor) {
  check_block_quantize_places(x, spec, out, counts, factor);
  return leave_counts(block_quantize_by(x, spec, given_scale, out, factor, cpu_fp8_quantize_current, cpu_fp8_quantize,
                                        set_factor_on_host, [&] {
    const std::int64_t rows = x.size(0), cols = x.size(1);
    // The values back as each row is quantized: element times block scale, exact in f32 and in bf16.
    float element[256];
    for (std::uint32_t b = 0; b < 256; ++b) element[b] = b < (2U << (spec.element.bits() - 1)) ? decode(spec.element, b) : 0.0f;
    const auto emit = [&](std::int64_t r, const std::uint8_t* codes, const float* scale_values) {
      thread_local std::vector<float> back;
      back.resize(static_cast<std::size_t>(cols));
      for (std::int64_t c = 0; c < cols; ++c) back[static_cast<std::size_t>(c)] = element[codes[c]] * scale_values[c];
      store_row(out, r, back);
    };
    const auto load = [&](std::int64_t r, float* row) { load_row(x, r, row); };
    const QuantizedBlocks q = quantize_block_rows(rows, cols, spec, seed, {load, emit, {}});
    return leave_factor({.amax = q.amax, .saturated = q.saturated, .underflowed = q.underflowed, .nonfinite = q.nonfinite,
                         .count = rows * cols, .tensor_scale = q.tensor_scale},
                        factor);
  }), counts);
}

void cpu_hadamard_rows(const Tensor& x, std::uint16_t signs, const Tensor& out) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
  for (std::int64_t r = 0; r < rows; ++r) load_row(x, r, out.data_as<float>() + r * cols);
  hadamard16(std::span(out.data_as<float>(), static_cast<std::size_t>(out.numel())), rows, cols, true, signs);
}

}  // namespace mantissa::detail
