// The FP8 kernels as their definitions say, one element at a time: amax in double, each value scaled
// in f32 and rounded by the format's own rule (encode() with saturation, then decode()), the scaled
// product summed in double. The oracle of cpu_fp8.cpp.
#include <cmath>
#include <limits>
#include <vector>

#include "../../core/element_io.h"
#include "../fit_quantize.h"
#include "mantissa/numeric/convert.h"
#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {

void reference_fp8_amax(const Tensor& x, std::int64_t block_rows, std::int64_t block_cols, const Tensor& amax) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::vector<double> m(static_cast<std::size_t>(amax.numel()), 0.0);
  const std::int64_t nbc = amax.size(1);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const double v = std::fabs(load_element(x.dtype(), x.data(), r * x.strides()[0] + c * x.strides()[1]));
      double& a = m[static_cast<std::size_t>((r / block_rows) * nbc + c / block_cols)];
      if (std::isfinite(v) && v > a) a = v;
    }
  }
  for (std::int64_t i = 0; i < amax.numel(); ++i) store_element(DType::f32, amax.data(), i, m[static_cast<std::size_t>(i)]);
}

Fp8QuantizeStats reference_fp8_quantize(const Tensor& x, Format format, const Tensor& scales, std::int64_t block_rows,
                                        std::int64_t block_cols, bool dequantize, const Tensor& out) {
  const std::int64_t rows = x.size(0), cols = x.size(1), nbc = scales.size(1);
  const CastOptions saturating{Rounding::nearest_even, /*saturate=*/true, 0};
  const float max_finite = decode(format, format.max_finite_bits());
  Fp8QuantizeStats st;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const float v = static_cast<float>(load_element(x.dtype(), x.data(), r * x.strides()[0] + c * x.strides()[1]));
      const float s = static_cast<float>(load_element(DType::f32, scales.data(), (r / block_rows) * nbc + c / block_cols));
      const float scaled = v * s;
      float q = scaled;  // inf and NaN stay
      if (std::isfinite(v)) {
        st.amax = std::max(st.amax, static_cast<double>(std::fabs(v)));
        q = decode(format, encode(format, scaled, saturating));
        // Saturated: the scaled value lay past the largest finite value by more than rounding reaches.
        if (std::fabs(scaled) > max_finite && decode(format, encode(format, scaled)) != q) ++st.saturated;
        if (scaled != 0 && q == 0) ++st.underflowed;
        if (dequantize) q = q * (1.0f / s);
      } else {
        ++st.nonfinite;
      }
      store_element(out.dtype(), out.data(), r * out.strides()[0] + c * out.strides()[1], q);  // bf16 or the fp8 grid's own
    }
  }
  st.count = rows * cols;
  return st;
}

Fp8QuantizeStats reference_fp8_quantize_current(const Tensor& x, Format format, std::int64_t block_rows,
                                                std::int64_t block_cols, int margin, bool power_of_2, bool dequantize,
                                                const Tensor& scales, const Tensor& out) {
  reference_fp8_amax(x, block_rows, block_cols, scales);
  float* s = scales.data_as<float>();
  for (std::int64_t i = 0; i < scales.numel(); ++i) s[i] = fp8_scale_for(s[i], format, margin, power_of_2);
  return reference_fp8_quantize(x, format, scales, block_rows, block_cols, dequantize, out);
}

void reference_scaled_matmul(const Tensor& a, const Tensor& w, const ProductScale& scale, const Tensor& bias,
                             const Tensor& out) {  // (any operand dtype: each value loaded as it is)
  const double alpha = product_scale_on_host(scale);
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2);
  const Shape& so = out.strides();
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = static_cast<double>(static_cast<float>(alpha)) * product_at(a, w, b, i, j);
        if (bias.defined()) s += load_element(bias.dtype(), bias.data(), j * bias.strides()[0]);
        store_element(out.dtype(), out.data(), b * so[0] + i * so[1] + j * so[2], s);
      }
    }
  }
}

// The block quantizer: the fit rule as the FP8 quantizer above defines it; the others by their
// definition (numeric/microscale.cpp, itself checked against torchao's and the written-out rules in
// microscale_test.cpp) on the values loaded one at a time.
namespace {

Fp8QuantizeStats reference_microscaled(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, const Tensor& out) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  Fp8QuantizeStats st;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      v[static_cast<std::size_t>(r * cols + c)] =
          static_cast<float>(load_element(x.dtype(), x.data(), r * x.strides()[0] + c * x.strides()[1]));
      st.nonfinite += !std::isfinite(v[static_cast<std::size_t>(r * cols + c)]);
    }
  }
  const QuantizedBlocks q = quantize_blocks(v, rows, cols, spec, seed);
  const std::vector<float> back = dequantize_blocks(q, rows, cols, spec, /*with_tensor_scale=*/false);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      store_element(out.dtype(), out.data(), r * out.strides()[0] + c * out.strides()[1], back[static_cast<std::size_t>(r * cols + c)]);
    }
  }
  st.amax = q.amax;
  st.saturated = q.saturated;
  st.underflowed = q.underflowed;
  st.count = rows * cols;
  st.tensor_scale = q.tensor_scale;
  return st;
}

}  // namespace

Fp8QuantizeStats reference_block_quantize(const Tensor& x, const QuantSpec& spec, std::uint64_t seed, float given_scale,
                                          const Tensor& out, const Tensor& counts, const Tensor& factor) {
  check_block_quantize_places(x, spec, out, counts, factor);
  return leave_counts(block_quantize_by(x, spec, given_scale, out, factor, reference_fp8_quantize_current,
                                        reference_fp8_quantize, set_factor_on_host,
                                        [&] { return leave_factor(reference_microscaled(x, spec, seed, out), factor); }),
                      counts);
}

// The transform as hadamard16 defines it, on the values loaded one at a time.
void reference_hadamard_rows(const Tensor& x, std::uint16_t signs, const Tensor& out) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      v[static_cast<std::size_t>(r * cols + c)] =
          static_cast<float>(load_element(x.dtype(), x.data(), r * x.strides()[0] + c * x.strides()[1]));
    }
  }
  hadamard16(v, rows, cols, true, signs);
  for (std::int64_t i = 0; i < rows * cols; ++i) store_element(DType::f32, out.data(), i, v[static_cast<std::size_t>(i)]);
}

}  // namespace mantissa::detail
