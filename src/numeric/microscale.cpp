// Block-scaled quantization (mantissa/numeric/microscale.h): the scale rules written as torchao's
// reference quantizers compute them, operation for operation in f32, so that the codes agree bit for bit;
// the elements rounded by the one rule every cast uses (encode_rules.h).
#include "mantissa/numeric/microscale.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "encode_rules.h"
#include "mantissa/numeric/convert.h"

namespace mantissa {
namespace {

constexpr std::int64_t kMaxBlockSide = 65536;
constexpr float kNvfp4TensorDivisor = 448.0f * 6.0f;  // e4m3's largest times e2m1's: torchao's per_tensor_amax_to_scale
constexpr float kE4m3SmallestNormal = 0.015625f;      // torchao clamps e4m3 block scales to [2^-6, 448]

float max_finite(Format f) { return decode(f, f.max_finite_bits()); }

// floor(log2) of the element's largest value: the "emax" OCP MX subtracts (e4m3 8, e5m2 15, e2m1 2).
int max_pow2(Format f) { return std::ilogb(max_finite(f)); }

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

// ceil(log2 d) for a finite d > 0, exactly (from the bits, not from a rounded logarithm).
int ceil_log2(float d) {
  const std::uint32_t b = bits_of(d);
  const std::uint32_t field = b >> 23, mant = b & 0x7fffffU;
  if (field > 0) return static_cast<int>(field) - 127 + (mant != 0 ? 1 : 0);
  const int top = 31 - std::countl_zero(mant);  // a subnormal: mant * 2^-149
  return top - 149 + (mant != (1U << top) ? 1 : 0);
}

// How one block's values become elements: y = x / divide * multiply (one of the two is 1, as the recipe
// computes it), and the block's scale code.
struct BlockScale {
  float divide = 1, multiply = 1;
  std::uint8_t code = 0;
};

// E8M0 scales, floor and even rules (torchao's to_mx): the exponent field of the (rounded) amax less the
// element's emax, clamped to E8M0's range, 0xFF for a NaN amax; the values divided by the scale, which
// is held at least at f32's smallest normal.
BlockScale e8m0_floor(float amax, const QuantSpec& s) {
  float m = amax;
  if (s.rule == ScaleRule::even && !std::isnan(m)) {
    const std::uint32_t add = 1U << (23 - s.element.man_bits() - 1);
    m = std::bit_cast<float>((bits_of(m) + add) & 0xff800000U);
  }
  const int extracted = static_cast<int>((bits_of(m) >> 23) & 0xffU) - 127;
  const int unbiased = std::clamp(extracted - max_pow2(s.element), -127, 128);
  const auto code = static_cast<std::uint8_t>(std::isnan(m) ? 255 : unbiased + 127);
  const float scale = std::max(std::bit_cast<float>(std::uint32_t{code} << 23), std::numeric_limits<float>::min());
  return {scale, 1.0f, code};
}

// E8M0 scales, rceil rule (torchao's _to_mx_rceil, after Transformer Engine): the amax over the
// element's largest, rounded up to a power of 2; the values multiplied by its reciprocal (1 where the
// scale is 2^-127, as TE's exp2f_rcp has it).
BlockScale e8m0_rceil(float amax, const QuantSpec& s) {
  const float descale = amax / max_finite(s.element);
  std::uint8_t code;
  if (std::isnan(descale)) {
    code = 255;
  } else if (std::isinf(descale)) {
    code = 254;
  } else {
    const int e = descale == 0 ? -127 : std::clamp(ceil_log2(descale), -127, 127);
    code = static_cast<std::uint8_t>(e + 127);
  }
  float rcp;
  if (code == 255) {
    rcp = descale;
  } else if (code == 254) {
    rcp = std::ldexp(1.0f, -127);
  } else {
    rcp = code == 0 ? 1.0f : std::ldexp(1.0f, 127 - code);
  }
  return {1.0f, rcp, code};
}

// E4M3 scales under the tensor scale (torchao's nvfp4_quantize with a per-tensor scale): the block's
// amax over the element's largest, over the tensor scale, clamped to [2^-6, 448] and rounded to e4m3;
// the values multiplied by (1 / tensor scale) / that.
BlockScale e4m3_scale(float amax, float tensor_scale, const QuantSpec& s) {
  const float block = amax / max_finite(s.element);
  const float scaled = block / tensor_scale;
  const float clamped = std::isnan(scaled) ? scaled : std::clamp(scaled, kE4m3SmallestNormal, 448.0f);
  const auto code = static_cast<std::uint8_t>(encode(Format::e4m3(), clamped));
  const float decoded = decode(Format::e4m3(), code);
  return {1.0f, (1.0f / tensor_scale) / decoded, code};
}

// The largest magnitude, NaN if any value is NaN (as torch.amax).
float amax_of(std::span<const float> x, std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1, std::int64_t cols) {
  float m = 0;
  bool nan = false;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float* row = x.data() + r * cols;
    for (std::int64_t c = c0; c < c1; ++c) {
      const float a = std::fabs(row[c]);
      nan |= std::isnan(a);
      m = std::max(m, a);
    }
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

template <Rounding R>
void quantize_all(std::span<const float> x, std::int64_t rows, std::int64_t cols, const QuantSpec& s, std::uint64_t seed,
                  QuantizedBlocks& q) {
  const std::int64_t br = s.block_rows, bc = s.block_cols;
  const std::int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
  const detail::EncodeParams p = detail::make_encode_params(s.element, CastOptions{.rounding = R, .saturate = true});
  const float top = max_finite(s.element);
  std::int64_t saturated = 0, underflowed = 0;
#pragma omp parallel for schedule(static) reduction(+ : saturated, underflowed) if (rows * cols >= 65536)
  for (std::int64_t ib = 0; ib < nbr; ++ib) {
    std::uint64_t key_high = ~std::uint64_t{0};
    detail::StochasticKey key{};
    const std::int64_t r0 = ib * br, r1 = std::min(rows, r0 + br);
    for (std::int64_t jb = 0; jb < nbc; ++jb) {
      const std::int64_t c0 = jb * bc, c1 = std::min(cols, c0 + bc);
      const float amax = amax_of(x, r0, r1, c0, c1, cols);
      const BlockScale b = s.scale == ScaleFormat::e4m3 ? e4m3_scale(amax, q.tensor_scale, s)
                           : s.rule == ScaleRule::rceil ? e8m0_rceil(amax, s)
                                                        : e8m0_floor(amax, s);
      q.scale_codes[static_cast<std::size_t>(ib * nbc + jb)] = b.code;
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const std::int64_t i = r * cols + c;
          const float v = x[static_cast<std::size_t>(i)];
          float y = v / b.divide * b.multiply;
          if (std::isfinite(v) && std::fabs(y) > top) ++saturated;
          y = std::isnan(y) ? y : std::clamp(y, -top, top);
          std::uint32_t random = 0;
          if constexpr (R == Rounding::stochastic) {
            const auto u = static_cast<std::uint64_t>(i);
            if ((u >> 32) != key_high) {
              key_high = u >> 32;
              key = detail::stochastic_key(seed, static_cast<std::uint32_t>(key_high));
            }
            random = detail::random_bits(key, static_cast<std::uint32_t>(u));
          }
          const std::uint32_t code = detail::encode_bits_as<R>(p, bits_of(y), random);
          if (v != 0 && std::isfinite(v) && (code & s.element.magnitude_mask()) == 0) ++underflowed;
          q.codes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(code);
        }
      }
    }
  }
  q.saturated = saturated;
  q.underflowed = underflowed;
}

}  // namespace

