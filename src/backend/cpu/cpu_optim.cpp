// Optimizer updates on the CPU: the element rules of optimizer_math.h in f32 over blocks of every
// parameter of the list, the blocks of all of them shared among the threads; f32 operands are updated
// where they are, the others (bf16 state, low-precision gradients) converted per block. Gradients are
// multiplied by the step's grad_scale as each block is loaded (the loss scaler's fused unscale), and a
// master copy's block is written back into its low-precision parameter while it is in cache.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "optimizer_math.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// body(u, at, n) for every block [at, at + n) of every parameter u of the list.
template <class Body>
void for_list_blocks(std::span<const ParamUpdate> list, Body&& body) {
  std::vector<std::int64_t> first_block(list.size() + 1, 0);  // the list's blocks numbered in order
  std::int64_t elements = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::int64_t n = list[i].param.numel();
    first_block[i + 1] = first_block[i] + (n + kRowBlock - 1) / kRowBlock;
    elements += n;
  }
  const std::int64_t blocks = first_block.back();
#pragma omp parallel for schedule(static) if (elements >= (1 << 15))
  for (std::int64_t b = 0; b < blocks; ++b) {
    const auto i = static_cast<std::size_t>(std::upper_bound(first_block.begin(), first_block.end(), b) - first_block.begin() - 1);
    const std::int64_t at = (b - first_block[i]) * kRowBlock;
    body(list[i], at, std::min(kRowBlock, list[i].param.numel() - at));
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
                                      const SgdStep& s, bool first) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = sgd_element(p[i], g[i], buf[i], s, first);
}

MANTISSA_VECTOR_CLONES void adam_block(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                                       std::int64_t n, const AdamStep& s, float bias1, float bias2_sqrt) {
  const AdamStep local = s;  // a copy the compiler knows no store aliases
  for (std::int64_t i = 0; i < n; ++i) p[i] = adam_element(p[i], g[i], m[i], v[i], local, bias1, bias2_sqrt);
}

// A master copy's updated block into its low-precision parameter (bits by element index, so a block
// gives what the whole array would).
void write_back_block(const ParamUpdate& u, std::int64_t at, std::int64_t n, const float* p, const WriteBack& w) {
  if (!u.low.defined()) return;
  auto* dst = static_cast<char*>(u.low.data()) + at * static_cast<std::int64_t>(dtype_size(u.low.dtype()));
  if (u.low.dtype() == DType::f32) {
    std::memcpy(dst, p, static_cast<std::size_t>(n) * sizeof(float));
    return;
  }
  encode_array(format_of(u.low.dtype()), p, dst, static_cast<std::size_t>(n), CastOptions{w.rounding, false, w.seed},
               static_cast<std::uint64_t>(at));
}

}  // namespace

void cpu_sgd_update(std::span<const ParamUpdate> list, const SgdStep& s, const WriteBack& w) {
  for_list_blocks(list, [&](const ParamUpdate& u, std::int64_t at, std::int64_t n) {
    alignas(64) float pb[kRowBlock], gb[kRowBlock], bb[kRowBlock];
    const Tensor& buffer = u.state[0];
    float* p = block_of(u.param, at, n, pb);
    float* g = block_of(u.grad, at, n, gb, s.grad_scale != 1);  // scaled in a copy, never in place
    if (s.grad_scale != 1) scale_block(g, n, static_cast<float>(s.grad_scale));
    float* buf = buffer.defined() ? block_of(buffer, at, n, bb) : bb;
    sgd_block(p, g, buf, n, s, u.first);
    store_block(u.param, at, n, p, pb);
    if (buffer.defined()) store_block(buffer, at, n, buf, bb);
    write_back_block(u, at, n, p, w);
  });
}

void cpu_adam_update(std::span<const ParamUpdate> list, const AdamStep& s, const WriteBack& w) {
  const auto bias1 = static_cast<float>(1 - std::pow(s.beta1, static_cast<double>(s.step)));
  const auto bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, static_cast<double>(s.step))));
  for_list_blocks(list, [&](const ParamUpdate& u, std::int64_t at, std::int64_t n) {
    alignas(64) float pb[kRowBlock], gb[kRowBlock], mb[kRowBlock], vb[kRowBlock];
    float* p = block_of(u.param, at, n, pb);
    float* g = block_of(u.grad, at, n, gb, s.grad_scale != 1);  // scaled in a copy, never in place
    if (s.grad_scale != 1) scale_block(g, n, static_cast<float>(s.grad_scale));
    float* mv = block_of(u.state[0], at, n, mb);
    float* vv = block_of(u.state[1], at, n, vb);
    adam_block(p, g, mv, vv, n, s, bias1, bias2_sqrt);
    store_block(u.param, at, n, p, pb);
    store_block(u.state[0], at, n, mv, mb);
    store_block(u.state[1], at, n, vv, vb);
    write_back_block(u, at, n, p, w);
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
