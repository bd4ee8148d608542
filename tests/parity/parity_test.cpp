// The cpu backend (oneDNN and f32 row kernels), and the cuda backend where a GPU is present, against the
// reference backend (double loops), for every op of the shared table and a few large cases, in f32, bf16
// and f16, forward and backward, on fresh random inputs. A cuda case is skipped, with the reason, where
// there is no GPU or where the CUDA backend lacks a kernel the op needs (the skip names it). New allocations are poisoned with NaN, so an output element a kernel forgets to write
// fails the comparison.
//
// Tolerances follow from the formats, not from looking at differences:
// - forward, per element: `roundings` roundings into the output dtype, the last eps_out |ref| and each
//   earlier one (an intermediate, as a convolution's result before its bias, which a cancelling sum
//   after it can leave larger than the element) eps_out M (every one eps_out M for normwise-bound
//   cases, which round intermediates such as attention's probabilities), plus f32
//   accumulation over `reduction` terms and the f32 functions' own error (kFunctionUlps), relative to
//   the case's bound M: eps_f32 (reduction + kFunctionUlps) M;
// - gradients, normwise per input: the forward's roundings plus kBackwardRoundings more in the input
//   dtype, and the same f32 accumulation term, relative to the largest reference gradient: the
//   gradient's own magnitude. (Scaling it by the largest output as well let a loss's value (60 for
//   cross_entropy_confident) widen the bound until an all-zero bf16 gradient passed.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../common/op_cases.h"
#include "../unit/test_support.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

using testing::Bound;
using testing::Case;

constexpr double kEpsF32 = 0x1p-23;
constexpr int kFunctionUlps = 4;       // glibc's f32 exp, log, erf, tanh are within a few ulps
constexpr int kBackwardRoundings = 4;  // backward rules round into the dtype a few times more

struct Outcome {
  Tensor out;
  std::vector<Tensor> grads;
};

Outcome run_on(CpuBackend backend, const Case& c, DType dtype, std::uint64_t seed) {
  CpuBackendScope scope(backend);
  std::vector<Tensor> in;
  for (std::size_t k = 0; k < c.inputs.size(); ++k) in.push_back(testing::make_input(c.inputs[k], seed + k, dtype));
  Outcome r;
  r.out = c.fn(in);
  const Tensor seed_grad = Tensor::uniform(r.out.shape(), r.out.dtype(), seed + 100, -1, 1);
  r.out.backward(seed_grad);
  for (const Tensor& x : in) r.grads.push_back(x.grad());
  return r;
}

// The same on the GPU: inputs made on the CPU from the same seeds, moved to cuda:0 (their gradients come
// back through to_device), the op and its backward run there, the results brought back.
Outcome run_on_cuda(const Case& c, DType dtype, std::uint64_t seed) {
  const Device gpu{DeviceType::cuda, 0};
  std::vector<Tensor> in, on_gpu;
  for (std::size_t k = 0; k < c.inputs.size(); ++k) {
    in.push_back(testing::make_input(c.inputs[k], seed + k, dtype));
    on_gpu.push_back(to_device(in.back(), gpu));
  }
  const Tensor out = c.fn(on_gpu);
  const Tensor seed_grad = Tensor::uniform(out.shape(), out.dtype(), seed + 100, -1, 1);
  out.backward(seed_grad.to(gpu));
  Outcome r;
  r.out = out.to(Device::cpu());
  for (const Tensor& x : in) r.grads.push_back(x.grad());
  return r;
}

// The case's bound M for each output element (see the file comment), in f64.
std::vector<double> bound_of(const Case& c, DType dtype, std::uint64_t seed, const std::vector<double>& ref) {
  std::vector<double> m(ref.size());
  if (c.bound == Bound::abs_inputs) {
    CpuBackendScope scope(CpuBackend::reference);
    NoGradGuard no_grad;
    std::vector<Tensor> in;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      in.push_back(abs(cast(testing::make_input(c.inputs[k], seed + k, dtype), DType::f64)));
    }
    const std::vector<double> v = c.fn(in).to_doubles();
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = std::fabs(v[i]);
  } else if (c.bound == Bound::normwise) {
    double mx = 0;
    for (double v : ref) mx = std::max(mx, std::fabs(v));
    std::fill(m.begin(), m.end(), mx);
  } else {
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = std::fabs(ref[i]);
  }
  return m;
}

struct Param {
  Case c;
  DType dtype;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.c.name << "/" << dtype_name(p.dtype); }

class Parity : public ::testing::TestWithParam<Param> {};