std::string QuantSpec::str() const {
  std::string s = element.name() + " " + std::to_string(block_rows) + "x" + std::to_string(block_cols) + " ";
  if (scale == ScaleFormat::e4m3) {
    s += "e4m3*f32";
  } else {
    s += std::string("e8m0 ") + (rule == ScaleRule::floor ? "floor" : rule == ScaleRule::even ? "even" : "rceil");
  }
  return s + " " + std::string(rounding_name(rounding));
}

void QuantSpec::check() const {
  if (!(element == Format::e4m3() || element == Format::e5m2() || element == Format::e2m1())) {
    throw std::invalid_argument("block quantization: element format " + element.name() + " is not e4m3, e5m2 or e2m1");
  }
  for (const std::int64_t side : {block_rows, block_cols}) {
    if (side < 1 || side > kMaxBlockSide) {
      throw std::invalid_argument("block quantization: a block side must be 1 to 65536, got " + std::to_string(side));
    }
  }
  if (scale == ScaleFormat::e4m3 && rule != ScaleRule::floor) {
    throw std::invalid_argument("block quantization: e4m3 scales have no rule to choose (floor, the default, only)");
  }
  if (rounding == Rounding::toward_zero) {
    throw std::invalid_argument("block quantization: elements round to nearest even or stochastically");
  }
}

QuantSpec quant_spec(std::string_view recipe) {
  if (recipe == "mxfp8") return QuantSpec{};
  if (recipe == "mxfp8-rceil") return QuantSpec{.rule = ScaleRule::rceil};
  if (recipe == "mxfp4") return QuantSpec{.element = Format::e2m1()};
  if (recipe == "nvfp4") return QuantSpec{.element = Format::e2m1(), .block_cols = 16, .scale = ScaleFormat::e4m3};
  throw std::invalid_argument("'" + std::string(recipe) + "' is not a block-scaled recipe (mxfp8, mxfp8-rceil, mxfp4, nvfp4)");
}

