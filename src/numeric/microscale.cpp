// Block-scaled quantization (mantissa/numeric/microscale.h): the scale rules written as torchao's
// reference quantizers compute them, operation for operation in f32, so that the codes agree bit for bit;
// the elements rounded by the one rule every cast uses (encode_rules.h).
#include "mantissa/numeric/microscale.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "encode_rules.h"
#include "hadamard_rules.h"
#include "microscale_rules.h"
#include "vector_clones.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/numeric/parse_number.h"
#include "mantissa/numeric/recipes.h"

namespace mantissa {
namespace {

constexpr std::int64_t kMaxBlockSide = 65536;

float max_finite(Format f) { return decode(f, f.max_finite_bits()); }

using detail::BlockScale;
detail::ElementRule element_rule(Format f) { return {max_finite(f), std::ilogb(max_finite(f)), f.man_bits()}; }

const detail::EncodeParams& e4m3_nearest() {
  static const detail::EncodeParams p = detail::make_encode_params(Format::e4m3(), CastOptions{});
  return p;
}
const detail::DecodeParams& e4m3_decoding() {
  static const detail::DecodeParams p = detail::make_decode_params(Format::e4m3());
  return p;
}

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

// The largest magnitude, NaN if any value is NaN (as torch.amax).
float amax_of(std::span<const float> x) {
  float m = 0;
  std::uint32_t nan = 0;
  const auto n = static_cast<std::int64_t>(x.size());
#pragma omp parallel for simd reduction(max : m) reduction(| : nan) if (n >= 65536)
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[static_cast<std::size_t>(i)]);
    nan |= a != a ? 1U : 0U;
    m = std::max(m, a);
  }
  return nan != 0 ? std::numeric_limits<float>::quiet_NaN() : m;
}

