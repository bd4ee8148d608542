// CUDA kernels that work a row at a time, one block of kThreads threads per row, statistics in f32:
// softmax and log-softmax with their backward, the attention softmax (scaled, causal) with its backward,
// cross-entropy (both directions from the logits) with label smoothing and an ignored index, and layer
// norm with its backward (rows of up to 1024 columns a warp per row instead, the backward in one pass).
// Each follows its contract in kernels.h and the reference's formulas; values are rounded once on store.
// Cross-entropy's and layer norm's kernels, the step's hot ones, are compiled per dtype where their
// tensors share one of f32, bf16 and f16 (flat_types.cuh), and issue their loads before they use them;
// cross-entropy's read aligned rows 16 bytes at a time and its backward keeps a row in shared memory.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "flat_types.cuh"
#include "online_softmax.h"

namespace mantissa::detail::cuda {
namespace {

// f(c, v) for the columns c of a row that this thread takes (threadIdx.x, then kThreads on, ...), in
// that order, with v = value(c): loaded kRowChunk at a time before any is used, so that a chunk's loads
// are in flight together (with a load and its use in each iteration a thread waits on every load: the
// first GPU run had cross-entropy at 13% of the device's copy rate). f is called in the loop's order, so
// sums add as before.
constexpr int kRowChunk = 8;
template <class Value, class F>
__device__ void for_row(std::int64_t cols, Value value, F f) {
  for (std::int64_t c0 = threadIdx.x; c0 < cols; c0 += static_cast<std::int64_t>(kThreads) * kRowChunk) {
    float v[kRowChunk];
#pragma unroll
    for (int k = 0; k < kRowChunk; ++k) {
      const std::int64_t c = c0 + static_cast<std::int64_t>(k) * kThreads;
      v[k] = c < cols ? value(c) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kRowChunk; ++k) {
      const std::int64_t c = c0 + static_cast<std::int64_t>(k) * kThreads;
      if (c < cols) f(c, v[k]);
    }
  }
}

__global__ void softmax_kernel(Rows x, ElementType tx, const void* xp, Rows y, ElementType ty, void* yp, bool log) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  float mx = -INFINITY;
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) mx = fmaxf(mx, load(tx, xp, r * x.row + c * x.col));
  mx = block_max(mx, scratch);
  float total = 0;
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) total += expf(load(tx, xp, r * x.row + c * x.col) - mx);
  total = block_sum(total, scratch);
  const float log_total = logf(total);
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) {
    const float z = load(tx, xp, r * x.row + c * x.col) - mx;
    store(ty, yp, r * y.row + c * y.col, log ? z - log_total : expf(z) / total);
  }
}

__global__ void softmax_backward_kernel(Rows y, ElementType ty, const void* yp, Rows g, ElementType tg, const void* gp,
                                        Rows gx, ElementType tgx, void* gxp, bool log) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  float dot = 0;
  for (std::int64_t c = threadIdx.x; c < y.cols; c += kThreads) {
    const float gv = load(tg, gp, r * g.row + c * g.col);
    dot += log ? gv : gv * load(ty, yp, r * y.row + c * y.col);
  }
  dot = block_sum(dot, scratch);
  for (std::int64_t c = threadIdx.x; c < y.cols; c += kThreads) {
    const float gv = load(tg, gp, r * g.row + c * g.col);
    const float yv = load(ty, yp, r * y.row + c * y.col);
    store(tgx, gxp, r * gx.row + c * gx.col, log ? gv - expf(yv) * dot : yv * (gv - dot));
  }
}

// [B, T, S] tensors by their strides; row (b, i) is block b * T + i.
struct Rows3 {
  std::int64_t t, s, sb, si, sj;
  __device__ std::int64_t at(std::int64_t row, std::int64_t j) const { return row / t * sb + row % t * si + j * sj; }
};
Rows3 rows3_of(const Tensor& x) { return {x.size(1), x.size(2), x.strides()[0], x.strides()[1], x.strides()[2]}; }

__device__ std::int64_t visible_columns(bool causal, std::int64_t i, std::int64_t t, std::int64_t s) {
  if (!causal) return s;
  const std::int64_t n = i + s - t + 1;
  return n < 0 ? 0 : n > s ? s : n;
}

__global__ void attention_softmax_kernel(Rows3 sc, ElementType ts, const void* sp, float scale, bool causal, Rows3 pr,
                                         ElementType tp, void* pp) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t n = visible_columns(causal, row % sc.t, sc.t, sc.s);
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < n; j += kThreads) mx = fmaxf(mx, scale * load(ts, sp, sc.at(row, j)));
  mx = block_max(mx, scratch);
  float total = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += kThreads) total += expf(scale * load(ts, sp, sc.at(row, j)) - mx);
  total = block_sum(total, scratch);
  for (std::int64_t j = threadIdx.x; j < sc.s; j += kThreads) {
    const float p = j < n ? expf(scale * load(ts, sp, sc.at(row, j)) - mx) / total : n == 0 ? NAN : 0.0f;
    store(tp, pp, pr.at(row, j), p);
  }
}

__global__ void attention_softmax_backward_kernel(Rows3 pr, ElementType tp, const void* pp, Rows3 gpr, ElementType tgp,
                                                  const void* gpp, float scale, bool causal, Rows3 gs, ElementType tgs,
                                                  void* gsp) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t n = visible_columns(causal, row % pr.t, pr.t, pr.s);
  float dot = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += kThreads) dot += load(tp, pp, pr.at(row, j)) * load(tgp, gpp, gpr.at(row, j));
  dot = block_sum(dot, scratch);
  for (std::int64_t j = threadIdx.x; j < pr.s; j += kThreads) {
    const float g = j < n ? scale * load(tp, pp, pr.at(row, j)) * (load(tgp, gpp, gpr.at(row, j)) - dot) : 0.0f;
    store(tgs, gsp, gs.at(row, j), g);
  }
}