// Compares a backend's outcome with the reference's under the tolerances of the file comment.
void expect_matches_reference(const Case& c, DType dtype, std::uint64_t seed, const Outcome& ref, const Outcome& got) {
  ASSERT_EQ(got.out.shape(), ref.out.shape());
  ASSERT_EQ(got.out.dtype(), ref.out.dtype());
  const std::vector<double> r = ref.out.to_doubles();
  const std::vector<double> g = got.out.to_doubles();
  const std::vector<double> m = bound_of(c, dtype, seed, r);
  const double eps_out = dtype_epsilon(ref.out.dtype());
  const double accumulate = kEpsF32 * static_cast<double>(c.reduction + kFunctionUlps);
  for (std::size_t i = 0; i < r.size(); ++i) {
    ASSERT_FALSE(std::isnan(r[i])) << "reference left element " << i << " unwritten";
    // The last rounding scales with the element. The others round intermediates into the output dtype
    // (a convolution's result before its bias is added; attention's probabilities before their product
    // with v), which can be larger than the element: a sum that cancels after them. Their errors scale
    // with the bound, which bounds every intermediate's magnitude (and normwise cases' last rounding too).
    const double last = c.bound == Bound::normwise ? m[i] : std::fabs(r[i]);
    const double tol = eps_out * last + (c.roundings - 1) * eps_out * m[i] + accumulate * m[i];
    ASSERT_NEAR(g[i], r[i], tol) << "output element " << i;
  }

  for (std::size_t k = 0; k < ref.grads.size(); ++k) {
    ASSERT_TRUE(got.grads[k].defined()) << "no gradient for input " << k;
    ASSERT_EQ(got.grads[k].dtype(), dtype);
    const std::vector<double> rg = ref.grads[k].to_doubles();
    const std::vector<double> gg = got.grads[k].to_doubles();
    double scale = 0;
    for (double v : rg) scale = std::max(scale, std::fabs(v));
    const double tol = ((c.roundings + kBackwardRoundings) * dtype_epsilon(dtype) + accumulate) * scale;
    for (std::size_t i = 0; i < rg.size(); ++i) {
      ASSERT_NEAR(gg[i], rg[i], tol) << "gradient of input " << k << " element " << i;
    }
  }
}

TEST_P(Parity, CpuBackendMatchesReference) {
  MANTISSA_TRACE_SEED();
  const Case& c = GetParam().c;
  const DType dtype = GetParam().dtype;
  const std::uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(c.name);
  set_allocation_poisoning(true);
  const Outcome ref = run_on(CpuBackend::reference, c, dtype, seed);
  const Outcome got = run_on(CpuBackend::onednn, c, dtype, seed);
  set_allocation_poisoning(false);
  expect_matches_reference(c, dtype, seed, ref, got);
}

TEST_P(Parity, CudaBackendMatchesReference) {
  if (!cuda_available()) GTEST_SKIP() << cuda_info().unavailable;
  MANTISSA_TRACE_SEED();
  const Case& c = GetParam().c;
  const DType dtype = GetParam().dtype;
  const std::uint64_t seed = testing::test_seed() ^ std::hash<std::string>{}(c.name);
  set_allocation_poisoning(true);  // on the GPU too: an output element a kernel leaves unwritten is NaN
  const Outcome ref = run_on(CpuBackend::reference, c, dtype, seed);
  Outcome got;
  try {
    got = run_on_cuda(c, dtype, seed);
    set_allocation_poisoning(false);
  } catch (const std::runtime_error& e) {
    set_allocation_poisoning(false);
    // A kernel the CUDA backend does not have yet: reported, with its name, as skipped.
    if (std::string(e.what()).find("no kernel for device cuda") != std::string::npos) GTEST_SKIP() << e.what();
    throw;
  }
  expect_matches_reference(c, dtype, seed, ref, got);
}