// amax_of over the rows load(r, row) gives: one pass of its own, threaded over rows.
float amax_of_rows(std::int64_t rows, std::int64_t cols, const std::function<void(std::int64_t, float*)>& load) {
  float m = 0;
  bool nan = false;
#pragma omp parallel reduction(max : m) reduction(|| : nan) if (rows * cols >= 65536)
  {
    std::vector<float> row(static_cast<std::size_t>(cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      load(r, row.data());
      const float a = amax_of(row);
      nan = nan || a != a;
      m = std::max(m, a);
    }
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// n consecutive values of a row, each with its block's multiplier: scaled, clamped to the element's range
// (NaN kept), rounded by the one rule; counting what saturated and what underflowed. A loop the compiler
// vectorizes (the rule's variable shifts need AVX2: the callers below are compiled per ISA).
template <Rounding R>
[[gnu::always_inline]] inline void encode_segment_as(const float* x, std::uint8_t* out, std::int64_t n, const float* multiply, float top,
                              const detail::EncodeParams& params, detail::StochasticKey key, std::uint32_t index_low,
                              std::uint32_t mask, std::int64_t& saturated, std::int64_t& underflowed) {
  const detail::EncodeParams p = params;  // a local: the byte stores below might alias the caller's
  // (32-bit counts keep the loop in 32-bit lanes: callers give at most a row, under 2^31 values.)
  std::uint32_t sat = 0, under = 0;
#pragma omp simd reduction(+ : sat, under)
  for (std::int64_t k = 0; k < n; ++k) {
    const float v = x[k];
    const float y = v * multiply[k];
    const bool finite = std::fabs(v) <= std::numeric_limits<float>::max();
    sat += (finite & (std::fabs(y) > top)) ? 1U : 0U;
    const float clamped = std::min(std::max(y, -top), top);  // NaN stays: (NaN < -top) and (top < NaN) are false
    std::uint32_t random = 0;
    if constexpr (R == Rounding::stochastic) random = detail::random_bits(key, index_low + static_cast<std::uint32_t>(k));
    const std::uint32_t code = detail::encode_bits_as<R>(p, bits_of(clamped), random);
    under += ((v != 0) & finite & ((code & mask) == 0)) ? 1U : 0U;
    out[k] = static_cast<std::uint8_t>(code);
  }
  saturated += sat;
  underflowed += under;
}

}  // namespace

// (Outside the anonymous namespace: GCC's target clones want a function the linker can see.)
MANTISSA_VECTOR_CLONES void microscale_encode_nearest(const float* x, std::uint8_t* out, std::int64_t n, const float* multiply,
                                                      float top, const detail::EncodeParams& p, std::uint32_t mask,
                                                      std::int64_t& saturated, std::int64_t& underflowed) {
  encode_segment_as<Rounding::nearest_even>(x, out, n, multiply, top, p, {}, 0, mask, saturated, underflowed);
}
MANTISSA_VECTOR_CLONES void microscale_encode_stochastic(const float* x, std::uint8_t* out, std::int64_t n, const float* multiply,
                                                         float top, const detail::EncodeParams& p, detail::StochasticKey key,
                                                         std::uint32_t index_low, std::uint32_t mask, std::int64_t& saturated,
                                                         std::int64_t& underflowed) {
  encode_segment_as<Rounding::stochastic>(x, out, n, multiply, top, p, key, index_low, mask, saturated, underflowed);
}

namespace {

// A strip of block_rows rows at a time, in a buffer of the thread's own: the rows loaded, their column
// amaxes in one sweep, each block's scale from its columns' amaxes, every column's multiplier spread
// out, then each row encoded and handed on. (Column blocks, N x 1, cost no more than row blocks this way.)
template <Rounding R>
void quantize_strips(std::int64_t rows, std::int64_t cols, const QuantSpec& s, std::uint64_t seed, const detail::BlockRows& io,
                     float tensor_amax, QuantizedBlocks& q) {
  const bool te = s.rule == ScaleRule::te;
  const std::int64_t br = s.block_rows, bc = s.block_cols;
  const std::int64_t nbr = (rows + br - 1) / br, nbc = (cols + bc - 1) / bc;
  const detail::EncodeParams p = detail::make_encode_params(s.element, CastOptions{.rounding = R, .saturate = true});
  const detail::ElementRule element = element_rule(s.element);
  const float top = element.top;
  const std::uint32_t mask = s.element.magnitude_mask();
  std::int64_t saturated = 0, underflowed = 0, nonfinite = 0;
  float amax = 0;
  std::uint32_t any_nan = 0;
#pragma omp parallel reduction(+ : saturated, underflowed, nonfinite) reduction(max : amax) reduction(| : any_nan) \
    if (rows * cols >= 65536)
  {
    std::vector<float> strip(static_cast<std::size_t>(std::min(br, rows) * cols));
    std::vector<float> column_max(static_cast<std::size_t>(cols)), multiply(static_cast<std::size_t>(cols));
    std::vector<float> scale_value(static_cast<std::size_t>(cols));
    std::vector<std::uint8_t> column_nan(static_cast<std::size_t>(cols)), codes(static_cast<std::size_t>(cols));
    std::uint64_t key_high = ~std::uint64_t{0};
    detail::StochasticKey key{};
#pragma omp for schedule(static)
    for (std::int64_t ib = 0; ib < nbr; ++ib) {
      const std::int64_t r0 = ib * br, r1 = std::min(rows, r0 + br);
      std::fill(column_max.begin(), column_max.end(), 0.0f);
      std::fill(column_nan.begin(), column_nan.end(), 0);
      for (std::int64_t r = r0; r < r1; ++r) {
        float* row = strip.data() + (r - r0) * cols;
        io.load(r, row);
        for (std::int64_t c = 0; c < cols; ++c) {
          const float a = std::fabs(row[c]);
          column_nan[static_cast<std::size_t>(c)] |= a != a;
          nonfinite += a <= std::numeric_limits<float>::max() ? 0 : 1;
          column_max[static_cast<std::size_t>(c)] = std::max(column_max[static_cast<std::size_t>(c)], a);
        }
      }
      for (std::int64_t jb = 0; jb < nbc; ++jb) {
        const std::int64_t c0 = jb * bc, c1 = std::min(cols, c0 + bc);
        float block_amax = 0;
        bool nan = false;
        for (std::int64_t c = c0; c < c1; ++c) {
          block_amax = std::max(block_amax, column_max[static_cast<std::size_t>(c)]);
          nan |= column_nan[static_cast<std::size_t>(c)] != 0;
        }
        amax = std::max(amax, block_amax);
        any_nan |= nan ? 1U : 0U;
        if (nan) block_amax = std::numeric_limits<float>::quiet_NaN();
        const BlockScale b = te ? detail::te_e4m3_block_scale(block_amax, tensor_amax, element, e4m3_nearest(), e4m3_decoding())
                             : s.scale == ScaleFormat::e4m3
                                 ? detail::e4m3_block_scale(block_amax, q.tensor_scale, element, e4m3_nearest(), e4m3_decoding())
                             : s.rule == ScaleRule::rceil ? detail::e8m0_rceil(block_amax, element)
                                                          : detail::e8m0_floor(block_amax, s.rule == ScaleRule::even, element);
        q.scale_codes[static_cast<std::size_t>(ib * nbc + jb)] = b.code;
        std::fill(multiply.begin() + c0, multiply.begin() + c1, b.multiply);
        std::fill(scale_value.begin() + c0, scale_value.begin() + c1, decode_scale(s.scale, b.code));
      }
      for (std::int64_t r = r0; r < r1; ++r) {
        const float* row = strip.data() + (r - r0) * cols;
        const std::int64_t i0 = r * cols;
        if constexpr (R == Rounding::stochastic) {
          // One key per 2^32 indices: a row that crosses a boundary is split there.
          for (std::int64_t done = 0; done < cols;) {
            const auto u = static_cast<std::uint64_t>(i0 + done);
            if ((u >> 32) != key_high) {
              key_high = u >> 32;
              key = detail::stochastic_key(seed, static_cast<std::uint32_t>(key_high));
            }
            const std::int64_t m = std::min(cols - done, static_cast<std::int64_t>(((key_high + 1) << 32) - u));
            microscale_encode_stochastic(row + done, codes.data() + done, m, multiply.data() + done, top, p, key,
                                         static_cast<std::uint32_t>(u), mask, saturated, underflowed);
            done += m;
          }
        } else {
          microscale_encode_nearest(row, codes.data(), cols, multiply.data(), top, p, mask, saturated, underflowed);
        }
        if (te) {  // TE's E2M1 cast: a NaN, and -0, give code 0 (this format has no NaN to write)
          for (std::int64_t c = 0; c < cols; ++c) {
            const float v = row[c] * multiply[static_cast<std::size_t>(c)];
            if (v != v || (v == 0 && std::signbit(v))) codes[static_cast<std::size_t>(c)] = 0;
          }
        }
        io.emit(r, codes.data(), scale_value.data());
      }
    }
  }
  q.saturated = saturated;
  q.underflowed = underflowed;
  q.nonfinite = nonfinite;
  q.amax = any_nan != 0 ? std::numeric_limits<float>::quiet_NaN() : amax;
}

}  // namespace

std::string QuantSpec::str() const {
  // (Appended piece by piece: GCC 12 warns falsely of overlapping copies in a chain of string +.)
  std::string s = element.name();
  s.append(" ");
  if (per_tensor()) {
    s.append("tensor");
  } else {
    s.append(std::to_string(block_rows)).append("x").append(std::to_string(block_cols));
  }
  if (scale == ScaleFormat::e4m3) {
    s.append(" e4m3*f32");
    if (rule == ScaleRule::te) s.append(" te");
  } else {
    s.append(scale == ScaleFormat::f32 ? " f32 " : " e8m0 ").append(scale_rule_name(rule));
  }
  s.append(" ").append(rounding_name(rounding));
  if (margin != 0) s.append(" margin ").append(std::to_string(margin));
  return s;
}

QuantSpec QuantSpec::parse(std::string_view text) {
  std::vector<std::string> words;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find(' ', at), text.size());
    if (end > at) words.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  const auto refuse = [&](const std::string& what) {
    return std::invalid_argument("quantization spec \"" + std::string(text) + "\": " + what +
                                 " (say it as \"e4m3 1x32 e8m0 rceil nearest\" or \"e5m2 tensor f32 fit nearest margin 1\")");
  };
  if (words.size() < 4 || words.size() > 7) throw refuse("expected 4 to 7 words");
  QuantSpec q;
  try {
    q.element = Format::parse(words[0]);
  } catch (const std::invalid_argument&) {
    throw refuse("'" + words[0] + "' is not a format");
  }
  std::size_t next = 2;
  if (words[1] == "tensor") {
    q.block_rows = q.block_cols = 0;
  } else {
    const std::size_t x = words[1].find('x');
    if (x == std::string::npos) throw refuse("'" + words[1] + "' is not a block (RxC or tensor)");
    const auto side = [&](std::string_view w) {
      if (!is_number<unsigned>(w)) throw refuse("'" + words[1] + "' is not a block (RxC or tensor)");
      return static_cast<std::int64_t>(parse_number<unsigned>(w, "block side"));
    };
    q.block_rows = side(std::string_view(words[1]).substr(0, x));
    q.block_cols = side(std::string_view(words[1]).substr(x + 1));
  }
  if (words[next] == "e4m3*f32") {
    q.scale = ScaleFormat::e4m3;
    ++next;
    if (next < words.size() && words[next] == "te") q.rule = parse_scale_rule(words[next++]);  // (floor goes unsaid)
  } else {
    if (words[next] == "e8m0") {
      q.scale = ScaleFormat::e8m0;
    } else if (words[next] == "f32") {
      q.scale = ScaleFormat::f32;
    } else {
      throw refuse("'" + words[next] + "' is not a scale format (e8m0, e4m3*f32, f32)");
    }
    if (++next >= words.size()) throw refuse("no scale rule");
    try {
      q.rule = parse_scale_rule(words[next++]);
    } catch (const std::invalid_argument& e) {
      throw refuse(e.what());
    }
  }
  if (next >= words.size()) throw refuse("no rounding (nearest or stochastic)");
  if (words[next] == "nearest") {
    q.rounding = Rounding::nearest_even;
  } else if (words[next] == "stochastic") {
    q.rounding = Rounding::stochastic;
  } else {
    throw refuse("'" + words[next] + "' is not a rounding (nearest or stochastic)");
  }
  ++next;
  if (next < words.size()) {
    if (words[next] != "margin" || next + 2 != words.size()) throw refuse("only \"margin N\" may follow the rounding");
    const std::string& m = words[next + 1];
    if (!is_number<unsigned>(m) || m.size() > 2) throw refuse("'" + m + "' is not a margin (0..30)");
    q.margin = static_cast<int>(parse_number<unsigned>(m, "margin"));
  } else if (next != words.size()) {
    throw refuse("words left over");
  }
  try {
    q.check();
  } catch (const std::invalid_argument& e) {
    throw refuse(e.what());
  }
  return q;
}

void QuantSpec::check() const {
  const bool fp8 = element == Format::e4m3() || element == Format::e5m2();
  if (!fp8 && !(element == Format::e2m1() || element == Format::e2m3() || element == Format::e3m2())) {
    throw std::invalid_argument("block quantization: element format " + element.name() + " is not e4m3, e5m2, e2m1, e2m3 or e3m2");
  }
  if (scale == ScaleFormat::f32 ? !per_tensor() : per_tensor()) {
    throw std::invalid_argument("block quantization: f32 scales are one per tensor (block \"tensor\"), and only they are");
  }
  for (const std::int64_t side : {block_rows, block_cols}) {
    if (!per_tensor() && (side < 1 || side > kMaxBlockSide)) {
      throw std::invalid_argument("block quantization: a block side must be 1 to 65536, got " + std::to_string(side));
    }
  }
  if (scale == ScaleFormat::e4m3 && rule != ScaleRule::floor && rule != ScaleRule::te) {
    throw std::invalid_argument("block quantization: e4m3 scales are fitted by torchao's rule (floor, the default) or Transformer Engine's (te)");
  }
  if (rule == ScaleRule::te && scale != ScaleFormat::e4m3) {
    throw std::invalid_argument("block quantization: the te rule is NVFP4's, for e4m3 scales");
  }
  if (scale == ScaleFormat::f32 && rule != ScaleRule::fit) {
    throw std::invalid_argument("block quantization: f32 scales are fitted by the fit rule only");
  }
  if (rule == ScaleRule::fit && (!fp8 || rounding != Rounding::nearest_even)) {
    throw std::invalid_argument("block quantization: the fit rule is FP8's: e4m3 or e5m2 elements, rounded to nearest");
  }
  if (margin != 0 && rule != ScaleRule::fit) throw std::invalid_argument("block quantization: only the fit rule has a margin");
  if (margin < 0 || margin > 30) throw std::invalid_argument("block quantization: the margin must be in 0..30, got " + std::to_string(margin));
  if (rounding == Rounding::toward_zero) {
    throw std::invalid_argument("block quantization: elements round to nearest even or stochastically");
  }
}

std::string_view scale_rule_name(ScaleRule rule) {
  switch (rule) {
    case ScaleRule::floor: return "floor";
    case ScaleRule::even: return "even";
    case ScaleRule::rceil: return "rceil";
    case ScaleRule::fit: return "fit";
    case ScaleRule::te: return "te";
  }
  return "?";
}

ScaleRule parse_scale_rule(std::string_view name) {
  if (name == "floor") return ScaleRule::floor;
  if (name == "even") return ScaleRule::even;
  if (name == "rceil") return ScaleRule::rceil;
  if (name == "fit") return ScaleRule::fit;
  if (name == "te") return ScaleRule::te;
  throw std::invalid_argument("'" + std::string(name) + "' is not a scale rule (floor, even, rceil, fit or te)");
}

QuantSpec quant_spec(std::string_view name) {
  // A microscaled recipe's name, with "-rceil" for rceil scales where they are E8M0.
  const bool rceil = name.ends_with("-rceil");
  const QuantRecipe* recipe = QuantRecipe::find(rceil ? name.substr(0, name.size() - 6) : name);
  if (recipe != nullptr && recipe->info().microscaled() && (!rceil || recipe->info().scale_rule_choice())) {
    QuantSpec s = recipe->info().element_spec(recipe->info().forward);
    if (rceil) s.rule = ScaleRule::rceil;
    return s;
  }
  throw std::invalid_argument("'" + std::string(name) + "' is not a block-scaled recipe (" + recipe_names(is_microscaled, ", ") +
                              "; an E8M0 one with -rceil)");
}

QuantizedBlocks quantize_blocks(std::span<const float> x, std::int64_t rows, std::int64_t cols, const QuantSpec& spec,
                                std::uint64_t seed) {
  if (rows < 0 || cols < 0 || static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols) != x.size()) {
    spec.check();
    throw std::invalid_argument("block quantization: " + std::to_string(x.size()) + " values are not " + std::to_string(rows) +
                                " x " + std::to_string(cols));
  }
  std::vector<std::uint8_t> codes(x.size());  // (every code is written below)
  const detail::BlockRows io{
      [&](std::int64_t r, float* row) { std::copy_n(x.data() + r * cols, cols, row); },
      [&](std::int64_t r, const std::uint8_t* row_codes, const float*) { std::copy_n(row_codes, cols, codes.data() + r * cols); },
      [&] { return amax_of(x); }};
  QuantizedBlocks q = detail::quantize_block_rows(rows, cols, spec, seed, io);
  q.codes = std::move(codes);
  return q;
}

