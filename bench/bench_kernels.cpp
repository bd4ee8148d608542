// Throughput of the CPU backend's kernels other than matmul (which `mantissa bench matmul` covers):
// elementwise, reductions, softmax, norms, casts, FP8 quantization and convolution, in f32 and bf16, on training-sized
// tensors. Each reports elements per second; compare dtypes and kernels within one run.
#include <benchmark/benchmark.h>

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/autograd/node.h"
#include "mantissa/optim/optimizer.h"
#include "../src/backend/registry.h"
#include "mantissa/ops/ops.h"

namespace {

using mantissa::DType;
using mantissa::Tensor;

constexpr std::int64_t kRows = 256;
constexpr std::int64_t kCols = 4096;

DType dtype_arg(const benchmark::State& state) { return state.range(0) == 0 ? DType::f32 : DType::bf16; }

template <class Op>
void run(benchmark::State& state, std::int64_t elements, Op&& op) {
  mantissa::NoGradGuard no_grad;
  for (auto _ : state) {
    Tensor y = op();
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * elements);
  state.SetLabel(state.range(0) == 0 ? "f32" : "bf16");
}

void BM_Add(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  const Tensor b = Tensor::uniform({kRows, kCols}, dtype_arg(state), 2, -1, 1);
  run(state, kRows * kCols, [&] { return add(a, b); });
}

void BM_AddBias(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  const Tensor b = Tensor::uniform({kCols}, dtype_arg(state), 2, -1, 1);
  run(state, kRows * kCols, [&] { return add(a, b); });
}

void BM_Relu(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  run(state, kRows * kCols, [&] { return relu(a); });
}

void BM_Gelu(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  run(state, kRows * kCols, [&] { return gelu(a); });
}

void BM_SumRows(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  run(state, kRows * kCols, [&] { return sum(a, {1}); });
}

void BM_SumColumns(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  run(state, kRows * kCols, [&] { return sum(a, {0}); });
}

void BM_Softmax(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -4, 4);
  run(state, kRows * kCols, [&] { return softmax(a); });
}

void BM_LayerNorm(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -4, 4);
  const Tensor g = Tensor::full({kCols}, 1, DType::f32);
  const Tensor b = Tensor::zeros({kCols}, DType::f32);
  run(state, kRows * kCols, [&] { return layer_norm(a, g, b); });
}

void BM_CastFromF32(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, DType::f32, 1, -1, 1);
  run(state, kRows * kCols, [&] { return cast(a, dtype_arg(state) == DType::f32 ? DType::f16 : DType::bf16); });
}

void BM_TransposeCopy(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kCols, kRows}, dtype_arg(state), 1, -1, 1);
  run(state, kRows * kCols, [&] { return contiguous(transpose(a, 0, 1)); });
}

void BM_Conv3x3(benchmark::State& state) {
  const Tensor x = Tensor::uniform({32, 64, 28, 28}, dtype_arg(state), 1, -1, 1);
  const Tensor w = Tensor::uniform({64, 64, 3, 3}, dtype_arg(state), 2, -0.1, 0.1);
  run(state, x.numel(), [&] { return conv2d(x, w, {}, {1, 1, 1, 1, 1, 1, 1}); });
}

// A step's gradient check: unscale by 1/65536 (dynamic scaling) and tally norm, non-finite, underflow.
void BM_UnscaleCheck(benchmark::State& state) {
  const Tensor g = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  mantissa::LossScaler scaler(mantissa::LossScalerOptions{});
  const std::vector<Tensor> grads{g};
  for (auto _ : state) {
    benchmark::DoNotOptimize(scaler.unscale(grads).grad_norm);
    scaler.update();
  }
  state.SetItemsProcessed(state.iterations() * kRows * kCols);
  state.SetLabel(state.range(0) == 0 ? "f32" : "bf16");
}

// FP8 quantization with one scale for the tensor (the delayed recipe's kernel): e4m3 values held in bf16.
void BM_Fp8Quantize(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  const Tensor scales = Tensor::full({1, 1}, 256.0, DType::f32);
  const Tensor q = Tensor::empty({kRows, kCols}, DType::bf16);
  run(state, kRows * kCols, [&] {
    mantissa::detail::run_kernel<mantissa::detail::kernel::Fp8Quantize>(mantissa::Device::cpu(), a, mantissa::Format::e4m3(), scales,
                                                                         kRows, kCols, false, q);
    return q;
  });
}

// FP8 block scaling as the block recipe quantizes activations: a power-of-2 scale per 1 x 128 block from
// the block's own amax, values scaled back.
void BM_Fp8QuantizeBlocks(benchmark::State& state) {
  const Tensor a = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1);
  const Tensor scales = Tensor::empty({kRows, kCols / 128}, DType::f32);
  const Tensor q = Tensor::empty({kRows, kCols}, DType::bf16);
  run(state, kRows * kCols, [&] {
    mantissa::detail::run_kernel<mantissa::detail::kernel::Fp8QuantizeCurrent>(mantissa::Device::cpu(), a, mantissa::Format::e4m3(),
                                                                                1, 128, 0, true, true, scales, q);
    return q;
  });
}

// AdamW on one parameter of that dtype with f32 master weights (bf16: the low-precision-model case).
void BM_AdamW(benchmark::State& state) {
  Tensor p = Tensor::uniform({kRows, kCols}, dtype_arg(state), 1, -1, 1).set_requires_grad();
  p.set_grad(Tensor::uniform({kRows, kCols}, dtype_arg(state), 2, -1, 1));
  mantissa::Adam opt({p}, mantissa::AdamOptions{.lr = 1e-3, .weight_decay = 0.01}, true);
  for (auto _ : state) opt.step();
  state.SetItemsProcessed(state.iterations() * kRows * kCols);
  state.SetLabel(state.range(0) == 0 ? "f32" : "bf16");
}

#define MANTISSA_BOTH_DTYPES(bm) BENCHMARK(bm)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond)
MANTISSA_BOTH_DTYPES(BM_Add);
MANTISSA_BOTH_DTYPES(BM_AddBias);
MANTISSA_BOTH_DTYPES(BM_Relu);
MANTISSA_BOTH_DTYPES(BM_Gelu);
MANTISSA_BOTH_DTYPES(BM_SumRows);
MANTISSA_BOTH_DTYPES(BM_SumColumns);
MANTISSA_BOTH_DTYPES(BM_Softmax);
MANTISSA_BOTH_DTYPES(BM_LayerNorm);
MANTISSA_BOTH_DTYPES(BM_CastFromF32);
MANTISSA_BOTH_DTYPES(BM_TransposeCopy);
MANTISSA_BOTH_DTYPES(BM_Conv3x3);
MANTISSA_BOTH_DTYPES(BM_UnscaleCheck);
MANTISSA_BOTH_DTYPES(BM_AdamW);
MANTISSA_BOTH_DTYPES(BM_Fp8Quantize);
MANTISSA_BOTH_DTYPES(BM_Fp8QuantizeBlocks);

}  // namespace

BENCHMARK_MAIN();
