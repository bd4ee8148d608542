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

#include "../../numeric/encode_rules.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
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

// The bits of |x| as a signed integer: non-negative, and ordered as the magnitudes (inf and NaN above
// every finite value). Signed, because GCC 12 vectorizes a max over signed lanes where it gives up on the
// same max over unsigned ones.
inline std::int32_t magnitude_bits(float x) { return std::bit_cast<std::int32_t>(x) & 0x7fffffff; }
constexpr std::int32_t kInfBits = 0x7f800000;

struct Counts {
  std::int32_t amax_bits = 0;  // magnitude_bits of the largest finite |x|
  std::int64_t saturated = 0, underflowed = 0, nonfinite = 0;
};

// x[i] * s[i] rounded to the grid, times back[i] (1, or 1 / s[i] to dequantize), as bf16 bits; the loop
// GCC vectorizes (compiled per ISA). (A variant without the last product was not vectorized by GCC 12.)
MANTISSA_VECTOR_CLONES void quantize_span(const float* x, const float* s, const float* back, std::int64_t n, Grid g,
                                          std::uint16_t* out, Counts& c) {
  const std::uint32_t half = (std::uint32_t{1} << (g.shift - 1)) - 1;
  const std::uint32_t keep = ~((std::uint32_t{1} << g.shift) - 1);
  std::int32_t amax = c.amax_bits;
  std::int32_t saturated = 0, underflowed = 0, nonfinite = 0;  // a span is one row: its counts fit
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t xb = magnitude_bits(x[i]);
    const bool finite = xb < kInfBits;
    amax = std::max(amax, finite ? xb : 0);
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
    q = q * back[i];  // exact for 1 and for power-of-2 scales; a rounding in bf16 for others
    const std::uint32_t qb = (std::bit_cast<std::uint32_t>(q) & 0x7fffffffU) | (vb & 0x80000000U);
    // To bf16 by nearest even (exact unless a scale that is no power of 2 dequantized them); inf and NaN
    // as they are, by bf16's rule too (encode_rules.h).
    out[i] = bf16_bits_of(std::bit_cast<float>(finite ? qb : vb));
  }
  c.amax_bits = amax;
  c.saturated += saturated;
  c.underflowed += underflowed;
  c.nonfinite += nonfinite;
}

MANTISSA_VECTOR_CLONES std::int32_t amax_span(const float* x, std::int64_t n, std::int32_t amax) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t xb = magnitude_bits(x[i]);
    amax = std::max(amax, xb < kInfBits ? xb : 0);
  }
  return amax;
}

// column[c] = max(column[c], the magnitude bits of row[c] if finite, else 0), for c < n.
MANTISSA_VECTOR_CLONES void column_amax_span(const float* row, std::int64_t n, std::int32_t* column) {
  for (std::int64_t c = 0; c < n; ++c) {
    const std::int32_t xb = magnitude_bits(row[c]);
    column[c] = std::max(column[c], xb < kInfBits ? xb : 0);
  }
}

