// CUDA kernels that work a row at a time, one block of kThreads threads per row, statistics in f32:
// softmax and log-softmax with their backward, the attention softmax (scaled, causal) with its backward,
// and cross-entropy (both directions from the logits) with label smoothing and an ignored index (layer
// norm's row kernels: cuda_layer_norm.cu). Each follows its contract in kernels.h and the reference's
// formulas; values are rounded once on store. Cross-entropy's kernels, among the step's hot ones, are
// compiled per dtype where their tensors share one of f32, bf16 and f16 (flat_types.cuh), issue their
// loads before they use them, read aligned rows 16 bytes at a time, and the backward keeps a row in
// shared memory.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "flat_types.cuh"
#include "kernel_ways.h"
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
  static const bool packed = way_on(Way::packed_cross_entropy);
  with_one_type({logits.dtype()}, [&](auto* type) {
    using X = std::remove_pointer_t<decltype(type)>;
    if constexpr (!std::is_same_v<X, AnyDType>) {
      if (packed && packed_rows<X>(logits)) {
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
  static const bool packed = way_on(Way::packed_cross_entropy);
  with_one_type({logits.dtype(), grad_logits.dtype()}, [&](auto* type) {
    using X = std::remove_pointer_t<decltype(type)>;
    if constexpr (!std::is_same_v<X, AnyDType>) {
      if (packed && packed_rows<X>(logits) && packed_rows<X>(grad_logits)) {
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

}  // namespace mantissa::detail::cuda
