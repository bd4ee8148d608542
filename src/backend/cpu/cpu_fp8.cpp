// FP8 on the CPU by exact emulation: the quantizer rounds f32 values to an fp8 format's grid with a few
// integer and float operations per value, vectorized (no table, no branch), and writes the result as
// bf16, which holds every e4m3 and e5m2 value (and every power-of-2 multiple of one) exactly. The
// products then run as bf16 products with f32 accumulation (cpu_matmul.cpp): the numbers an FP8 tensor
// core gives, up to the order of the f32 additions. Tested bit for bit against reference_fp8.cpp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_kernels.h"
#include "mantissa/numeric/convert.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// The format's grid, as the rounding loop needs it.
struct Grid {
  float max_finite;    // 448 (e4m3), 57344 (e5m2)
  float min_normal;    // 2^emin
  float magic;         // 2^(emin - M + 23): adding it rounds a subnormal to the format's quantum
  std::uint32_t shift; // 23 - M: the f32 mantissa bits a normal value loses
};

Grid grid_of(Format f) {
  return {decode(f, f.max_finite_bits()), std::ldexp(1.0f, f.min_exponent()),
          std::ldexp(1.0f, f.min_exponent() - f.man_bits() + 23), static_cast<std::uint32_t>(23 - f.man_bits())};
}

struct Counts {
  std::uint32_t amax_bits = 0;  // of finite |x|: non-negative floats order as their bit patterns
  std::int64_t saturated = 0, underflowed = 0, nonfinite = 0;
};

// x[i] * s[i] rounded to the grid, as bf16 bits; the loop GCC vectorizes (compiled per ISA).
template <bool Dequantize>
MANTISSA_VECTOR_CLONES void quantize_span(const float* x, const float* s, const float* inv, std::int64_t n, Grid g,
                                          std::uint16_t* out, Counts& c) {
  const std::uint32_t half = (std::uint32_t{1} << (g.shift - 1)) - 1;
  const std::uint32_t keep = ~((std::uint32_t{1} << g.shift) - 1);
  std::uint32_t amax = c.amax_bits;
  std::int64_t saturated = 0, underflowed = 0, nonfinite = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t xb = std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffU;
    const bool finite = xb < 0x7f800000U;
    amax = std::max(amax, finite ? xb : 0U);
    const float v = x[i] * s[i];
    const std::uint32_t vb = std::bit_cast<std::uint32_t>(v);
    const float a = std::bit_cast<float>(vb & 0x7fffffffU);
    // Normal range: round the f32 mantissa to M bits, to nearest even (a carry moves into the exponent).
    const std::uint32_t ab = vb & 0x7fffffffU;
    const float normal = std::bit_cast<float>((ab + half + ((ab >> g.shift) & 1U)) & keep);
    // Subnormal range: the float addition rounds at the format's quantum.
    const float sub = (a + g.magic) - g.magic;
    float q = a < g.min_normal ? sub : normal;
    saturated += finite && q > g.max_finite ? 1 : 0;
    q = std::min(q, g.max_finite);
    underflowed += finite && a != 0.0f && q == 0.0f ? 1 : 0;
    nonfinite += finite ? 0 : 1;
    if constexpr (Dequantize) q = q * inv[i];
    const std::uint32_t qb = (std::bit_cast<std::uint32_t>(q) & 0x7fffffffU) | (vb & 0x80000000U);
    // Finite results are exact in bf16; inf keeps its bits, NaN becomes bf16's quiet NaN.
    out[i] = static_cast<std::uint16_t>(finite ? qb >> 16 : v != v ? 0x7fc0U | ((vb >> 16) & 0x8000U) : vb >> 16);
  }
  c.amax_bits = amax;
  c.saturated += saturated;
  c.underflowed += underflowed;
  c.nonfinite += nonfinite;
}

MANTISSA_VECTOR_CLONES std::uint32_t amax_span(const float* x, std::int64_t n, std::uint32_t amax) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t xb = std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffU;
    amax = std::max(amax, xb < 0x7f800000U ? xb : 0U);
  }
  return amax;
}

// Row r of the [R, C] view x as f32.
void load_row_f32(const Tensor& x, std::int64_t r, float* row) {
  const std::int64_t cols = x.size(1);
  for (std::int64_t at = 0; at < cols; at += kRowBlock) {
    load_f32(x, r * x.strides()[0] + at * x.strides()[1], x.strides()[1], std::min(kRowBlock, cols - at), row + at);
  }
}

// Quantizes `rows` rows of `cols` f32 values at `in` (row after row) into out's rows from r0 on, with the
// per-column scales (and inverses) of the strip.
void quantize_rows(const float* in, std::int64_t rows, std::int64_t cols, const float* scale, const float* inverse, Grid g,
                   bool dequantize, const Tensor& out, std::int64_t r0, Counts& c) {
  auto* dst = out.data_as<std::uint16_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint16_t* o = dst + (r0 + r) * out.strides()[0];
    if (dequantize) {
      quantize_span<true>(in + r * cols, scale, inverse, cols, g, o, c);
    } else {
      quantize_span<false>(in + r * cols, scale, inverse, cols, g, o, c);
    }
  }
}

void merge(Counts& total, const Counts& mine) {
  total.amax_bits = std::max(total.amax_bits, mine.amax_bits);
  total.saturated += mine.saturated;
  total.underflowed += mine.underflowed;
  total.nonfinite += mine.nonfinite;
}

Fp8QuantizeStats stats_of(const Counts& c, std::int64_t count) {
  return {std::bit_cast<float>(c.amax_bits), c.saturated, c.underflowed, c.nonfinite, count};
}