// A row of logits in one read (online_softmax.h): its max, log sum_c exp(x_c - max) and sum_c x_c. A
// NaN or +inf logit makes the sum NaN, as in the reference.
struct RowStats {
  float max, log_total, sum_x;
};
// (X: the logits' dtype as a type, flat_types.cuh.)
template <class X>
__device__ RowStats row_stats(Rows x, ElementType tx, const void* xp, std::int64_t r, float* scratch) {
  OnlineSum s;
  float sum_x = 0;
  for_row(x.cols, [&](std::int64_t c) { return get<X>(tx, xp, r * x.row + c * x.col); }, [&](std::int64_t, float v) {
    sum_x += v;
    online_add(s, v);
  });
  const float mx = block_max(s.max, scratch);
  const float total = block_sum(rescaled_total(s, mx), scratch);
  return {mx, logf(total), block_sum(sum_x, scratch)};
}

// Row r's loss from its statistics: -sum_c w_c log p_c with log p_c = z_c - log_total, z = x - max
// and sum_c w_c = 1 (0 for an ignored row).
__device__ float row_loss(const RowStats& st, Rows x, ElementType tx, const void* xp, std::int64_t r, std::int64_t t,
                          std::int64_t ignore_index, float smoothing) {
  const float z_t = t >= 0 && t < x.cols ? load(tx, xp, r * x.row + t * x.col) - st.max : 0.0f;
  const float sum_z = st.sum_x - static_cast<float>(x.cols) * st.max;
  const float loss = st.log_total - (1 - smoothing) * z_t - smoothing / static_cast<float>(x.cols) * sum_z;
  return t == ignore_index ? 0.0f : loss;
}

template <class X>
__global__ void cross_entropy_kernel(Rows x, ElementType tx, const void* xp, const std::int64_t* targets,
                                     std::int64_t ignore_index, float smoothing, std::int64_t loss_stride, float* losses) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  const RowStats st = row_stats<X>(x, tx, xp, r, scratch);
  if (threadIdx.x == 0) losses[r * loss_stride] = row_loss(st, x, tx, xp, r, targets[r], ignore_index, smoothing);
}

// Packed rows (packed_rows below): a row read 8 values at a time (16-byte accesses, kPackChunk packs in
// flight a thread); a thread takes packs threadIdx.x, + kThreads, ... and folds each pack's values in
// order, so the forward and the backward, both packed, add a row's statistics in one order. With `stage`
// (shared memory for the row), the packs are kept there for the backward's second pass.
constexpr int kPackChunk = 4;
template <class X>
__device__ RowStats packed_row_stats(const Pack<X>* row, std::int64_t packs, const ElementType& tx, Pack<X>* stage,
                                     float* scratch) {
  OnlineSum s;
  float sum_x = 0;
  for (std::int64_t p0 = threadIdx.x; p0 < packs; p0 += static_cast<std::int64_t>(kThreads) * kPackChunk) {
    Pack<X> v[kPackChunk];
#pragma unroll
    for (int k = 0; k < kPackChunk; ++k) {  // every load issued before any is used
      const std::int64_t p = p0 + static_cast<std::int64_t>(k) * kThreads;
      if (p < packs) v[k] = row[p];
    }
#pragma unroll
    for (int k = 0; k < kPackChunk; ++k) {
      const std::int64_t p = p0 + static_cast<std::int64_t>(k) * kThreads;
      if (p >= packs) continue;
      if (stage != nullptr) stage[p] = v[k];
#pragma unroll
      for (int e = 0; e < kPack; ++e) {
        const float f = to_f32(v[k].v[e], tx);
        sum_x += f;
        online_add(s, f);
      }
    }
  }
  const float mx = block_max(s.max, scratch);
  const float total = block_sum(rescaled_total(s, mx), scratch);
  return {mx, logf(total), block_sum(sum_x, scratch)};
}

template <class X>
__global__ void cross_entropy_packed_kernel(Rows x, ElementType tx, const X* xp, const std::int64_t* targets,
                                            std::int64_t ignore_index, float smoothing, std::int64_t loss_stride,
                                            float* losses) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  const RowStats st = packed_row_stats<X>(reinterpret_cast<const Pack<X>*>(xp + r * x.row), x.cols / kPack, tx, nullptr, scratch);
  if (threadIdx.x == 0) losses[r * loss_stride] = row_loss(st, x, tx, xp, r, targets[r], ignore_index, smoothing);
}

// The backward of packed rows, gx packed alike (it may be x). kStaged: the row is kept in shared memory
// (dynamic, cols x sizeof(X) bytes) from the statistics' read, so the logits are read from the device's
// memory once (GPT-2's 50304 bf16 logits a row are 98 KiB: two blocks an SM); otherwise the second
// pass reads them again, as the unpacked kernel does.
template <class X, bool kStaged>
__global__ void cross_entropy_backward_packed_kernel(Rows x, ElementType tx, const X* xp, const std::int64_t* targets,
                                                     std::int64_t ignore_index, float smoothing, ElementType tgl,
                                                     const void* glp, std::int64_t gl_stride, Rows gx, X* gxp,
                                                     std::int64_t loss_stride, float* losses) {
  extern __shared__ uint4 stage_bytes[];  // one declaration for every X (16-byte aligned)
  Pack<X>* stage = reinterpret_cast<Pack<X>*>(stage_bytes);
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x, packs = x.cols / kPack;
  const std::int64_t t = targets[r];
  const float g = t == ignore_index ? 0.0f : load(tgl, glp, r * gl_stride);
  const Pack<X>* row = reinterpret_cast<const Pack<X>*>(xp + r * x.row);
  const RowStats st = packed_row_stats<X>(row, packs, tx, kStaged ? stage : nullptr, scratch);
  if (losses != nullptr) {
    if (threadIdx.x == 0) losses[r * loss_stride] = row_loss(st, x, tx, xp, r, t, ignore_index, smoothing);
    __syncthreads();  // the target's logit read before the row is overwritten
  }
  const float shift = st.max + st.log_total, spread = smoothing / static_cast<float>(x.cols);
  Pack<X>* out = reinterpret_cast<Pack<X>*>(gxp + r * gx.row);
  // A thread reads back only packs it staged (the same p), so no barrier is needed between.
  for (std::int64_t p = threadIdx.x; p < packs; p += kThreads) {
    const Pack<X> in = kStaged ? stage[p] : row[p];
    Pack<X> o;
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      const std::int64_t c = p * kPack + e;
      const float w = spread + (c == t ? 1 - smoothing : 0.0f);
      o.v[e] = from_f32<X>((expf(to_f32(in.v[e], tx) - shift) - w) * g, tx);
    }
    out[p] = o;
  }
}