namespace detail {

QuantizedBlocks quantize_block_rows(std::int64_t rows, std::int64_t cols, const QuantSpec& spec, std::uint64_t seed,
                                    const BlockRows& io) {
  spec.check();
  if (spec.rule == ScaleRule::fit) {
    throw std::invalid_argument("block quantization: the fit rule (" + spec.str() + ") is run by the BlockQuantize kernel");
  }
  QuantizedBlocks q;
  const std::int64_t nbr = (rows + spec.block_rows - 1) / spec.block_rows;
  const std::int64_t nbc = (cols + spec.block_cols - 1) / spec.block_cols;
  q.scale_codes.resize(static_cast<std::size_t>(nbr * nbc));
  // Two-level scales need the tensor's amax before any block's scale.
  float tensor_amax = 0;
  if (spec.scale == ScaleFormat::e4m3) {
    tensor_amax = io.amax ? io.amax() : amax_of_rows(rows, cols, io.load);
    q.tensor_scale = spec.rule == ScaleRule::te ? detail::te_nvfp4_tensor_scale(tensor_amax) : nvfp4_tensor_scale(tensor_amax);
  }
  if (spec.rounding == Rounding::stochastic) {
    quantize_strips<Rounding::stochastic>(rows, cols, spec, seed, io, tensor_amax, q);
  } else {
    quantize_strips<Rounding::nearest_even>(rows, cols, spec, seed, io, tensor_amax, q);
  }
  return q;
}

}  // namespace detail

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