// Quantizes `rows` rows of `cols` f32 values at `in` (row after row) into out's rows from r0 on, with the
// per-column scales (and factors back) of the strip. out bf16, or the grid's own fp8 dtype: each row then
// goes through bf16 (which holds it exactly) into its bytes.
void quantize_rows(const float* in, std::int64_t rows, std::int64_t cols, const float* scale, const float* back, Grid g,
                   const Tensor& out, std::int64_t r0, Counts& c) {
  if (out.dtype() == DType::bf16) {
    auto* dst = out.data_as<std::uint16_t>();
    for (std::int64_t r = 0; r < rows; ++r) quantize_span(in + r * cols, scale, back, cols, g, dst + (r0 + r) * out.strides()[0], c);
    return;
  }
  thread_local std::vector<std::uint16_t> bits;
  thread_local std::vector<float> values;
  bits.resize(static_cast<std::size_t>(cols));
  values.resize(bits.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    quantize_span(in + r * cols, scale, back, cols, g, bits.data(), c);
    decode_array(Format::bf16(), bits.data(), values.data(), bits.size());
    for (std::int64_t at = 0; at < cols; at += kRowBlock) {
      store_f32(out, (r0 + r) * out.strides()[0] + at, 1, std::min(kRowBlock, cols - at), values.data() + at);
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

// The scales of one strip of blocks (a row of the scales tensor) spread over the columns, with the factors
// the rounded values are multiplied by: the inverses to dequantize, else 1.
void spread(const float* block_scales, std::int64_t cols, std::int64_t block_cols, bool dequantize, std::vector<float>& scale,
            std::vector<float>& back) {
  // Block by block (a strip can be one row, spread again for each: no division per column).
  for (std::int64_t c0 = 0, b = 0; c0 < cols; c0 += block_cols, ++b) {
    const std::int64_t end = std::min(cols, c0 + block_cols);
    std::fill(scale.begin() + c0, scale.begin() + end, block_scales[b]);
    std::fill(back.begin() + c0, back.begin() + end, dequantize ? 1.0f / block_scales[b] : 1.0f);
  }
}

}  // namespace

void cpu_fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax) {
  const std::int64_t rows = x.size(0), cols = x.size(1), nbc = amax.size(1);
  const auto blocks = static_cast<std::size_t>(amax.numel());
  std::vector<std::int32_t> total(blocks, 0);
#pragma omp parallel if (rows * cols >= (1 << 15))
  {
    std::vector<std::int32_t> mine(blocks, 0);
    std::vector<float> row(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load_row(x, r, row.data());
      std::int32_t* m = mine.data() + (r / block_rows) * nbc;
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
    std::vector<float> row(static_cast<std::size_t>(cols)), scale(row.size()), back(row.size());
    std::int64_t strip = -1;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      if (r / block_rows != strip) {
        strip = r / block_rows;
        spread(sc + strip * nbc, cols, block_cols, dequantize, scale, back);
      }
      load_row(x, r, row.data());
      quantize_rows(row.data(), 1, cols, scale.data(), back.data(), g, out, r, mine);
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
    std::vector<float> scale(static_cast<std::size_t>(cols)), back(scale.size());
    std::vector<std::int32_t> amax(static_cast<std::size_t>(nbc)), column(static_cast<std::size_t>(cols));  // magnitude_bits
#pragma omp for schedule(static)
    for (std::int64_t strip = 0; strip < strips; ++strip) {
      const std::int64_t r0 = strip * block_rows, n = std::min(block_rows, rows - r0);
      if (block_cols == 1) {
        std::fill(column.begin(), column.end(), 0);
      } else {
        std::fill(amax.begin(), amax.end(), 0);
      }
      for (std::int64_t r = 0; r < n; ++r) {
        float* row = buf.data() + r * cols;
        load_row(x, r0 + r, row);
        if (block_cols == 1) {  // a scale per column of the strip
          column_amax_span(row, cols, column.data());
        } else {
          for (std::int64_t c0 = 0, b = 0; c0 < cols; c0 += block_cols, ++b) {
            amax[static_cast<std::size_t>(b)] = amax_span(row + c0, std::min(block_cols, cols - c0), amax[static_cast<std::size_t>(b)]);
          }
        }
      }
      float* block_scales = scales.data_as<float>() + strip * nbc;
      for (std::int64_t b = 0; b < nbc; ++b) {
        const std::int32_t bits = (block_cols == 1 ? column : amax)[static_cast<std::size_t>(b)];
        block_scales[b] = fp8_scale_for(std::bit_cast<float>(bits), g.max_finite, margin, power_of_2);
      }
      spread(block_scales, cols, block_cols, dequantize, scale, back);
      quantize_rows(buf.data(), n, cols, scale.data(), back.data(), g, out, r0, mine);
    }
#pragma omp critical
    merge(total, mine);
  }
  return stats_of(total, rows * cols);
}

}  // namespace mantissa::detail