// Every thread writes only the elements it read, after the block's reductions: gx may be x. With
// losses, the row's loss too (thread 0 reads the target's logit before any thread can write it: the
// writes come after the block's reductions, which every thread waits for). X: the logits' and their
// gradient's dtype as a type (AnyDType where they differ).
template <class X>
__global__ void cross_entropy_backward_kernel(Rows x, ElementType tx, const void* xp, const std::int64_t* targets,
                                              std::int64_t ignore_index, float smoothing, ElementType tgl,
                                              const void* glp, std::int64_t gl_stride, Rows gx, ElementType tgx,
                                              void* gxp, std::int64_t loss_stride, float* losses) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  const std::int64_t t = targets[r];
  const float g = t == ignore_index ? 0.0f : load(tgl, glp, r * gl_stride);
  const RowStats st = row_stats<X>(x, tx, xp, r, scratch);
  if (losses != nullptr) {
    if (threadIdx.x == 0) losses[r * loss_stride] = row_loss(st, x, tx, xp, r, t, ignore_index, smoothing);
    __syncthreads();  // the target's logit read before the row is overwritten
  }
  const float shift = st.max + st.log_total;
  for_row(x.cols, [&](std::int64_t c) { return get<X>(tx, xp, r * x.row + c * x.col); }, [&](std::int64_t c, float v) {
    const float w = smoothing / static_cast<float>(x.cols) + (c == t ? 1 - smoothing : 0.0f);
    put<X>(tgx, gxp, r * gx.row + c * gx.col, (expf(v - shift) - w) * g);
  });
}

// gamma and beta [C] by their stride (an undefined one: 1 and 0).
struct Affine {
  ElementType tg, tb;
  const void* gamma;
  const void* beta;
  std::int64_t sg, sb;
  __device__ float g(std::int64_t c) const { return gamma != nullptr ? load(tg, gamma, c * sg) : 1.0f; }
  __device__ float b(std::int64_t c) const { return beta != nullptr ? load(tb, beta, c * sb) : 0.0f; }
};
Affine affine_of(const Tensor& gamma, const Tensor& beta) {
  return {element_type(gamma.defined() ? gamma.dtype() : DType::f32), element_type(beta.defined() ? beta.dtype() : DType::f32),
          gamma.defined() ? gamma.data() : nullptr, beta.defined() ? beta.data() : nullptr,
          gamma.defined() ? gamma.strides()[0] : 0, beta.defined() ? beta.strides()[0] : 0};
}

__global__ void layer_norm_kernel(Rows x, ElementType tx, const void* xp, Affine a, float eps, Rows y, ElementType ty,
                                  void* yp, ElementType tm, void* mean, std::int64_t ms, ElementType tr, void* rstd,
                                  std::int64_t rs) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  float sum = 0;
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) sum += load(tx, xp, r * x.row + c * x.col);
  const float mu = block_sum(sum, scratch) / static_cast<float>(x.cols);
  float var = 0;  // two passes: no cancellation for data far from zero
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) {
    const float d = load(tx, xp, r * x.row + c * x.col) - mu;
    var += d * d;
  }
  const float rstd_v = rsqrtf(block_sum(var, scratch) / static_cast<float>(x.cols) + eps);
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) {
    store(ty, yp, r * y.row + c * y.col, (load(tx, xp, r * x.row + c * x.col) - mu) * rstd_v * a.g(c) + a.b(c));
  }
  if (threadIdx.x == 0) {
    store(tm, mean, r * ms, mu);
    store(tr, rstd, r * rs, rstd_v);
  }
}

// Layer norm a warp per row, for rows of at most 32 x kPerLane values: lane l holds columns l, l + 32,
// ... in registers, so a row is read once and the reductions are warp shuffles (the block-per-row
// kernels read it three times and held a 256-thread block on 768 columns, 3 values a thread); four rows
// a block. Whole warps leave together, so every shuffle has its 32 lanes.
constexpr int kRowsPerWarpBlock = 4;

// T: x's and y's dtype as a type (AnyDType where they differ).
template <int kPerLane, class T>
__global__ void layer_norm_warp_kernel(std::int64_t rows, Rows x, ElementType tx, const void* xp, Affine a, float eps, Rows y,
                                       ElementType ty, void* yp, ElementType tm, void* mean, std::int64_t ms, ElementType tr,
                                       void* rstd, std::int64_t rs) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const auto cols = static_cast<float>(x.cols);
  float v[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {  // every load issued before any is used
    const std::int64_t c = lane + 32 * k;
    v[k] = c < x.cols ? get<T>(tx, xp, r * x.row + c * x.col) : 0.0f;
  }
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) sum += v[k];
  const float mu = warp_sum(sum) / cols;
  float var = 0;  // two passes over the registers: no cancellation for data far from zero
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const float d = lane + 32 * k < x.cols ? v[k] - mu : 0.0f;
    var += d * d;
  }
  const float rstd_v = rsqrtf(warp_sum(var) / cols + eps);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const std::int64_t c = lane + 32 * k;
    if (c < x.cols) put<T>(ty, yp, r * y.row + c * y.col, (v[k] - mu) * rstd_v * a.g(c) + a.b(c));
  }
  if (lane == 0) {
    store(tm, mean, r * ms, mu);
    store(tr, rstd, r * rs, rstd_v);
  }
}

