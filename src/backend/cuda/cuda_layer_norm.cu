// Layer norm on a GPU, forward and backward, statistics in f32. Rows of up to 1024 columns go a warp per
// row (the values in registers: one read of x forward; backward one read of x and dy for dx and for the
// parameters' sums); wider rows a block per row, the parameters' sums then in a second pass. Each follows
// its contract in kernels.h and the reference's formulas; values are rounded once on store. The warp
// kernels are compiled per dtype where their tensors share one of f32, bf16 and f16 (flat_types.cuh) and
// issue their loads before they use them.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "../cpu/unary_math.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "flat_types.cuh"
#include "kernel_ways.h"

namespace mantissa::detail::cuda {
namespace {

// gamma and beta [C] by their stride (an undefined one: 1 and 0), in f32: a kernel reads them without a
// switch on their dtype (load()'s switch, in the warp kernels' unrolled loops, became every dtype's
// conversion for every element). Parameters in another dtype are copied into f32 first (as_f32).
struct Affine {
  const float* gamma;
  const float* beta;
  std::int64_t sg, sb;
  __device__ float g(std::int64_t c) const { return gamma != nullptr ? gamma[c * sg] : 1.0f; }
  __device__ float b(std::int64_t c) const { return beta != nullptr ? beta[c * sb] : 0.0f; }
};
Tensor as_f32(const Tensor& p) {
  if (!p.defined() || p.dtype() == DType::f32) return p;
  const Tensor t = Tensor::empty(p.shape(), DType::f32, p.device());
  copy(p, t);
  return t;
}
// gamma32, beta32: as_f32's (they must live until the kernel is queued).
Affine affine_of(const Tensor& gamma32, const Tensor& beta32) {
  return {gamma32.defined() ? gamma32.data_as<float>() : nullptr, beta32.defined() ? beta32.data_as<float>() : nullptr,
          gamma32.defined() ? gamma32.strides()[0] : 0, beta32.defined() ? beta32.strides()[0] : 0};
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

// Layer norm a warp per row on packed rows (x of dtype X and y of Y, each f32, bf16 or f16 and
// packed_rows: y in a narrower dtype where the output goes to a product; gamma and beta f32,
// contiguous, 16-byte aligned or absent): lane l holds packs l, l + 32, ... of kPack columns, read and
// written by 16-byte accesses (GPT-2's 768 f32 columns: 3 packs a lane, 6 loads where the kernel above
// makes 24, each with its own index arithmetic). The pointers are __restrict__, so the loads of gamma and
// beta may go ahead of y's stores (above they wait for each store before them: y might alias them). The
// statistics add the values in another order than above's: the same function, not the same bits.
// With a residual (Residual's pointer set: kernel::AddLayerNorm), the rows normalized are x + r, rounded
// into X and written to s as the add kernel would write them, then normalized as read back.
template <class R, class X>
struct Residual {
  const R* __restrict__ r = nullptr;
  std::int64_t r_row = 0;
  ElementType tr{};
  X* __restrict__ s = nullptr;
  std::int64_t s_row = 0;
};

template <int kPacks, class X, class R, class Y>
__global__ void layer_norm_packed_kernel(std::int64_t rows, std::int64_t cols, ElementType tx, const X* __restrict__ xp,
                                         std::int64_t x_row, Residual<R, X> res, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, float eps, ElementType ty, Y* __restrict__ yp,
                                         std::int64_t y_row, ElementType tm, void* mean, std::int64_t ms, ElementType tr,
                                         void* rstd, std::int64_t rs) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t packs = cols / kPack;
  const Pack<X>* in = reinterpret_cast<const Pack<X>*>(xp + r * x_row);
  Pack<X> raw[kPacks];
  Pack<R> raw_r[kPacks];
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {  // every load issued before any is used
    if (lane + 32 * k < packs) raw[k] = in[lane + 32 * k];
    if (res.r != nullptr && lane + 32 * k < packs) raw_r[k] = reinterpret_cast<const Pack<R>*>(res.r + r * res.r_row)[lane + 32 * k];
  }
  if (res.r != nullptr) {
    Pack<X>* sum_out = reinterpret_cast<Pack<X>*>(res.s + r * res.s_row);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      if (lane + 32 * k >= packs) continue;
#pragma unroll
      for (int e = 0; e < kPack; ++e) {
        raw[k].v[e] = from_f32<X>(binary_value(BinaryOp::add, to_f32(raw[k].v[e], tx), to_f32(raw_r[k].v[e], res.tr)), tx);
      }
      sum_out[lane + 32 * k] = raw[k];
    }
  }
  float v[kPacks][kPack];
  float sum = 0;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      v[k][e] = lane + 32 * k < packs ? to_f32(raw[k].v[e], tx) : 0.0f;
      sum += v[k][e];
    }
  }
  const float mu = warp_sum(sum) / static_cast<float>(cols);
  float var = 0;  // two passes over the registers: no cancellation for data far from zero
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      const float d = lane + 32 * k < packs ? v[k][e] - mu : 0.0f;
      var += d * d;
    }
  }
  const float rstd_v = rsqrtf(warp_sum(var) / static_cast<float>(cols) + eps);
  Pack<Y>* out = reinterpret_cast<Pack<Y>*>(yp + r * y_row);
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const std::int64_t p = lane + 32 * k;
    if (p >= packs) continue;
    Pack<float> g, b;
