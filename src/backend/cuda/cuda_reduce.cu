// CUDA kernels of the reduction and embedding families. A reduction runs one block per output element,
// its threads striding over the reduced elements and summing in f32 (max keeps a NaN); a short one over
// many outputs (a position embedding's gradient summed over the batch: 16 values for each of 786k) runs
// one thread per output instead, adjacent threads reading adjacent elements. The embedding gathers rows
// and its backward adds each gradient row into its id's row with f32 atomics (the order of the
// additions, and so the last bits of a row that many ids share, can vary from run to run); the row of
// an element comes from a multiply-high (FastDivisor), not a 64-bit division.
#include <algorithm>

#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

// One reduced value into a running sum, or a running max that remembers whether a NaN went by.
__device__ inline void fold(bool max, float v, float& acc, bool& nan) {
  if (max) {
    nan |= v != v;
    acc = fmaxf(acc, v);
  } else {
    acc += v;
  }
}

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
    fold(max, load(tx, x, base[0] + o[0]), acc, nan);
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

// One thread per output element, summing its `count` reduced elements in order (f32), for reductions
// too short to fill a block.
__global__ void reduce_short_kernel(Strided<2> kept, Strided<1> reduced, std::int64_t outputs, std::int64_t count,
                                    ReduceOp op, ElementType tx, const void* x, ElementType tout, void* out) {
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < outputs;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t base[2];
    kept.offsets(e, base);
    const bool max = op == ReduceOp::max;
    float acc = max ? -INFINITY : 0.0f;
    bool nan = false;
    for (std::int64_t i = 0; i < count; ++i) {
      std::int64_t o[1];
      reduced.offsets(i, o);
      fold(max, load(tx, x, base[0] + o[0]), acc, nan);
    }
    if (max && nan) acc = NAN;
    if (op == ReduceOp::mean) acc /= static_cast<float>(count);
    store(tout, out, base[1], acc);
  }
}

// Row and column of element i of [n, d] rows: a multiply-high where n * d < 2^31, else 64-bit division.
struct RowsOf {
  FastDivisor by_d;
  std::int64_t d;
  bool index32;
  explicit RowsOf(std::int64_t n, std::int64_t d_)
      : by_d(n * d_ <= 0x7fffffff ? FastDivisor(static_cast<std::uint32_t>(d_)) : FastDivisor()), d(d_),
        index32(n * d_ <= 0x7fffffff) {}
  __device__ void split(std::int64_t i, std::int64_t& r, std::int64_t& c) const {
    if (index32) {
      const std::uint32_t q = by_d.quotient(static_cast<std::uint32_t>(i));
      r = q;
      c = i - static_cast<std::int64_t>(q) * d;
    } else {
      r = i / d;
      c = i % d;
    }
  }
};

__global__ void embedding_kernel(std::int64_t n, RowsOf rows, ElementType tw, const void* w, std::int64_t wr,
                                 std::int64_t wc, const std::int64_t* ids, ElementType tout, void* out, std::int64_t orow,
                                 std::int64_t ocol) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * rows.d;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t r, c;
    rows.split(i, r, c);
    store(tout, out, r * orow + c * ocol, load(tw, w, ids[r] * wr + c * wc));
  }
}

__global__ void embedding_backward_kernel(std::int64_t n, RowsOf rows, const std::int64_t* ids, ElementType tg,
                                          const void* g, std::int64_t grow, std::int64_t gcol, float* gw, std::int64_t gwr,
                                          std::int64_t gwc) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * rows.d;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t r, c;
    rows.split(i, r, c);
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
  // Fewer reduced elements than a block has threads, and enough outputs to fill the GPU one per thread.
  if (count < kThreads / 4 && out.numel() >= std::int64_t{1} << 14) {
    reduce_short_kernel<<<blocks_for(out.numel()), kThreads, 0, stream()>>>(
        strided(kept_shape, kept, "reduce"), strided(red_shape, red, "reduce"), out.numel(), count, op,
        element_type(x.dtype()), x.data(), element_type(out.dtype()), out.data());
    check_launch("reduce");
    return;
  }
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
      n, RowsOf(n, d), element_type(weight.dtype()), weight.data(), weight.strides()[0], weight.strides()[1],
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
      n, RowsOf(n, d), static_cast<const std::int64_t*>(on_gpu.data()), element_type(grad_out.dtype()), grad_out.data(),
      grad_out.strides()[0], grad_out.strides()[1], grad_weight.data_as<float>(), grad_weight.strides()[0],
      grad_weight.strides()[1]);
  check_launch("embedding_backward");
}

}  // namespace mantissa::detail::cuda