// The input's gradient a warp per row, as above: x and grad_y read once each (every element by the lane
// that writes its gradient, before the warp's reductions: grad_x may be either).
// T: x's, grad_y's and grad_x's dtype as a type (AnyDType where they differ).
template <int kPerLane, class T>
__global__ void layer_norm_backward_x_warp_kernel(std::int64_t rows, Rows x, ElementType tx, const void* xp, Affine a,
                                                  ElementType tm, const void* mean, std::int64_t ms, ElementType tr,
                                                  const void* rstd, std::int64_t rs, Rows gy, ElementType tgy,
                                                  const void* gyp, Rows gx, ElementType tgx, void* gxp) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const float mu = load(tm, mean, r * ms), rsv = load(tr, rstd, r * rs);
  float xhat[kPerLane], g[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {  // every load issued before any is used
    const std::int64_t c = lane + 32 * k;
    xhat[k] = c < x.cols ? get<T>(tx, xp, r * x.row + c * x.col) : 0.0f;
    g[k] = c < x.cols ? get<T>(tgy, gyp, r * gy.row + c * gy.col) : 0.0f;
  }
  float mean_g = 0, mean_gx = 0;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const std::int64_t c = lane + 32 * k;
    xhat[k] = c < x.cols ? (xhat[k] - mu) * rsv : 0.0f;
    g[k] = c < x.cols ? g[k] * a.g(c) : 0.0f;
    mean_g += g[k];
    mean_gx += g[k] * xhat[k];
  }
  mean_g = warp_sum(mean_g) / static_cast<float>(x.cols);
  mean_gx = warp_sum(mean_gx) / static_cast<float>(x.cols);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const std::int64_t c = lane + 32 * k;
    if (c < x.cols) put<T>(tgx, gxp, r * gx.row + c * gx.col, rsv * (g[k] - mean_g - xhat[k] * mean_gx));
  }
}

// Layer norm's whole backward a warp per row: x and grad_y read once for grad_x and for the parameters'
// sums (the two-pass backward read them again for grad_gamma and grad_beta: half of its 4.3 ms in a
// 43.8 ms GPT-2 step on an H200). A warp takes rows w, w + kFusedWarps x blocks, ... and adds its
// columns' grad_y x xhat and grad_y into its own row of shared memory (registers would need 2 x kPerLane
// more: ptxas spilled them); then the block adds its warps' sums in warp order into its row of partial
// [2][blocks][cols], and layer_norm_params_total_kernel adds the blocks in order. The grid depends only
// on the row count, so the sums add in the same order on every run and GPU.
constexpr int kFusedWarps = 4, kFusedMaxBlocks = 512;

template <int kPerLane, class T>
__global__ void __launch_bounds__(32 * kFusedWarps, 4) layer_norm_backward_warp_kernel(std::int64_t rows, Rows x, ElementType tx, const void* xp, Affine a,
                                                ElementType tm, const void* mean, std::int64_t ms, ElementType tr,
                                                const void* rstd, std::int64_t rs, Rows gy, ElementType tgy, const void* gyp,
                                                Rows gx, ElementType tgx, void* gxp, float* partial) {
  __shared__ float sums[kFusedWarps][2][32 * kPerLane];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
  float* dg = sums[warp][0];
  float* db = sums[warp][1];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) dg[lane + 32 * k] = db[lane + 32 * k] = 0.0f;  // a lane's own columns
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kFusedWarps;
  // r depends on the warp only: every shuffle below has its 32 lanes.
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kFusedWarps + warp; r < rows; r += step) {
    const float mu = load(tm, mean, r * ms), rsv = load(tr, rstd, r * rs);
    float xhat[kPerLane], g[kPerLane];
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {  // every load issued before any is used
      const std::int64_t c = lane + 32 * k;
      xhat[k] = c < x.cols ? get<T>(tx, xp, r * x.row + c * x.col) : 0.0f;
      g[k] = c < x.cols ? get<T>(tgy, gyp, r * gy.row + c * gy.col) : 0.0f;
    }
    float mean_g = 0, mean_gx = 0;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const std::int64_t c = lane + 32 * k;
      xhat[k] = c < x.cols ? (xhat[k] - mu) * rsv : 0.0f;
      dg[lane + 32 * k] += g[k] * xhat[k];
      db[lane + 32 * k] += g[k];
      g[k] = c < x.cols ? g[k] * a.g(c) : 0.0f;
      mean_g += g[k];
      mean_gx += g[k] * xhat[k];
    }
    mean_g = warp_sum(mean_g) / static_cast<float>(x.cols);
    mean_gx = warp_sum(mean_gx) / static_cast<float>(x.cols);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const std::int64_t c = lane + 32 * k;
      if (c < x.cols) put<T>(tgx, gxp, r * gx.row + c * gx.col, rsv * (g[k] - mean_g - xhat[k] * mean_gx));
    }
  }
  __syncthreads();
  for (std::int64_t c = threadIdx.x; c < x.cols; c += blockDim.x) {  // the warps' sums, in warp order
    float tg = 0, tb = 0;
    for (int w = 0; w < kFusedWarps; ++w) {
      tg += sums[w][0][c];
      tb += sums[w][1][c];
    }
    partial[static_cast<std::int64_t>(blockIdx.x) * x.cols + c] = tg;
    partial[(static_cast<std::int64_t>(gridDim.x) + blockIdx.x) * x.cols + c] = tb;
  }
}

