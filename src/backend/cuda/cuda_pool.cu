// Max and average pooling on the GPU (NCHW, contiguous) and their backward, with the reference's rules:
// a window's first maximum wins (the first NaN before it), average pooling divides by the whole window,
// padding included. Computed in f32, one thread per output (forward) or per input (backward: each input
// gathers from the windows that cover it, in the reference's order, so no atomics and the same sums).
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "pool_windows.h"

namespace mantissa::detail::cuda {
namespace {

struct Geometry {
  std::int64_t n, c, h, w, oh, ow;
  std::int64_t kh, kw, sh, sw, ph, pw;
  bool max;
};

Geometry geometry_of(const Tensor& x, const Tensor& out, const Pool2dParams& p) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), out.size(2), out.size(3), p.kernel_h, p.kernel_w,
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.max};
}

// Window (oy, ox) of plane `plane` (of n x c): its value, and for max pooling where its first maximum is
// (-1 for a window wholly in the padding).
__device__ float window(const Geometry& g, ElementType tx, const void* x, std::int64_t plane, std::int64_t oy,
                        std::int64_t ox, std::int64_t& best_at) {
  float best = -INFINITY, total = 0;
  best_at = -1;
  for (std::int64_t ky = 0; ky < g.kh; ++ky) {
    const std::int64_t iy = oy * g.sh - g.ph + ky;
    if (iy < 0 || iy >= g.h) continue;
    for (std::int64_t kx = 0; kx < g.kw; ++kx) {
      const std::int64_t ix = ox * g.sw - g.pw + kx;
      if (ix < 0 || ix >= g.w) continue;
      const std::int64_t at = (plane * g.h + iy) * g.w + ix;
      const float v = load(tx, x, at);
      total += v;
      if (best_at < 0 || (best == best && (v > best || v != v))) {
        best = v;
        best_at = at;
      }
    }
  }
  return g.max ? best : total / static_cast<float>(g.kh * g.kw);
}

__global__ void pool_kernel(Geometry g, ElementType tx, const void* x, ElementType to, void* out) {
  const std::int64_t total = g.n * g.c * g.oh * g.ow;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ox = i % g.ow, oy = i / g.ow % g.oh, plane = i / (g.ow * g.oh);
    std::int64_t best_at = 0;
    store(to, out, i, window(g, tx, x, plane, oy, ox, best_at));
  }
}

__global__ void pool_backward_kernel(Geometry g, ElementType tx, const void* x, ElementType tgo, const void* grad_out,
                                     ElementType tgx, void* grad_x) {
  const std::int64_t total = g.n * g.c * g.h * g.w;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t ix = i % g.w, iy = i / g.w % g.h, plane = i / (g.w * g.h);
    std::int64_t y0, y1, x0, x1;
    covering_windows(iy, g.kh, g.sh, g.ph, g.oh, y0, y1);
    covering_windows(ix, g.kw, g.sw, g.pw, g.ow, x0, x1);
    float sum = 0;
    for (std::int64_t oy = y0; oy <= y1; ++oy) {
      for (std::int64_t ox = x0; ox <= x1; ++ox) {
        const float go = load(tgo, grad_out, (plane * g.oh + oy) * g.ow + ox);
        if (g.max) {
          std::int64_t best_at = -1;
          window(g, tx, x, plane, oy, ox, best_at);
          if (best_at == i) sum += go;
        } else {
          sum += go / static_cast<float>(g.kh * g.kw);
        }
      }
    }
    store(tgx, grad_x, i, sum);
  }
}

void check_pool(const char* what, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    refuse_f64(what, *t);
    if (!t->is_contiguous() || t->dim() != 4) throw std::invalid_argument(std::string(what) + ": cuda pools contiguous NCHW tensors");
  }
}

}  // namespace

void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) {
  check_pool("pool2d", {&x, &out});
  if (out.numel() == 0) return;
  pool_kernel<<<blocks_for(out.numel()), kThreads, 0, stream()>>>(geometry_of(x, out, p), element_type(x.dtype()), x.data(),
                                                                   element_type(out.dtype()), out.data());
  check_launch("pool2d");
}

void pool2d_backward(const Tensor& x, const Tensor& grad_out, const Pool2dParams& p, const Tensor& grad_x) {
  check_pool("pool2d_backward", {&x, &grad_out, &grad_x});
  if (grad_x.numel() == 0) return;
  pool_backward_kernel<<<blocks_for(grad_x.numel()), kThreads, 0, stream()>>>(
      geometry_of(x, grad_out, p), element_type(x.dtype()), x.data(), element_type(grad_out.dtype()), grad_out.data(),
      element_type(grad_x.dtype()), grad_x.data());
  check_launch("pool2d_backward");
}

}  // namespace mantissa::detail::cuda
