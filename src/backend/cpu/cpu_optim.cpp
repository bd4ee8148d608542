// Optimizer updates on the CPU: the element rules of optimizer_math.h in f32 over blocks of each
// parameter, blocks split across threads; f32 operands are updated where they are, the others (bf16
// state, low-precision gradients) converted per block. Gradients
// are multiplied by the step's grad_scale as each block is loaded (the loss scaler's fused unscale). Writing an
// f32 master copy back into a low-precision parameter is one bulk conversion, nearest or stochastic.
#include <cmath>
#include <cstring>

#include "optimizer_math.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

template <class Body>
void for_blocks(std::int64_t n, Body&& body) {
  const std::int64_t blocks = (n + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t at = b * kRowBlock;
    body(at, std::min(kRowBlock, n - at));
  }
}

// The f32 values of block [at, at + n) of a contiguous operand: its own memory where it is f32 (and,
// for a gradient, needs no scaling), else a converted copy in buf.
float* block_of(const Tensor& t, std::int64_t at, std::int64_t n, float* buf, bool copy = false) {
  if (t.dtype() == DType::f32 && !copy) return t.data_as<float>() + at;
  load_f32(t, at, 1, n, buf);
  return buf;
}

// Stores a block updated in a copy (block_of's buf) back into its operand.
void store_block(const Tensor& t, std::int64_t at, std::int64_t n, const float* data, const float* buf) {
  if (data == buf) store_f32(t, at, 1, n, buf);
}

// g *= f over a block just loaded (the fused unscale: the block is in L1, so this costs no memory pass).
MANTISSA_VECTOR_CLONES void scale_block(float* g, std::int64_t n, float f) {
  for (std::int64_t i = 0; i < n; ++i) g[i] *= f;
}

MANTISSA_VECTOR_CLONES void sgd_block(float* __restrict p, const float* __restrict g, float* __restrict buf, std::int64_t n,
                                      const SgdStep& s) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = sgd_element(p[i], g[i], buf[i], s);
}

MANTISSA_VECTOR_CLONES void adam_block(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                                       std::int64_t n, const AdamStep& s, float bias1, float bias2_sqrt) {
  const AdamStep local = s;  // a copy the compiler knows no store aliases
  for (std::int64_t i = 0; i < n; ++i) p[i] = adam_element(p[i], g[i], m[i], v[i], local, bias1, bias2_sqrt);
}

}  // namespace

void cpu_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s) {
  for_blocks(param.numel(), [&](std::int64_t at, std::int64_t n) {
    alignas(64) float pb[kRowBlock], gb[kRowBlock], bb[kRowBlock];
    float* p = block_of(param, at, n, pb);
    float* g = block_of(grad, at, n, gb, s.grad_scale != 1);  // scaled in a copy, never in place
    if (s.grad_scale != 1) scale_block(g, n, static_cast<float>(s.grad_scale));
    float* buf = momentum_buffer.defined() ? block_of(momentum_buffer, at, n, bb) : bb;
    sgd_block(p, g, buf, n, s);
    store_block(param, at, n, p, pb);
    if (momentum_buffer.defined()) store_block(momentum_buffer, at, n, buf, bb);
  });
}

void cpu_adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStep& s) {
  const auto bias1 = static_cast<float>(1 - std::pow(s.beta1, static_cast<double>(s.step)));
  const auto bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, static_cast<double>(s.step))));
  for_blocks(param.numel(), [&](std::int64_t at, std::int64_t n) {
    alignas(64) float pb[kRowBlock], gb[kRowBlock], mb[kRowBlock], vb[kRowBlock];
    float* p = block_of(param, at, n, pb);
    float* g = block_of(grad, at, n, gb, s.grad_scale != 1);  // scaled in a copy, never in place
    if (s.grad_scale != 1) scale_block(g, n, static_cast<float>(s.grad_scale));
    float* mv = block_of(m, at, n, mb);
    float* vv = block_of(v, at, n, vb);
    adam_block(p, g, mv, vv, n, s, bias1, bias2_sqrt);
    store_block(param, at, n, p, pb);
    store_block(m, at, n, mv, mb);
    store_block(v, at, n, vv, vb);
  });
}

void cpu_round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) {
  const auto n = static_cast<std::size_t>(src.numel());
  if (dst.dtype() == DType::f32) {
    std::memcpy(dst.data(), src.data(), n * sizeof(float));
    return;
  }
  encode_array(format_of(dst.dtype()), src.data_as<float>(), dst.data(), n, CastOptions{rounding, false, seed}, 0);
}

}  // namespace mantissa::detail