// Values a lane holds for rows of `cols` under the warp kernels (8, 16, 24 or 32: GPT-2's 768 columns
// are 24 a lane: 50 registers forward, 90 backward on sm_90a, no spills), or 0: the block kernels.
int warp_row_lanes(std::int64_t rows, std::int64_t cols) {
  if (cols > 32 * 32 || (rows + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock > 0x7fffffff) return 0;
  for (const int per_lane : {8, 16, 24}) {
    if (cols <= 32 * per_lane) return per_lane;
  }
  return 32;
}

// launch(lanes, type) with warp_row_lanes' choice as a compile-time constant (lanes() is the kPerLane
// of the kernel to launch) and the rows' one dtype as a type (type: a null T*, with_one_type);
// launch_warp_rows adds the grid for a row a warp, four rows a block.
template <class Launch>
void with_lanes(int per_lane, std::initializer_list<DType> dtypes, Launch&& launch) {
  with_one_type(dtypes, [&](auto* type) {
    if (per_lane == 8) launch(std::integral_constant<int, 8>{}, type);
    if (per_lane == 16) launch(std::integral_constant<int, 16>{}, type);
    if (per_lane == 24) launch(std::integral_constant<int, 24>{}, type);
    if (per_lane == 32) launch(std::integral_constant<int, 32>{}, type);
  });
}
template <class Launch>
void launch_warp_rows(int per_lane, std::int64_t rows, std::initializer_list<DType> dtypes, Launch&& launch) {
  const auto blocks = static_cast<unsigned>((rows + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock);
  constexpr unsigned threads = 32 * kRowsPerWarpBlock;
  with_lanes(per_lane, dtypes, [&](auto lanes, auto* type) { launch(lanes, type, blocks, threads); });
}

__global__ void layer_norm_backward_x_kernel(Rows x, ElementType tx, const void* xp, Affine a, ElementType tm,
                                             const void* mean, std::int64_t ms, ElementType tr, const void* rstd,
                                             std::int64_t rs, Rows gy, ElementType tgy, const void* gyp, Rows gx,
                                             ElementType tgx, void* gxp) {
  __shared__ float scratch[kThreads / 32];
  const std::int64_t r = blockIdx.x;
  const float mu = load(tm, mean, r * ms), rsv = load(tr, rstd, r * rs);
  float mean_g = 0, mean_gx = 0;
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) {
    const float xhat = (load(tx, xp, r * x.row + c * x.col) - mu) * rsv;
    const float g = load(tgy, gyp, r * gy.row + c * gy.col) * a.g(c);
    mean_g += g;
    mean_gx += g * xhat;
  }
  mean_g = block_sum(mean_g, scratch) / static_cast<float>(x.cols);
  mean_gx = block_sum(mean_gx, scratch) / static_cast<float>(x.cols);
  for (std::int64_t c = threadIdx.x; c < x.cols; c += kThreads) {
    const float xhat = (load(tx, xp, r * x.row + c * x.col) - mu) * rsv;
    const float g = load(tgy, gyp, r * gy.row + c * gy.col) * a.g(c);
    store(tgx, gxp, r * gx.row + c * gx.col, rsv * (g - mean_g - xhat * mean_gx));
  }
}

// grad_gamma and grad_beta, in two passes that add in the same order every run. First, blocks of
// kTileCols columns by a slice of the rows: a warp reads a row's neighbouring columns (coalesced) and
// the kTileRows warps' sums are added per column, giving a partial sum per slice; then one thread per
// column adds the slices in order. One thread per column over every row left the GPU idle: GPT-2's
// 768 columns are 3 blocks for 16384 rows.
constexpr int kTileCols = 32, kTileRows = kThreads / kTileCols;

// partial: [2][slices][cols], grad_gamma's sums then grad_beta's. T: x's and grad_y's dtype as a type
// with f32 statistics (AnyDType otherwise: then the statistics are too).
template <class T>
__global__ void layer_norm_params_partial_kernel(Rows x, ElementType tx, const void* xp, ElementType tm, const void* mean,
                                                 std::int64_t ms, ElementType tr, const void* rstd, std::int64_t rs,
                                                 Rows gy, ElementType tgy, const void* gyp, std::int64_t slice_rows,
                                                 float* partial) {
  __shared__ float sums[2][kTileRows][kTileCols];
  const int tile_col = static_cast<int>(threadIdx.x) % kTileCols, tile_row = static_cast<int>(threadIdx.x) / kTileCols;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kTileCols + tile_col, slice = blockIdx.y;
  const std::int64_t first = slice * slice_rows, end = first + slice_rows < x.rows ? first + slice_rows : x.rows;
  using Stats = std::conditional_t<std::is_same_v<T, AnyDType>, AnyDType, float>;
  float dg = 0, db = 0;
  if (c < x.cols) {
    // kParamRows rows at a time, their loads issued before any is used; added in row order as before.
    constexpr int kParamRows = 4;
    for (std::int64_t r0 = first + tile_row; r0 < end; r0 += static_cast<std::int64_t>(kTileRows) * kParamRows) {
      float xv[kParamRows], mv[kParamRows], rv[kParamRows], gv[kParamRows];
#pragma unroll
      for (int k = 0; k < kParamRows; ++k) {
        const std::int64_t r = r0 + static_cast<std::int64_t>(k) * kTileRows;
        const bool in = r < end;
        xv[k] = in ? get<T>(tx, xp, r * x.row + c * x.col) : 0.0f;
        mv[k] = in ? get<Stats>(tm, mean, r * ms) : 0.0f;
        rv[k] = in ? get<Stats>(tr, rstd, r * rs) : 0.0f;
        gv[k] = in ? get<T>(tgy, gyp, r * gy.row + c * gy.col) : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kParamRows; ++k) {
        if (r0 + static_cast<std::int64_t>(k) * kTileRows < end) {
          dg += gv[k] * ((xv[k] - mv[k]) * rv[k]);
          db += gv[k];
        }
      }
    }
  }
  sums[0][tile_row][tile_col] = dg;
  sums[1][tile_row][tile_col] = db;
  __syncthreads();
  if (tile_row < 2 && c < x.cols) {  // warp 0 adds grad_gamma's rows, warp 1 grad_beta's
    float total = 0;
    for (int k = 0; k < kTileRows; ++k) total += sums[tile_row][k][tile_col];
    partial[(tile_row * static_cast<std::int64_t>(gridDim.y) + slice) * x.cols + c] = total;
  }
}

// grad_gamma and grad_beta from partial [2][slices][cols], by blocks of kTileCols columns: row j of a
// block's threads adds slices j, j + kTileRows, ...; then warp 0 adds grad_gamma's rows in order, warp 1
// grad_beta's. (One thread a column over every slice left all but 3 SMs idle for GPT-2's 768 columns.)
__global__ void layer_norm_params_total_kernel(std::int64_t cols, std::int64_t slices, const float* partial,
                                               ElementType tgg, void* ggp, std::int64_t sgg, ElementType tgb, void* gbp,
                                               std::int64_t sgb) {
  __shared__ float sums[2][kTileRows][kTileCols];
  const int tile_col = static_cast<int>(threadIdx.x) % kTileCols, tile_row = static_cast<int>(threadIdx.x) / kTileCols;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kTileCols + tile_col;
  float dg = 0, db = 0;
  if (c < cols) {
    for (std::int64_t s = tile_row; s < slices; s += kTileRows) {
      dg += partial[s * cols + c];
      db += partial[(slices + s) * cols + c];
    }
  }
  sums[0][tile_row][tile_col] = dg;
  sums[1][tile_row][tile_col] = db;
  __syncthreads();
  if (tile_row < 2 && c < cols) {
    float total = 0;
    for (int k = 0; k < kTileRows; ++k) total += sums[tile_row][k][tile_col];
    if (tile_row == 0 && ggp != nullptr) store(tgg, ggp, c * sgg, total);
    if (tile_row == 1 && gbp != nullptr) store(tgb, gbp, c * sgb, total);
  }
}

// Rows the packed cross-entropy kernels take: X one of f32, bf16 and f16, columns contiguous and a
// multiple of kPack, every row starting 16-byte aligned.
template <class X>
bool packed_rows(const Tensor& t) {
  return t.strides()[1] == 1 && t.size(1) % kPack == 0 && packable({t.data()}) &&
         (t.strides()[0] * static_cast<std::int64_t>(sizeof(X))) % 16 == 0;
}

// Whether a row of `bytes` is kept in shared memory by the backward: at most kMaxStage (two blocks an
// SM on Hopper's 228 KiB) and what the device lets a block have; the kernel is allowed that much once.
constexpr std::size_t kMaxStage = 110 * 1024;
template <class X>
bool stage_fits(std::size_t bytes) {
  if (bytes > kMaxStage) return false;
  static const bool allowed = [] {
    int device = 0, most = 0;
    check(cudaGetDevice(&device), "cross_entropy_backward");
    check(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "cross_entropy_backward");
    if (static_cast<std::size_t>(most) < kMaxStage + 64) return false;  // + the block's own scratch
    check(cudaFuncSetAttribute(cross_entropy_backward_packed_kernel<X, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kMaxStage)),
          "cross_entropy_backward");
    return true;
  }();
  return allowed;
}

