// The fit rule of the block quantizer (QuantSpec with ScaleRule::fit: FP8's per-tensor recipes, delayed
// and current, and its 1 x 128 / 128 x 128 block recipe) on any backend, from that backend's two FP8
// quantizers: current scaling (each block's scale from its amax) and given scales (the delayed
// recipe's). One home for how a spec becomes those kernels' arguments, so every backend reads a spec alike.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels.h"
#include "read_later.h"

namespace mantissa::detail {

// current(x, format, block_rows, block_cols, margin, power_of_2, dequantize, scales, out) and
// given(x, format, scales, block_rows, block_cols, dequantize, out): the backend's Fp8QuantizeCurrent
// and Fp8Quantize; set_factor(factor, scale, value): the backend's way to write, into `factor` (8 bytes
// on x's device, BlockQuantize's), 1 / scale[0] in f64 where `scale` (one f32 on the device) is given,
// else `value`, without a wait. Per-tensor f32 scales leave the values on the fp8 grid and return
// 1 / scale as the tensor scale (or leave it in `factor`); E8M0 block scales come back multiplied in
// (exact: powers of 2), with a tensor scale of 1.
template <class Current, class Given, class SetFactor>
Fp8QuantizeStats fit_quantize(const Tensor& x, const QuantSpec& spec, float given_scale, const Tensor& out,
                              const Tensor& factor, Current current, Given given, SetFactor set_factor) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (!spec.per_tensor()) {
    if (given_scale != 0) throw std::invalid_argument("block_quantize: a given scale is one per tensor, not per block");
    const std::int64_t br = spec.block_rows, bc = spec.block_cols;
    const Tensor scales = Tensor::empty({(rows + br - 1) / br, (cols + bc - 1) / bc}, DType::f32, x.device());
    const Fp8QuantizeStats st = current(x, spec.element, br, bc, spec.margin, /*power_of_2=*/true, /*dequantize=*/true, scales, out);
    if (factor.defined()) set_factor(factor, Tensor(), 1.0);
    return st;
  }
  // One block, the whole tensor (at least 1 x 1: block sizes divide).
  const std::int64_t br = std::max<std::int64_t>(rows, 1), bc = std::max<std::int64_t>(cols, 1);
  Fp8QuantizeStats st;
  Tensor scale;
  if (given_scale != 0) {
    scale = Tensor::full({1, 1}, given_scale, DType::f32, x.device());
    st = given(x, spec.element, scale, br, bc, false, out);
  } else {
    scale = Tensor::empty({1, 1}, DType::f32, x.device());
    st = current(x, spec.element, br, bc, spec.margin, false, false, scale, out);
  }
  if (factor.defined()) {
    set_factor(factor, scale, 0.0);  // on the device: no wait for a fitted scale
    st.tensor_scale = 1;
  } else {
    st.tensor_scale = 1.0 / (given_scale != 0 ? static_cast<double>(given_scale) : scale.item());
  }
  return st;
}

// BlockQuantize's `counts` and `factor` (kernels.h): each undefined, or contiguous bytes on x's device
// (32 and 8); and its `out`: bf16, or the element's fp8 storage dtype for a spec whose values stay on
// that grid (one f32 scale per tensor, fitted).
inline void check_block_quantize_places(const Tensor& x, const QuantSpec& spec, const Tensor& out, const Tensor& counts,
                                        const Tensor& factor) {
  check_place<Fp8Counts>("block_quantize", counts, x.device());
  check_place<double>("block_quantize", factor, x.device());
  if (out.dtype() == DType::bf16) return;
  if (!spec.stays_on_grid() || !is_storage_only(out.dtype()) || dtype_of(spec.element) != out.dtype()) {
    throw std::invalid_argument("block_quantize: out is bf16, or " + spec.element.name() +
                                " storage for a per-tensor f32 scale; got " + std::string(dtype_name(out.dtype())) +
                                " for " + spec.str());
  }
}

// A backend's BlockQuantize: the fit rule by its two FP8 quantizers (above), any other rule by
// microscaled(), which takes no given scale (its scales come from each block) and leaves its tensor
// scale in `factor` itself where one is given.
template <class Current, class Given, class SetFactor, class Microscaled>
Fp8QuantizeStats block_quantize_by(const Tensor& x, const QuantSpec& spec, float given_scale, const Tensor& out,
                                   const Tensor& factor, Current current, Given given, SetFactor set_factor,
                                   Microscaled microscaled) {
  if (spec.rule == ScaleRule::fit) return fit_quantize(x, spec, given_scale, out, factor, current, given, set_factor);
  if (given_scale != 0) throw std::invalid_argument("block_quantize: only the fit rule takes a given scale");
  return microscaled();
}

}  // namespace mantissa::detail