// The scales of one strip of blocks (a row of the scales tensor) spread over the columns, with inverses.
void spread(const float* block_scales, std::int64_t cols, std::int64_t block_cols, std::vector<float>& scale,
            std::vector<float>& inverse) {
  for (std::int64_t c = 0; c < cols; ++c) {
    scale[static_cast<std::size_t>(c)] = block_scales[c / block_cols];
    inverse[static_cast<std::size_t>(c)] = 1.0f / block_scales[c / block_cols];
  }
}

}  // namespace

void cpu_fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax) {
  const std::int64_t rows = x.size(0), cols = x.size(1), nbc = amax.size(1);
  const auto blocks = static_cast<std::size_t>(amax.numel());
  std::vector<std::uint32_t> total(blocks, 0);
#pragma omp parallel if (rows * cols >= (1 << 15))
  {
    std::vector<std::uint32_t> mine(blocks, 0);
    std::vector<float> row(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load_row_f32(x, r, row.data());
      std::uint32_t* m = mine.data() + (r / block_rows) * nbc;
      for (std::int64_t c0 = 0, b = 0; c0 < cols; c0 += block_cols, ++b) {
        m[b] = amax_span(row.data() + c0, std::min(block_cols, cols - c0), m[b]);
      }
    }
#pragma omp critical
    for (std::size_t i = 0; i < blocks; ++i) total[i] = std::max(total[i], mine[i]);
  }
  float* out = amax.data_as<float>();
  for (std::size_t i = 0; i < blocks; ++i) out[i] = std::bit_cast<float>(total[i]);
}

Fp8QuantizeStats cpu_fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                                  std::int64_t block_cols, bool dequantize, const Tensor& out) {
  const std::int64_t rows = x.size(0), cols = x.size(1), nbc = scales.size(1);
  const Grid g = grid_of(format);
  const float* sc = scales.data_as<const float>();
  Counts total;
#pragma omp parallel if (rows * cols >= (1 << 15))
  {
    Counts mine;
    std::vector<float> row(static_cast<std::size_t>(cols)), scale(row.size()), inverse(row.size());
    std::int64_t strip = -1;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      if (r / block_rows != strip) {
        strip = r / block_rows;
        spread(sc + strip * nbc, cols, block_cols, scale, inverse);
      }
      load_row_f32(x, r, row.data());
      quantize_rows(row.data(), 1, cols, scale.data(), inverse.data(), g, dequantize, out, r, mine);
    }
#pragma omp critical
    merge(total, mine);
  }
  return stats_of(total, rows * cols);
}

Fp8QuantizeStats cpu_fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols,
                                          int margin, bool power_of_2, bool dequantize, const Tensor& scales,
                                          const Tensor& out) {
  const std::int64_t rows = x.size(0), cols = x.size(1), nbc = scales.size(1);
  // Tall blocks (one scale for the whole tensor): an amax pass first, then the quantization.
  constexpr std::int64_t kMaxStripRows = 256;
  if (block_rows > kMaxStripRows) {
    cpu_fp8_amax(x, block_rows, block_cols, scales);
    float* s = scales.data_as<float>();
    for (std::int64_t i = 0; i < scales.numel(); ++i) s[i] = fp8_scale_for(s[i], format, margin, power_of_2);
    return cpu_fp8_quantize(x, format, scales, block_rows, block_cols, dequantize, out);
  }
  // Strips of block_rows rows, each read once into f32: its blocks' amaxes, their scales, the quantization.
  const Grid g = grid_of(format);
  const std::int64_t strips = (rows + block_rows - 1) / block_rows;
  Counts total;
#pragma omp parallel if (rows * cols >= (1 << 15))
  {
    Counts mine;
    std::vector<float> buf(static_cast<std::size_t>(block_rows * cols));
    std::vector<float> scale(static_cast<std::size_t>(cols)), inverse(scale.size());
    std::vector<std::uint32_t> amax(static_cast<std::size_t>(nbc)), column(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t strip = 0; strip < strips; ++strip) {
      const std::int64_t r0 = strip * block_rows, n = std::min(block_rows, rows - r0);
      std::fill(amax.begin(), amax.end(), 0U);
      for (std::int64_t r = 0; r < n; ++r) {
        float* row = buf.data() + r * cols;
        load_row_f32(x, r0 + r, row);
        if (block_cols == 1) {  // a scale per column of the strip
          for (std::int64_t c = 0; c < cols; ++c) {
            const std::uint32_t b = std::bit_cast<std::uint32_t>(row[c]) & 0x7fffffffU;
            column[static_cast<std::size_t>(c)] = std::max(r == 0 ? 0U : column[static_cast<std::size_t>(c)], b < 0x7f800000U ? b : 0U);
          }
        } else {
          for (std::int64_t c0 = 0, b = 0; c0 < cols; c0 += block_cols, ++b) {
            amax[static_cast<std::size_t>(b)] = amax_span(row + c0, std::min(block_cols, cols - c0), amax[static_cast<std::size_t>(b)]);
          }
        }
      }
      float* block_scales = scales.data_as<float>() + strip * nbc;
      for (std::int64_t b = 0; b < nbc; ++b) {
        const std::uint32_t bits = block_cols == 1 ? column[static_cast<std::size_t>(b)] : amax[static_cast<std::size_t>(b)];
        block_scales[b] = fp8_scale_for(std::bit_cast<float>(bits), format, margin, power_of_2);
      }
      spread(block_scales, cols, block_cols, scale, inverse);
      quantize_rows(buf.data(), n, cols, scale.data(), inverse.data(), g, dequantize, out, r0, mine);
    }
#pragma omp critical
    merge(total, mine);
  }
  return stats_of(total, rows * cols);
}

}  // namespace mantissa::detail