unsigned row_blocks(std::int64_t rows, const char* what) {
  if (rows > 0x7fffffff) throw std::invalid_argument(std::string(what) + ": too many rows for one launch");
  return static_cast<unsigned>(rows);
}

}  // namespace

void softmax(const Tensor& x, const Tensor& y, bool log) {
  for (const Tensor* t : {&x, &y}) refuse_f64("softmax", *t);
  if (x.numel() == 0) return;
  softmax_kernel<<<row_blocks(x.size(0), "softmax"), kThreads, 0, stream()>>>(rows_of(x), element_type(x.dtype()), x.data(),
                                                                             rows_of(y), element_type(y.dtype()), y.data(), log);
  check_launch("softmax");
}

void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) {
  for (const Tensor* t : {&y, &grad_y, &grad_x}) refuse_f64("softmax_backward", *t);
  if (y.numel() == 0) return;
  softmax_backward_kernel<<<row_blocks(y.size(0), "softmax_backward"), kThreads, 0, stream()>>>(
      rows_of(y), element_type(y.dtype()), y.data(), rows_of(grad_y), element_type(grad_y.dtype()), grad_y.data(),
      rows_of(grad_x), element_type(grad_x.dtype()), grad_x.data(), log);
  check_launch("softmax_backward");
}

void attention_softmax(const Tensor& scores, double scale, bool causal, const Tensor& probs) {
  for (const Tensor* t : {&scores, &probs}) refuse_f64("attention_softmax", *t);
  if (scores.numel() == 0) return;
  attention_softmax_kernel<<<row_blocks(scores.size(0) * scores.size(1), "attention_softmax"), kThreads, 0, stream()>>>(
      rows3_of(scores), element_type(scores.dtype()), scores.data(), static_cast<float>(scale), causal, rows3_of(probs),
      element_type(probs.dtype()), probs.data());
  check_launch("attention_softmax");
}

void attention_softmax_backward(const Tensor& probs, const Tensor& grad_probs, double scale, bool causal,
                                const Tensor& grad_scores) {
  for (const Tensor* t : {&probs, &grad_probs, &grad_scores}) refuse_f64("attention_softmax_backward", *t);
  if (probs.numel() == 0) return;
  attention_softmax_backward_kernel<<<row_blocks(probs.size(0) * probs.size(1), "attention_softmax_backward"), kThreads, 0,
                                      stream()>>>(rows3_of(probs), element_type(probs.dtype()), probs.data(),
                                                  rows3_of(grad_probs), element_type(grad_probs.dtype()), grad_probs.data(),
                                                  static_cast<float>(scale), causal, rows3_of(grad_scores),
                                                  element_type(grad_scores.dtype()), grad_scores.data());
  check_launch("attention_softmax_backward");
}