#pragma unroll
    for (int e = 0; e < kPack; ++e) {
      g.v[e] = 1.0f;
      b.v[e] = 0.0f;
    }
    if (gamma != nullptr) g = reinterpret_cast<const Pack<float>*>(gamma)[p];
    if (beta != nullptr) b = reinterpret_cast<const Pack<float>*>(beta)[p];
    Pack<Y> o;
#pragma unroll
    for (int e = 0; e < kPack; ++e) o.v[e] = from_f32<Y>((v[k][e] - mu) * rstd_v * g.v[e] + b.v[e], ty);
    out[p] = o;
  }
  if (lane == 0) {
    store(tm, mean, r * ms, mu);
    store(tr, rstd, r * rs, rstd_v);
  }
}

// Row r's input gradient by one warp (lane l holds columns l, l + 32, ...): x and grad_y read once each
// (every element by the lane that writes its gradient, before the warp's reductions: grad_x may be
// either), every load issued before any is used. add(k, dy, xhat) sees each of the lane's values before
// dy is multiplied by gamma: where the one-pass backward adds up the parameters' gradients. T: x's and
// grad_x's dtype as a type, G: grad_y's (with_grad_types).
template <int kPerLane, class T, class G, class Add>
__device__ void layer_norm_backward_row(std::int64_t r, int lane, Rows x, ElementType tx, const void* xp, const Affine& a,
                                        ElementType tm, const void* mean, std::int64_t ms, ElementType tr, const void* rstd,
                                        std::int64_t rs, Rows gy, ElementType tgy, const void* gyp, Rows gx, ElementType tgx,
                                        void* gxp, Add add) {
  const float mu = load(tm, mean, r * ms), rsv = load(tr, rstd, r * rs);
  float xhat[kPerLane], g[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {  // every load issued before any is used
    const std::int64_t c = lane + 32 * k;
    xhat[k] = c < x.cols ? get<T>(tx, xp, r * x.row + c * x.col) : 0.0f;
    g[k] = c < x.cols ? get<G>(tgy, gyp, r * gy.row + c * gy.col) : 0.0f;
  }
  float mean_g = 0, mean_gx = 0;
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    const std::int64_t c = lane + 32 * k;
    xhat[k] = c < x.cols ? (xhat[k] - mu) * rsv : 0.0f;
    add(k, g[k], xhat[k]);
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

// The input's gradient a warp per row, as above (the two-pass backward's first pass).
template <int kPerLane, class T, class G>
__global__ void layer_norm_backward_x_warp_kernel(std::int64_t rows, Rows x, ElementType tx, const void* xp, Affine a,
                                                  ElementType tm, const void* mean, std::int64_t ms, ElementType tr,
                                                  const void* rstd, std::int64_t rs, Rows gy, ElementType tgy,
                                                  const void* gyp, Rows gx, ElementType tgx, void* gxp) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kRowsPerWarpBlock + threadIdx.x / 32;
  if (r >= rows) return;
  layer_norm_backward_row<kPerLane, T, G>(r, static_cast<int>(threadIdx.x & 31), x, tx, xp, a, tm, mean, ms, tr, rstd, rs, gy,
                                       tgy, gyp, gx, tgx, gxp, [](int, float, float) {});
}

// Layer norm's whole backward a warp per row: x and grad_y read once for grad_x and for the parameters'
// sums (the two-pass backward read them again for grad_gamma and grad_beta: half of its 4.3 ms in a
// 43.8 ms GPT-2 step on an H200). A warp takes rows w, w + kFusedWarps x blocks, ... and adds its
// columns' grad_y x xhat and grad_y into its own row of shared memory (registers would need 2 x kPerLane
// more: ptxas spilled them); then the block adds its warps' sums in warp order into its row of partial
// [2][blocks][cols], and layer_norm_params_total_kernel adds the blocks in order. The grid depends only
// on the row count, so the sums add in the same order on every run and GPU.
constexpr int kFusedWarps = 4, kFusedMaxBlocks = 512;

template <int kPerLane, class T, class G>
__global__ void __launch_bounds__(32 * kFusedWarps, 4)
    layer_norm_backward_warp_kernel(std::int64_t rows, Rows x, ElementType tx, const void* xp, Affine a, ElementType tm,
                                    const void* mean, std::int64_t ms, ElementType tr, const void* rstd, std::int64_t rs,
                                    Rows gy, ElementType tgy, const void* gyp, Rows gx, ElementType tgx, void* gxp,
                                    float* partial) {
  __shared__ float sums[kFusedWarps][2][32 * kPerLane];
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
  float* dg = sums[warp][0];
  float* db = sums[warp][1];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) dg[lane + 32 * k] = db[lane + 32 * k] = 0.0f;  // a lane's own columns
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * kFusedWarps;
  // r depends on the warp only: every shuffle below has its 32 lanes.
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * kFusedWarps + warp; r < rows; r += step) {
    layer_norm_backward_row<kPerLane, T, G>(r, lane, x, tx, xp, a, tm, mean, ms, tr, rstd, rs, gy, tgy, gyp, gx, tgx, gxp,
                                         [&](int k, float dy, float xhat) {
                                           dg[lane + 32 * k] += dy * xhat;
                                           db[lane + 32 * k] += dy;
                                         });
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
// are 24 a lane; registers and spills on sm_90a: docs/cuda.md), or 0: the block kernels.
int warp_row_lanes(std::int64_t rows, std::int64_t cols) {
  if (cols > 32 * 32 || (rows + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock > 0x7fffffff) return 0;
  for (const int per_lane : {8, 16, 24}) {
    if (cols <= 32 * per_lane) return per_lane;
  }
  return 32;
}

// f(X*, Y*) (null pointers as types) for an input and output dtype the row kernels take typed: one of
// f32, bf16 and f16 for both, or an f32 input with a bf16 or f16 output (a layer norm feeding a
// product); false, calling nothing, for the others.
template <class F>
bool with_out_type(DType x, DType y, F&& f) {
  if (x == y) return with_flat_type(x, [&](auto* type) { f(type, type); });
  if (x != DType::f32) return false;
  return with_flat_type(y, [&](auto* type) {
    if constexpr (!std::is_same_v<decltype(type), float*>) f(static_cast<float*>(nullptr), type);
  });
}

// f(T*, G*): x's and grad_x's dtype T and grad_y's G as types where the backward's warp kernels take
// them typed (one dtype for all three, or an f32 x and grad_x with the bf16 or f16 gradient of an output
// made for a product); false, calling nothing, for other mixes (the block kernels take them).
template <class F>
bool with_grad_types(DType x, DType gy, DType gx, F&& f) {
  return x == gx && with_out_type(x, gy, f);
}

// launch(lanes) with warp_row_lanes' choice as a compile-time constant (lanes() is the kPerLane of the
// kernel to launch); launch_warp_rows adds the grid for a row a warp, four rows a block.
template <class Launch>
void with_lanes(int per_lane, Launch&& launch) {
  if (per_lane == 8) launch(std::integral_constant<int, 8>{});
  if (per_lane == 16) launch(std::integral_constant<int, 16>{});
  if (per_lane == 24) launch(std::integral_constant<int, 24>{});
  if (per_lane == 32) launch(std::integral_constant<int, 32>{});
}
template <class Launch>
void launch_warp_rows(int per_lane, std::int64_t rows, Launch&& launch) {
  const auto blocks = static_cast<unsigned>((rows + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock);
  constexpr unsigned threads = 32 * kRowsPerWarpBlock;
  with_lanes(per_lane, [&](auto lanes) { launch(lanes, blocks, threads); });
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

// partial: [2][slices][cols], grad_gamma's sums then grad_beta's. T and G: x's and grad_y's dtypes as
// types with f32 statistics (with_out_type; AnyDType for both otherwise: then the statistics are too).
template <class T, class G>
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
        gv[k] = in ? get<G>(tgy, gyp, r * gy.row + c * gy.col) : 0.0f;
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

// gamma or beta as the packed kernel reads it: f32, contiguous and 16-byte aligned, or absent.
bool packed_param(const Tensor& p) { return !p.defined() || (p.dtype() == DType::f32 && p.strides()[0] == 1 && packable({p.data()})); }

// Layer norm by layer_norm_packed_kernel where its rows and parameters qualify (per_lane: warp_row_lanes'
// choice); false, having launched nothing, where they do not. With r and s defined, of s = x + r
// (kernel::AddLayerNorm), where s has x's dtype and r has x's or y's.
bool layer_norm_packed(int per_lane, const Tensor& x, const Tensor& gamma32, const Tensor& beta32, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, const Tensor& r = Tensor(), const Tensor& s = Tensor()) {
  // One dtype, or an f32 input normalized into a narrower output (a layer norm feeding a product).
  if ((x.dtype() != y.dtype() && x.dtype() != DType::f32) || !packed_param(gamma32) || !packed_param(beta32)) return false;
  if (r.defined() && (s.dtype() != x.dtype() || (r.dtype() != x.dtype() && r.dtype() != y.dtype()))) return false;
  bool launched = false;
  with_out_type(x.dtype(), y.dtype(), [&](auto* x_type, auto* y_type) {
    using X = std::remove_pointer_t<decltype(x_type)>;
    using Y = std::remove_pointer_t<decltype(y_type)>;
    if (!packed_rows<X>(x) || !packed_rows<Y>(y)) return;
    if (r.defined() && (!packed_rows<X>(s) || !(r.dtype() == x.dtype() ? packed_rows<X>(r) : packed_rows<Y>(r)))) return;
    const auto launch = [&](auto packs, auto* r_type) {
      using R = std::remove_pointer_t<decltype(r_type)>;
      Residual<R, X> res;
      if (r.defined()) {
        res = {static_cast<const R*>(r.data()), r.strides()[0], element_type(r.dtype()), static_cast<X*>(s.data()), s.strides()[0]};
      }
      const auto blocks = static_cast<unsigned>((x.size(0) + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock);
      layer_norm_packed_kernel<packs(), X, R, Y><<<blocks, 32 * kRowsPerWarpBlock, 0, stream()>>>(
          x.size(0), x.size(1), element_type(x.dtype()), static_cast<const X*>(x.data()), x.strides()[0], res,
          gamma32.defined() ? gamma32.data_as<float>() : nullptr, beta32.defined() ? beta32.data_as<float>() : nullptr,
          static_cast<float>(eps), element_type(y.dtype()), static_cast<Y*>(y.data()), y.strides()[0],
          element_type(mean.dtype()), mean.data(), mean.strides()[0], element_type(rstd.dtype()), rstd.data(),
          rstd.strides()[0]);
    };
    // The residual in x's dtype, or (an f32 stream feeding a product) in y's: no other instances.
    const auto with_residual = [&](auto packs) {
      if (!r.defined() || r.dtype() == x.dtype()) {
        launch(packs, static_cast<X*>(nullptr));
      } else {
        launch(packs, static_cast<Y*>(nullptr));
      }
    };
    switch (per_lane / kPack) {  // 8, 16, 24 or 32 values a lane
      case 1: with_residual(std::integral_constant<int, 1>{}); break;
      case 2: with_residual(std::integral_constant<int, 2>{}); break;
      case 3: with_residual(std::integral_constant<int, 3>{}); break;
      default: with_residual(std::integral_constant<int, 4>{}); break;
    }
    launched = true;
  });
  return launched;
}

}  // namespace

void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y, const Tensor& mean,
                const Tensor& rstd) {
  for (const Tensor* t : {&x, &gamma, &beta, &y, &mean, &rstd}) refuse_f64("layer_norm", *t);
  if (x.size(0) == 0) return;
  const Tensor gamma32 = as_f32(gamma), beta32 = as_f32(beta);
  // Packed rows, else a warp a row where x and y share a dtype the kernel takes typed, else a block a row.
  const int per_lane = warp_row_lanes(x.size(0), x.size(1));
  if (per_lane != 0 && layer_norm_packed(per_lane, x, gamma32, beta32, eps, y, mean, rstd)) {
    check_launch("layer_norm");
    return;
  }
  const bool warp_rows = per_lane != 0 && x.dtype() == y.dtype() && with_flat_type(x.dtype(), [&](auto* type) {
    launch_warp_rows(per_lane, x.size(0), [&](auto lanes, unsigned blocks, unsigned threads) {
      layer_norm_warp_kernel<lanes(), std::remove_pointer_t<decltype(type)>><<<blocks, threads, 0, stream()>>>(
          x.size(0), rows_of(x), element_type(x.dtype()), x.data(), affine_of(gamma32, beta32), static_cast<float>(eps), rows_of(y),
          element_type(y.dtype()), y.data(), element_type(mean.dtype()), mean.data(), mean.strides()[0],
          element_type(rstd.dtype()), rstd.data(), rstd.strides()[0]);
    });
  });
  if (!warp_rows) {
    layer_norm_kernel<<<row_blocks(x.size(0), "layer_norm"), kThreads, 0, stream()>>>(
        rows_of(x), element_type(x.dtype()), x.data(), affine_of(gamma32, beta32), static_cast<float>(eps), rows_of(y),
        element_type(y.dtype()), y.data(), element_type(mean.dtype()), mean.data(), mean.strides()[0],
        element_type(rstd.dtype()), rstd.data(), rstd.strides()[0]);
  }
  check_launch("layer_norm");
}

// The packed kernel with the add inside where the rows and dtypes qualify (and MANTISSA_ADD_LAYER_NORM
// is not "separate"); else the add, then the norm.
void add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& s,
                    const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  for (const Tensor* t : {&x, &r, &s, &gamma, &beta, &y, &mean, &rstd}) refuse_f64("add_layer_norm", *t);
  if (x.size(0) == 0) return;
  static const bool fused = way_on(Way::fused_add_layer_norm);
  const int per_lane = fused ? warp_row_lanes(x.size(0), x.size(1)) : 0;
  if (per_lane != 0 && layer_norm_packed(per_lane, x, as_f32(gamma), as_f32(beta), eps, y, mean, rstd, r, s)) {
    check_launch("add_layer_norm");
    return;
  }
  kernel::add_then_layer_norm<binary, layer_norm>(x, r, gamma, beta, eps, s, y, mean, rstd);
}

namespace {

// (MANTISSA_LAYER_NORM_BACKWARD=two-pass, kernel_ways.h: grad_x by one kernel and the parameters' sums by
// another, each reading x and grad_y, the backward before layer_norm_backward_warp_kernel.)

// The blocks of kTileCols columns across `cols`: the parameters' kernels' grid (x), checked once here.
unsigned column_tiles(std::int64_t cols) {
  const std::int64_t tiles = (cols + kTileCols - 1) / kTileCols;
  if (tiles > 0x7fffffff) throw std::invalid_argument("layer_norm_backward: too many columns for one launch");
  return static_cast<unsigned>(tiles);
}

// grad_gamma and grad_beta (either may be undefined) from partial [2][slices][cols].
void layer_norm_params_total(std::int64_t cols, std::int64_t slices, const Tensor& partial, const Tensor& grad_gamma,
                             const Tensor& grad_beta) {
  layer_norm_params_total_kernel<<<column_tiles(cols), kThreads, 0, stream()>>>(
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
  const Tensor gamma32 = as_f32(gamma);
  const Affine a = affine_of(gamma32, Tensor());
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const bool params = grad_gamma.defined() || grad_beta.defined();
  static const bool fused = way_on(Way::fused_layer_norm_backward);
  // The warp kernels where the dtypes are typed ones (with_grad_types), else the block kernels.
  const int per_lane = warp_row_lanes(rows, cols);
  const DType gx_dtype = grad_x.defined() ? grad_x.dtype() : x.dtype();
  const auto typed = [&](auto&& f) { return per_lane != 0 && with_grad_types(x.dtype(), grad_y.dtype(), gx_dtype, f); };
  if (grad_x.defined() && params && fused) {
    const std::int64_t blocks = std::min<std::int64_t>(kFusedMaxBlocks, (rows + kFusedWarps - 1) / kFusedWarps);
    const Tensor partial = Tensor::empty({2 * blocks * cols}, DType::f32, x.device());
    const bool launched = typed([&](auto* t_type, auto* g_type) {
      with_lanes(per_lane, [&](auto lanes) {
        layer_norm_backward_warp_kernel<lanes(), std::remove_pointer_t<decltype(t_type)>, std::remove_pointer_t<decltype(g_type)>>
            <<<static_cast<unsigned>(blocks), 32 * kFusedWarps, 0, stream()>>>(
                rows, rows_of(x), element_type(x.dtype()), x.data(), a, element_type(mean.dtype()), mean.data(),
                mean.strides()[0], element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y),
                element_type(grad_y.dtype()), grad_y.data(), rows_of(grad_x), element_type(grad_x.dtype()), grad_x.data(),
                partial.data_as<float>());
      });
    });
    if (launched) {
      check_launch("layer_norm_backward");
      layer_norm_params_total(cols, blocks, partial, grad_gamma, grad_beta);
      return;
    }
  }
  if (grad_x.defined()) {
    const bool warp_rows = typed([&](auto* t_type, auto* g_type) {
      launch_warp_rows(per_lane, x.size(0), [&](auto lanes, unsigned blocks, unsigned threads) {
        layer_norm_backward_x_warp_kernel<lanes(), std::remove_pointer_t<decltype(t_type)>, std::remove_pointer_t<decltype(g_type)>>
            <<<blocks, threads, 0, stream()>>>(
                x.size(0), rows_of(x), element_type(x.dtype()), x.data(), a, element_type(mean.dtype()), mean.data(),
                mean.strides()[0], element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y),
                element_type(grad_y.dtype()), grad_y.data(), rows_of(grad_x), element_type(grad_x.dtype()), grad_x.data());
      });
    });
    if (!warp_rows) {
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
    const unsigned tiles = column_tiles(cols);
    const Tensor partial = Tensor::empty({2 * slices * cols}, DType::f32, x.device());
    // Typed with f32 statistics (as layer_norm makes them); AnyDType otherwise.
    const auto launch = [&](auto* t_type, auto* g_type) {
      layer_norm_params_partial_kernel<std::remove_pointer_t<decltype(t_type)>, std::remove_pointer_t<decltype(g_type)>>
          <<<dim3(tiles, static_cast<unsigned>(slices)), kThreads, 0, stream()>>>(
              rows_of(x), element_type(x.dtype()), x.data(), element_type(mean.dtype()), mean.data(), mean.strides()[0],
              element_type(rstd.dtype()), rstd.data(), rstd.strides()[0], rows_of(grad_y), element_type(grad_y.dtype()),
              grad_y.data(), slice_rows, partial.data_as<float>());
    };
    const bool f32_stats = mean.dtype() == DType::f32 && rstd.dtype() == DType::f32;
    if (!f32_stats || !with_out_type(x.dtype(), grad_y.dtype(), launch)) {
      launch(static_cast<AnyDType*>(nullptr), static_cast<AnyDType*>(nullptr));
    }
    check_launch("layer_norm_backward");
    layer_norm_params_total(cols, slices, partial, grad_gamma, grad_beta);
  }
}

}  // namespace mantissa::detail::cuda