QuantizedBlocks quantize_blocks(std::span<const float> x, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                                std::uint64_t seed) {
  spec.check();
  if (rows < 0 || cols < 0 || static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) != x.size()) {
    throw std::invalid_argument("block quantization: " + std::to_string(x.size()) + " values are not " + std::to_string(rows) +
                                " x " + std::to_string(cols));
  }
  QuantizedBlocks q;
  q.codes.resize(x.size());
  const std::int64_t nbr = (rows + spec.block_rows - 1) / spec.block_rows;
  const std::int64_t nbc = (cols + spec.block_cols - 1) / spec.block_cols;
  q.scale_codes.resize(static_cast<std::size_t>(nbr * nbc));
  q.amax = amax_of(x, 0, rows, 0, cols, cols);
  if (spec.scale == ScaleFormat::e4m3) {
    // torchao's amax / (448 * 6); a tensor of zeros gets 1, as Transformer Engine gives it (0 would make
    // every block scale 0 / 0).
    q.tensor_scale = q.amax == 0 ? 1.0f : q.amax / kNvfp4TensorDivisor;
  }
  if (spec.rounding == Rounding::stochastic) {
    quantize_all<Rounding::stochastic>(x, rows, cols, spec, seed, q);
  } else {
    quantize_all<Rounding::nearest_even>(x, rows, cols, spec, seed, q);
  }
  return q;
}

std::vector<float> dequantize_blocks(const QuantizedBlocks& q, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                                     bool with_tensor_scale) {
  std::vector<float> out(q.codes.size());
  const std::int64_t nbc = (cols + spec.block_cols - 1) / spec.block_cols;
  const float t = with_tensor_scale ? q.tensor_scale : 1.0f;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<std::size_t>(r * cols + c);
      const float scale = decode_scale(spec.scale, q.scale_codes[static_cast<std::size_t>((r / spec.block_rows) * nbc + c / spec.block_cols)]);
      out[i] = decode(spec.element, q.codes[i]) * scale * t;
    }
  }
  return out;
}

float decode_e8m0(std::uint8_t bits) {
  if (bits == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

float decode_scale(ScaleFormat format, std::uint8_t bits) {
  return format == ScaleFormat::e8m0 ? decode_e8m0(bits) : decode(Format::e4m3(), bits);
}

std::vector<std::uint8_t> pack_fp4(std::span<const std::uint8_t> codes) {
  std::vector<std::uint8_t> out((codes.size() + 1) / 2, 0);
  for (std::size_t i = 0; i < codes.size(); ++i) {
    out[i / 2] |= static_cast<std::uint8_t>((codes[i] & 0xfU) << (i % 2 == 0 ? 0 : 4));
  }
  return out;
}

std::vector<std::uint8_t> unpack_fp4(std::span<const std::uint8_t> packed, std::size_t count) {
  if (count > packed.size() * 2) {
    throw std::invalid_argument("fp4: " + std::to_string(packed.size()) + " bytes hold fewer than " + std::to_string(count) +
                                " values");
  }
  std::vector<std::uint8_t> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<std::uint8_t>((packed[i / 2] >> (i % 2 == 0 ? 0 : 4)) & 0xfU);
  return out;
}

void hadamard16(std::span<float> x, std::int64_t rows, std::int64_t cols, bool along_rows, std::uint16_t signs) {
  const std::int64_t n = along_rows ? rows : cols;
  if (n % 16 != 0 || static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) != x.size()) {
    throw std::invalid_argument("hadamard16: the transformed dimension (" + std::to_string(n) + ") must be a multiple of 16");
  }
  // Element k of group g of line l sits at base(l, g) + k * step.
  const std::int64_t lines = along_rows ? cols : rows, step = along_rows ? cols : 1;
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
  for (std::int64_t l = 0; l < lines; ++l) {
    for (std::int64_t g = 0; g < n / 16; ++g) {
      float* base = x.data() + (along_rows ? g * 16 * cols + l : l * cols + g * 16);
      float v[16];
      for (int k = 0; k < 16; ++k) v[k] = ((signs >> k) & 1U) ? -base[k * step] : base[k * step];
      // Walsh-Hadamard butterflies (Sylvester order: H[i][j] = (-1)^popcount(i & j)), then 1 / 4.
      for (int h = 1; h < 16; h *= 2) {
        for (int i = 0; i < 16; i += 2 * h) {
          for (int j = i; j < i + h; ++j) {
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
          }
        }
      }
      for (int k = 0; k < 16; ++k) base[k * step] = v[k] * 0.25f;
    }
  }
}

}  // namespace mantissa