void cross_entropy(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index, double smoothing,
                   const Tensor& losses) {
  for (const Tensor* t : {&logits, &losses}) refuse_f64("cross_entropy", *t);
  if (losses.dtype() != DType::f32) throw std::invalid_argument("cross_entropy: f32 losses");
  if (logits.size(0) == 0) return;
  const Tensor ids = indices_on_gpu(targets, logits.device());
  with_one_type({logits.dtype()}, [&](auto* type) {
    using X = std::remove_pointer_t<decltype(type)>;
    if constexpr (!std::is_same_v<X, AnyDType>) {
      if (packed_rows<X>(logits)) {
        cross_entropy_packed_kernel<X><<<row_blocks(logits.size(0), "cross_entropy"), kThreads, 0, stream()>>>(
            rows_of(logits), element_type(logits.dtype()), static_cast<const X*>(logits.data()),
            static_cast<const std::int64_t*>(ids.data()), ignore_index, static_cast<float>(smoothing), losses.strides()[0],
            losses.data_as<float>());
        return;
      }
    }
    cross_entropy_kernel<X><<<row_blocks(logits.size(0), "cross_entropy"), kThreads, 0, stream()>>>(
        rows_of(logits), element_type(logits.dtype()), logits.data(), static_cast<const std::int64_t*>(ids.data()),
        ignore_index, static_cast<float>(smoothing), losses.strides()[0], losses.data_as<float>());
  });
  check_launch("cross_entropy");
}

void cross_entropy_backward(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                            double smoothing, const Tensor& grad_losses, const Tensor& grad_logits, const Tensor& losses) {
  for (const Tensor* t : {&logits, &grad_losses, &grad_logits, &losses}) refuse_f64("cross_entropy_backward", *t);
  if (losses.defined() && losses.dtype() != DType::f32) throw std::invalid_argument("cross_entropy_backward: f32 losses");
  if (logits.size(0) == 0) return;
  const Tensor ids = indices_on_gpu(targets, logits.device());
  with_one_type({logits.dtype(), grad_logits.dtype()}, [&](auto* type) {
    using X = std::remove_pointer_t<decltype(type)>;
    if constexpr (!std::is_same_v<X, AnyDType>) {
      if (packed_rows<X>(logits) && packed_rows<X>(grad_logits)) {
        const auto bytes = static_cast<std::size_t>(logits.size(1)) * sizeof(X);
        const bool staged = stage_fits<X>(bytes);
        const auto launch = [&](auto kernel, std::size_t shared) {
          kernel<<<row_blocks(logits.size(0), "cross_entropy_backward"), kThreads, shared, stream()>>>(
              rows_of(logits), element_type(logits.dtype()), static_cast<const X*>(logits.data()),
              static_cast<const std::int64_t*>(ids.data()), ignore_index, static_cast<float>(smoothing),
              element_type(grad_losses.dtype()), grad_losses.data(), grad_losses.strides()[0], rows_of(grad_logits),
              static_cast<X*>(grad_logits.data()), losses.defined() ? losses.strides()[0] : 0,
              losses.defined() ? losses.data_as<float>() : nullptr);
        };
        if (staged) {
          launch(cross_entropy_backward_packed_kernel<X, true>, bytes);
        } else {
          launch(cross_entropy_backward_packed_kernel<X, false>, 0);
        }
        return;
      }
    }
    cross_entropy_backward_kernel<X>
        <<<row_blocks(logits.size(0), "cross_entropy_backward"), kThreads, 0, stream()>>>(
            rows_of(logits), element_type(logits.dtype()), logits.data(), static_cast<const std::int64_t*>(ids.data()),
            ignore_index, static_cast<float>(smoothing), element_type(grad_losses.dtype()), grad_losses.data(),
            grad_losses.strides()[0], rows_of(grad_logits), element_type(grad_logits.dtype()), grad_logits.data(),
            losses.defined() ? losses.strides()[0] : 0, losses.defined() ? losses.data_as<float>() : nullptr);
  });
  check_launch("cross_entropy_backward");
}

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y, const Tensor& mean,
                const Tensor& rstd) {
  for (const Tensor* t : {&x, &gamma, &beta, &y, &mean, &rstd}) refuse_f64("layer_norm", *t);
  if (x.size(0) == 0) return;
  if (const int per_lane = warp_row_lanes(x.size(0), x.size(1))) {
    launch_warp_rows(per_lane, x.size(0), {x.dtype(), y.dtype()}, [&](auto lanes, auto* type, unsigned blocks, unsigned threads) {
      layer_norm_warp_kernel<lanes(), std::remove_pointer_t<decltype(type)>><<<blocks, threads, 0, stream()>>>(
          x.size(0), rows_of(x), element_type(x.dtype()), x.data(), affine_of(gamma, beta), static_cast<float>(eps), rows_of(y),
          element_type(y.dtype()), y.data(), element_type(mean.dtype()), mean.data(), mean.strides()[0],
          element_type(rstd.dtype()), rstd.data(), rstd.strides()[0]);
    });
  } else {
    layer_norm_kernel<<<row_blocks(x.size(0), "layer_norm"), kThreads, 0, stream()>>>(
        rows_of(x), element_type(x.dtype()), x.data(), affine_of(gamma, beta), static_cast<float>(eps), rows_of(y),
        element_type(y.dtype()), y.data(), element_type(mean.dtype()), mean.data(), mean.strides()[0],
        element_type(rstd.dtype()), rstd.data(), rstd.strides()[0]);
  }
  check_launch("layer_norm");
}