float decode_e8m0(std::uint8_t bits) { return detail::e8m0_value(bits); }

float decode_scale(ScaleFormat format, std::uint8_t bits) {
  return format == ScaleFormat::e8m0 ? decode_e8m0(bits) : std::bit_cast<float>(detail::decode_bits(e4m3_decoding(), bits));
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
  if (along_rows) {
    // Each group of 16 rows at once, hadamard16_group's operations on whole rows (vectorized over them).
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
    for (std::int64_t g = 0; g < rows / 16; ++g) {
      float* r[16];
      for (int k = 0; k < 16; ++k) r[k] = x.data() + (g * 16 + k) * cols;
      for (int k = 0; k < 16; ++k) {
        if ((signs >> k) & 1U) {
          for (std::int64_t c = 0; c < cols; ++c) r[k][c] = -r[k][c];
        }
      }
      for (int h = 1; h < 16; h *= 2) {
        for (int i = 0; i < 16; i += 2 * h) {
          for (int j = i; j < i + h; ++j) {
            float* a = r[j];
            float* b = r[j + h];
            for (std::int64_t c = 0; c < cols; ++c) {
              const float u = a[c], v = b[c];
              a[c] = u + v;
              b[c] = u - v;
            }
          }
        }
      }
      for (int k = 0; k < 16; ++k) {
        for (std::int64_t c = 0; c < cols; ++c) r[k][c] *= 0.25f;
      }
    }
    return;
  }
  // Along the columns: element k of group g of row l at l * cols + g * 16 + k.
  const std::int64_t lines = rows, step = 1;
#pragma omp parallel for schedule(static) if (rows * cols >= 65536)
  for (std::int64_t l = 0; l < lines; ++l) {
    for (std::int64_t g = 0; g < n / 16; ++g) {
      float* base = x.data() + l * cols + g * 16;
      float v[16];
      for (int k = 0; k < 16; ++k) v[k] = base[k * step];
      hadamard16_group(v, signs);
      for (int k = 0; k < 16; ++k) base[k * step] = v[k];
    }
  }
}

}  // namespace mantissa
