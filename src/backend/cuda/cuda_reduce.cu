// CUDA kernels of the reduction and embedding families. A reduction runs one block per output element,
// its threads striding over the reduced elements and summing in f32 (max keeps a NaN); the embedding
// gathers rows and its backward adds each gradient row into its id's row with f32 atomics (the order of
// the additions, and so the last bits of a row that many ids share, can vary from run to run).
#include <algorithm>

#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

__global__ void reduce_kernel(Strided<2> kept, Strided<1> reduced, std::int64_t count, ReduceOp op, ElementType tx,
                              const void* x, ElementType tout, void* out) {
  __shared__ float scratch[kThreads / 32];
  std::int64_t base[2];
  kept.offsets(blockIdx.x, base);  // base[0] into x, base[1] into out
  const bool max = op == ReduceOp::max;
  float acc = max ? -INFINITY : 0.0f;
  bool nan = false;
  for (std::int64_t i = threadIdx.x; i < count; i += kThreads) {
    std::int64_t o[1];
    reduced.offsets(i, o);
    const float v = load(tx, x, base[0] + o[0]);
    if (max) {
      nan |= v != v;
      acc = fmaxf(acc, v);
    } else {
      acc += v;
    }
  }
  if (max) {
    const float any_nan = block_sum(nan ? 1.0f : 0.0f, scratch);
    acc = block_max(acc, scratch);
    if (any_nan > 0) acc = NAN;
  } else {
    acc = block_sum(acc, scratch);
    if (op == ReduceOp::mean) acc /= static_cast<float>(count);
  }
  if (threadIdx.x == 0) store(tout, out, base[1], acc);
}

__global__ void embedding_kernel(std::int64_t n, std::int64_t d, ElementType tw, const void* w, std::int64_t wr,
                                 std::int64_t wc, const std::int64_t* ids, ElementType tout, void* out, std::int64_t orow,
                                 std::int64_t ocol) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * d;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / d, c = i % d;
    store(tout, out, r * orow + c * ocol, load(tw, w, ids[r] * wr + c * wc));
  }
}

__global__ void embedding_backward_kernel(std::int64_t n, std::int64_t d, const std::int64_t* ids, ElementType tg,
                                          const void* g, std::int64_t grow, std::int64_t gcol, float* gw, std::int64_t gwr,
                                          std::int64_t gwc) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * d;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / d, c = i % d;
    atomicAdd(gw + ids[r] * gwr + c * gwc, load(tg, g, r * grow + c * gcol));
  }
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, std::span<const int> axes, const Tensor& out) {
  for (const Tensor* t : {&x, &out}) refuse_f64("reduce", *t);
  if (out.numel() == 0) return;
  // The kept axes (out's shape, with x's and out's strides) and the reduced ones (x's strides).
  Shape kept_shape, kept_x, kept_out, red_shape, red_x;
  std::int64_t count = 1;
  for (std::size_t d = 0; d < x.shape().size(); ++d) {
    const bool reduced_axis = std::find(axes.begin(), axes.end(), static_cast<int>(d)) != axes.end();
    if (reduced_axis) {
      red_shape.push_back(x.shape()[d]);
      red_x.push_back(x.strides()[d]);
      count *= x.shape()[d];
    } else {
      kept_shape.push_back(x.shape()[d]);
      kept_x.push_back(x.strides()[d]);
      kept_out.push_back(out.strides()[d]);
    }
  }
  if (out.numel() > 0x7fffffff) throw std::invalid_argument("reduce: too many outputs for one launch");
  const Tensor kx = make_view(x, kept_shape, kept_x, 0), ko = make_view(out, kept_shape, kept_out, 0);
  const Tensor rx = make_view(x, red_shape, red_x, 0);
  const Tensor* kept[2] = {&kx, &ko};
  const Tensor* red[1] = {&rx};
  reduce_kernel<<<static_cast<unsigned>(out.numel()), kThreads, 0, stream()>>>(
      strided(kept_shape, kept, "reduce"), strided(red_shape, red, "reduce"), count, op, element_type(x.dtype()), x.data(),
      element_type(out.dtype()), out.data());
  check_launch("reduce");
}

void embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) {
  for (const Tensor* t : {&weight, &out}) refuse_f64("embedding", *t);
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t d = weight.size(1);
  if (n == 0 || d == 0) return;
  const Tensor on_gpu = indices_on_gpu(ids, weight.device());
  embedding_kernel<<<blocks_for(n * d), kThreads, 0, stream()>>>(
      n, d, element_type(weight.dtype()), weight.data(), weight.strides()[0], weight.strides()[1],
      static_cast<const std::int64_t*>(on_gpu.data()), element_type(out.dtype()), out.data(), out.strides()[0],
      out.strides()[1]);
  check_launch("embedding");
}

void embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) {
  refuse_f64("embedding_backward", grad_out);
  if (grad_weight.dtype() != DType::f32) throw std::invalid_argument("embedding_backward: an f32 grad_weight");
  const auto n = static_cast<std::int64_t>(ids.size());
  const std::int64_t d = grad_weight.size(1);
  if (n == 0 || d == 0) return;
  const Tensor on_gpu = indices_on_gpu(ids, grad_out.device());
  embedding_backward_kernel<<<blocks_for(n * d), kThreads, 0, stream()>>>(
      n, d, static_cast<const std::int64_t*>(on_gpu.data()), element_type(grad_out.dtype()), grad_out.data(),
      grad_out.strides()[0], grad_out.strides()[1], grad_weight.data_as<float>(), grad_weight.strides()[0],
      grad_weight.strides()[1]);
  check_launch("embedding_backward");
}

}  // namespace mantissa::detail::cuda