namespace {

// MANTISSA_LAYER_NORM_BACKWARD=two-pass: grad_x by one kernel and the parameters' sums by another, each
// reading x and grad_y (the backward before layer_norm_backward_warp_kernel; gpu-check's kernels part
// times the step both ways).
bool fused_layer_norm_backward_by_environment() {
  const char* v = std::getenv("MANTISSA_LAYER_NORM_BACKWARD");
  return v == nullptr || std::string(v) != "two-pass";
}

// grad_gamma and grad_beta (either may be undefined) from partial [2][slices][cols].
void layer_norm_params_total(std::int64_t cols, std::int64_t slices, const Tensor& partial, const Tensor& grad_gamma,
                             const Tensor& grad_beta) {
  const std::int64_t tiles = (cols + kTileCols - 1) / kTileCols;
  if (tiles > 0x7fffffff) throw std::invalid_argument("layer_norm_backward: too many columns for one launch");
  layer_norm_params_total_kernel<<<static_cast<unsigned>(tiles), kThreads, 0, stream()>>>(
      cols, slices, partial.data_as<float>(), element_type(grad_gamma.defined() ? grad_gamma.dtype() : DType::f32),
      grad_gamma.defined() ? grad_gamma.data() : nullptr, grad_gamma.defined() ? grad_gamma.strides()[0] : 0,
      element_type(grad_beta.defined() ? grad_beta.dtype() : DType::f32), grad_beta.defined() ? grad_beta.data() : nullptr,
      grad_beta.defined() ? grad_beta.strides()[0] : 0);
  check_launch("layer_norm_backward");
}

}  // namespace

void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd, const Tensor& grad_y,
                         const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta, double /*eps*/) {
  for (const Tensor* t : {&x, &gamma, &mean, &rstd, &grad_y, &grad_x, &grad_gamma, &grad_beta}) {
    refuse_f64("layer_norm_backward", *t);
  }
  if (x.size(0) == 0) return;
  const Affine a = affine_of(gamma, Tensor());
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const bool params = grad_gamma.defined() || grad_beta.defined();
  static const bool fused = fused_layer_norm_backward_by_environment();
  if (const int per_lane = warp_row_lanes(rows, cols); per_lane != 0 && grad_x.defined() && params && fused) {
    const std::int64_t blocks = std::min<std::int64_t>(kFusedMaxBlocks, (rows + kFusedWarps - 1) / kFusedWarps);
    const Tensor partial = Tensor::empty({2 * blocks * cols}, DType::f32, x.device());
    with_lanes(per_lane, {x.dtype(), grad_y.dtype(), grad_x.dtype()}, [&](auto lanes, auto* type) {
      layer_norm_backward_warp_kernel<lanes(), std::remove_pointer_t<decltype(type)>>
          <<<static_cast<unsigned>(blocks), 32 * kFusedWarps, 0, stream()>>>(
              rows, rows_of(x), element_type(x.dtype()), x.data(), a, element_type(mean.dtype()), mean.data(),
              mean.strides()[0], element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y),
              element_type(grad_y.dtype()), grad_y.data(), rows_of(grad_x), element_type(grad_x.dtype()), grad_x.data(),
              partial.data_as<float>());
    });
    check_launch("layer_norm_backward");
    layer_norm_params_total(cols, blocks, partial, grad_gamma, grad_beta);
    return;
  }
  if (grad_x.defined()) {
    if (const int per_lane = warp_row_lanes(rows, cols)) {
      launch_warp_rows(per_lane, x.size(0), {x.dtype(), grad_y.dtype(), grad_x.dtype()},
                       [&](auto lanes, auto* type, unsigned blocks, unsigned threads) {
        layer_norm_backward_x_warp_kernel<lanes(), std::remove_pointer_t<decltype(type)>><<<blocks, threads, 0, stream()>>>(
            x.size(0), rows_of(x), element_type(x.dtype()), x.data(), a, element_type(mean.dtype()), mean.data(),
            mean.strides()[0], element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y),
            element_type(grad_y.dtype()), grad_y.data(), rows_of(grad_x), element_type(grad_x.dtype()), grad_x.data());
      });
    } else {
      layer_norm_backward_x_kernel<<<row_blocks(x.size(0), "layer_norm_backward"), kThreads, 0, stream()>>>(
          rows_of(x), element_type(x.dtype()), x.data(), a, element_type(mean.dtype()), mean.data(), mean.strides()[0],
          element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y), element_type(grad_y.dtype()),
          grad_y.data(), rows_of(grad_x), element_type(grad_x.dtype()), grad_x.data());
    }
    check_launch("layer_norm_backward");
  }
  if (params) {
    // About 256 rows a slice, at most 128 slices: GPT-2's [16384, 768] is 24 x 64 blocks.
    const std::int64_t slices = std::min<std::int64_t>(128, (rows + 255) / 256);
    const std::int64_t slice_rows = (rows + slices - 1) / slices;
    const std::int64_t tiles = (cols + kTileCols - 1) / kTileCols;
    if (tiles > 0x7fffffff) throw std::invalid_argument("layer_norm_backward: too many columns for one launch");
    const Tensor partial = Tensor::empty({2 * slices * cols}, DType::f32, x.device());
    // Typed with f32 statistics (as layer_norm makes them); AnyDType otherwise.
    const DType stats = mean.dtype() == DType::f32 && rstd.dtype() == DType::f32 ? x.dtype() : DType::e4m3;
    with_one_type({x.dtype(), grad_y.dtype(), stats}, [&](auto* type) {
      layer_norm_params_partial_kernel<std::remove_pointer_t<decltype(type)>>
          <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slices)), kThreads, 0, stream()>>>(
              rows_of(x), element_type(x.dtype()), x.data(), element_type(mean.dtype()), mean.data(), mean.strides()[0],
              element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y), element_type(grad_y.dtype()),
              grad_y.data(), slice_rows, partial.data_as<float>());
    });
    check_launch("layer_norm_backward");
    layer_norm_params_total(cols, slices, partial, grad_gamma, grad_beta);
  }
}

}  // namespace mantissa::detail::cuda