// Shapes large enough for oneDNN's blocking, the f16 blocks (512 rows, 256 deep) and the threads.
std::vector<Case> large_cases() {
  using V = const std::vector<Tensor>&;
  const auto A = Bound::abs_inputs;
  std::vector<Case> c;
  c.push_back({"matmul_large", {{{600, 300}}, {{300, 130}, testing::Layout::transposed}},
               [](V x) { return matmul(x[0], x[1]); }, 600, 1, A});
  // A wide row-major right operand: the f32 path reorders it first (cpu_matmul.cpp, worth_reordering);
  // the backward's products cover the transposed operands.
  c.push_back({"matmul_row_major_weights_large", {{{512, 6}}, {{6, 2304}}}, [](V x) { return matmul(x[0], x[1]); },
               6, 1, A});
  // Rows of attention scores longer than a vector loop's tail, several threads.
  c.push_back({"self_attention_large", {{{2, 130, 3 * 8}}}, [](V x) { return self_attention(x[0], 2); },
               130, 3, Bound::normwise});
  c.push_back({"self_attention_blocked_large", {{{2, 130, 3 * 8}}}, [](V x) { return self_attention(x[0], 2, true, 32); },
               130, 3, Bound::normwise});
  // Heads of 64, as GPT-2's: on a GPU in bf16 and fp16 this is cuDNN's fused attention where it is there.
  c.push_back({"self_attention_heads_of_64_large", {{{2, 72, 3 * 128}}}, [](V x) { return self_attention(x[0], 2); },
               72, 3, Bound::normwise});
  c.push_back({"linear_batched_large", {{{3, 70, 96}}, {{80, 96}}, {{80}}},
               [](V x) { return linear(x[0], x[1], x[2]); }, 210, 2, A});
  // GPT-2's MLP as one op, 4x wide: on a GPU cuBLASLt's GELU epilogues (rows a multiple of 8 values;
  // the op case of the table, 6 wide, takes the product-then-GELU way).
  c.push_back({"gelu_mlp_large", {{{3, 40, 64}}, {{256, 64}}, {{256}}, {{64, 256}}, {{64}}},
               [](V x) { return gelu_mlp(x[0], x[1], x[2], x[3], x[4]); }, 320, 3, Bound::normwise});
  c.push_back({"gelu_large", {{{300, 257}}}, [](V x) { return gelu(x[0]); }});
  c.push_back({"gelu_tanh_large", {{{300, 257}}}, [](V x) { return gelu_tanh(x[0]); }});
  c.push_back({"add_broadcast_large", {{{257, 300}, testing::Layout::transposed}, {{300}}},
               [](V x) { return add(x[0], x[1]); }});
  c.push_back({"sum_columns_large", {{{400, 170}}}, [](V x) { return sum(x[0], {0}); }, 400, 1, A});
  c.push_back({"softmax_large", {{{200, 513}}}, [](V x) { return softmax(x[0]); }, 513});
  c.push_back({"conv2d_large", {{{4, 16, 14, 14}}, {{32, 16, 3, 3}}},
               [](V x) { return conv2d(x[0], x[1], {}, {1, 1, 1, 1, 1, 1, 1}); }, 144, 1, A});
  // Channels that do not fill the blocks of 8 and planes of more than 512 positions: the bf16 fallback's
  // conversion into and out of oneDNN's nChw8c layout (AVX2), padding and spans included.
  c.push_back({"conv2d_ragged_channels_large", {{{2, 12, 24, 25}}, {{20, 12, 3, 3}}},
               [](V x) { return conv2d(x[0], x[1], {}, {1, 1, 1, 1, 1, 1, 1}); }, 108, 1, A});
  // 33 images: the cpu kernel's chunks of 8 images, the last one short, across threads.
  c.push_back({"batch_norm_large", {{{33, 24, 7, 7}}, {{24}}, {{24}}}, [](V x) {
                 return batch_norm(x[0], x[1], x[2], Tensor::zeros({24}, DType::f32, x[0].device()),
                                   Tensor::full({24}, 1, DType::f32, x[0].device()), true);
               }, 1617, 2, Bound::normwise});
  // Data far from zero (mean ~1000, spread 1): the statistics must not cancel away.
  c.push_back({"batch_norm_offset", {{{9, 3, 4, 4}, testing::Layout::contiguous, 1000, 1001}, {{3}}, {{3}}}, [](V x) {
                 return batch_norm(x[0], x[1], x[2], Tensor::zeros({3}, DType::f32, x[0].device()),
                                   Tensor::full({3}, 1, DType::f32, x[0].device()), true);
               }, 144, 2, Bound::normwise});
  // Parameters kept in f32 while the data is in the test's dtype: oneDNN's layer norm path for bf16.
  c.push_back({"layer_norm_f32_params_large", {{{64, 384}}, {{384}}, {{384}}}, [](V x) {
                 return layer_norm(x[0], cast(x[1], DType::f32), cast(x[2], DType::f32));
               }, 768, 2, Bound::normwise});
  // Rows as GPT-2's (768 columns: the GPU's warp-per-row kernels, 24 values a lane, 3 packs of 8 on the
  // forward's packed path), the widest those take (1024: 4 packs a lane) and past it (1025 columns: the
  // block-per-row kernels), data far from zero.
  for (const std::int64_t cols : {768, 1024, 1025}) {
    c.push_back({"layer_norm_" + std::to_string(cols) + "_columns", {{{9, cols}, testing::Layout::contiguous, 50, 52}, {{cols}}, {{cols}}},
                 [](V x) { return layer_norm(x[0], x[1], x[2]); }, 2 * cols, 2, Bound::normwise});
  }
  // An f32 input's layer norm made in the test's dtype for a product (a GPT block's under autocast): on a
  // GPU the packed forward and the one-pass backward with an f32 x and a bf16/f16 gradient (768 columns),
  // the block forward and the warp backward (100).
  for (const std::int64_t cols : {768, 100}) {
    c.push_back({"layer_norm_for_a_product_" + std::to_string(cols), {{{9, cols}, testing::Layout::contiguous, 50, 52}, {{cols}}, {{cols}}},
                 [](V x) { return layer_norm(cast(x[0], DType::f32), x[1], x[2], 1e-5, x[0].dtype()); }, 2 * cols, 2, Bound::normwise});
  }
  // The residual sum and its norm in one pass (a GPT block's norms): in the test's dtype (1024 columns: the
  // GPU's packed kernel at 4 packs a lane), and an f32 stream with the branch and the output in the test's
  // dtype (768: packed; 100: the add, then the norm). Both outputs used.
  c.push_back({"add_layer_norm_1024_columns", {{{9, 1024}, testing::Layout::contiguous, 50, 52}, {{9, 1024}}, {{1024}}, {{1024}}},
               [](V x) {
                 const auto [sum, norm] = add_layer_norm(x[0], x[1], x[2], x[3], 1e-5, x[0].dtype());
                 return add(sum, norm);
               }, 2 * 1024, 3, Bound::normwise});
  for (const std::int64_t cols : {768, 100}) {
    c.push_back({"add_layer_norm_for_a_product_" + std::to_string(cols),
                 {{{9, cols}, testing::Layout::contiguous, 50, 52}, {{9, cols}}, {{cols}}, {{cols}}}, [](V x) {
                   const auto [sum, norm] = add_layer_norm(cast(x[0], DType::f32), x[1], x[2], x[3], 1e-5, x[1].dtype());
                   return add(cast(sum, x[1].dtype()), norm);
                 }, 2 * cols, 3, Bound::normwise});
  }
  // More rows than the GPU's fused layer norm backward has warps (512 blocks of 4): a warp adds a second
  // row into its share of grad_gamma and grad_beta, sums over 2051 rows.
  c.push_back({"layer_norm_many_rows", {{{2051, 40}}, {{40}}, {{40}}}, [](V x) { return layer_norm(x[0], x[1], x[2]); },
               2051, 2, Bound::normwise});
  // Rows the GPU's packed cross-entropy kernels take (columns a multiple of 8, 16-byte accesses): kept in
  // shared memory between the backward's two passes (4104 columns), and in f32 too wide for that
  // (28168 columns, 110 KiB); then the kept classifier's gradient written over its logits with its
  // losses by the packed backward.
  for (const std::int64_t cols : {4104, 28168}) {
    c.push_back({"cross_entropy_packed_" + std::to_string(cols), {{{5, cols}}}, [cols](V x) {
                   const std::int64_t t[] = {1, -100, cols - 1, 7, 0};
                   return cross_entropy(x[0], t, Reduction::mean, -100, 0.1);
                 }, 5 * cols, 1, Bound::normwise});
  }
  c.push_back({"linear_cross_entropy_kept_packed", {{{9, 16}}, {{1032, 16}}}, [](V x) {
                 const std::int64_t t[] = {1, 0, 1031, -100, 2, 3, 4, 500, 9};
                 return linear_cross_entropy(x[0], x[1], t, Reduction::mean, -100, 0.1, 0, ClassifierGradient::kept);
               }, 16 * 1032, 2, Bound::normwise});
  c.push_back({"max_pool2d_large", {{{8, 16, 28, 28}}}, [](V x) { return max_pool2d(x[0], 2, 2); }});
  return c;
}

std::vector<Param> params() {
  std::vector<Param> p;
  std::vector<Case> cases = testing::op_cases();
  for (Case& c : large_cases()) cases.push_back(std::move(c));
  for (const Case& c : cases) {
    for (DType t : {DType::f32, DType::bf16, DType::f16}) p.push_back({c, t});
  }
  return p;
}

INSTANTIATE_TEST_SUITE_P(Ops, Parity, ::testing::ValuesIn(params()), [](const ::testing::TestParamInfo<Param>& p) {
  return p.param.c.name + "_" + std::string(dtype_name(p.param.dtype));
});

}  // namespace
}  // namespace mantissa
