// CUDA kernels of the copy, elementwise and loss-scaling families: one thread per element over strided
// views (grid-stride loops), values read into f32, computed with the CPU's own formulas
// (cpu/unary_math.h, compiled for the GPU) and rounded once by the CPU's rule (encode_rules.h). Operands
// contiguous alike in f32, bf16 or f16 take kernels compiled for their dtypes (flat_types.cuh).
#include <algorithm>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "../cpu/unary_math.h"
#include "../kernels.h"
#include "../read_later.h"
#include "chunk_lists.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"
#include "flat_types.cuh"

namespace mantissa::detail::cuda {
namespace {

// f64 is kept exact by Copy: narrowed to f32 by rounding to odd, then by the rule (as the CPU's
// store_element), or copied as it is.
__device__ float round_to_odd(double d) {
  if (d != d) return static_cast<float>(d);
  float f = __double2float_rz(d);
  if (static_cast<double>(f) == d) return f;
  return __uint_as_float(__float_as_uint(f) | 1U);
}

__global__ void copy_kernel(Strided<2> it, std::int64_t n, ElementType from, const void* src, ElementType to,
                            void* dst) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t o[2];
    it.offsets(i, o);
    if (from.dtype == to.dtype) {  // the same bits, whatever they are
      switch (dtype_size(from.dtype)) {
        case 8: static_cast<std::uint64_t*>(dst)[o[1]] = static_cast<const std::uint64_t*>(src)[o[0]]; break;
        case 4: static_cast<std::uint32_t*>(dst)[o[1]] = static_cast<const std::uint32_t*>(src)[o[0]]; break;
        case 2: static_cast<std::uint16_t*>(dst)[o[1]] = static_cast<const std::uint16_t*>(src)[o[0]]; break;
        default: static_cast<std::uint8_t*>(dst)[o[1]] = static_cast<const std::uint8_t*>(src)[o[0]]; break;
      }
    } else if (from.dtype == DType::f64) {
      const double d = static_cast<const double*>(src)[o[0]];
      store(to, dst, o[1], to.dtype == DType::f32 ? static_cast<float>(d) : round_to_odd(d));
    } else if (to.dtype == DType::f64) {
      static_cast<double*>(dst)[o[1]] = load(from, src, o[0]);
    } else {
      store(to, dst, o[1], load(from, src, o[0]));
    }
  }
}

__global__ void binary_kernel(Strided<3> it, std::int64_t n, BinaryOp op, ElementType ta, const void* a,
                              ElementType tb, const void* b, ElementType tout, void* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t o[3];
    it.offsets(i, o);
    store(tout, out, o[2], binary_value(op, load(ta, a, o[0]), load(tb, b, o[1])));
  }
}

__global__ void unary_kernel(Strided<2> it, std::int64_t n, UnaryOp op, float alpha, ElementType tx, const void* x,
                             ElementType tout, void* out) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t o[2];
    it.offsets(i, o);
    store(tout, out, o[1], unary_value(op, load(tx, x, o[0]), alpha));
  }
}

__global__ void unary_backward_kernel(Strided<3> it, std::int64_t n, UnaryOp op, float alpha, ElementType tx,
                                      const void* x, ElementType tg, const void* g, ElementType tgx, void* gx) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t o[3];
    it.offsets(i, o);
    store(tgx, gx, o[2], unary_gradient(op, load(tx, x, o[0]), load(tg, g, o[1]), alpha));
  }
}

// The fast path's kernels: element i of each operand, the dtypes as types, 8 at a time where packed.
template <class S, class D>
__global__ void cast_flat_kernel(std::int64_t n, bool packed, ElementType from, const S* src, ElementType to, D* dst) {
  flat_map(n, packed, [&](S s) { return from_f32<D>(to_f32(s, from), to); }, dst, src);
}

template <class A, class B, class O>
__global__ void binary_flat_kernel(std::int64_t n, bool packed, BinaryOp op, ElementType ta, const A* a, ElementType tb,
                                   const B* b, ElementType tout, O* out) {
  flat_map(n, packed, [&](A x, B y) { return from_f32<O>(binary_value(op, to_f32(x, ta), to_f32(y, tb)), tout); }, out, a, b);
}

// The unary op as a compile-time constant where kOp >= 0 (the GELUs of an MLP, whose element math is
// most of their kernels' time: no switch on op for each element), else the op given at run time.
template <int kOp>
__device__ inline UnaryOp op_or(UnaryOp op) {
  if constexpr (kOp >= 0) {
    return static_cast<UnaryOp>(kOp);
  } else {
    return op;
  }
}
constexpr int kAnyOp = -1;

template <class X, class O, int kOp = kAnyOp>
__global__ void unary_flat_kernel(std::int64_t n, bool packed, UnaryOp op, float alpha, ElementType tx, const X* x,
                                  ElementType tout, O* out) {
  flat_map(n, packed, [&](X v) { return from_f32<O>(unary_value(op_or<kOp>(op), to_f32(v, tx), alpha), tout); }, out, x);
}

template <class X, class G, class O, int kOp = kAnyOp>
__global__ void unary_backward_flat_kernel(std::int64_t n, bool packed, UnaryOp op, float alpha, ElementType tx, const X* x,
                                           ElementType tg, const G* g, ElementType tgx, O* gx) {
  flat_map(n, packed,
           [&](X v, G d) { return from_f32<O>(unary_gradient(op_or<kOp>(op), to_f32(v, tx), to_f32(d, tg), alpha), tgx); }, gx, x,
           g);
}

// launch(std::integral_constant<int, op>) for the ops compiled as constants where every tensor has one
// dtype (kSameDtype: only those kernels are instantiated), else launch(std::integral_constant<int, kAnyOp>).
template <bool kSameDtype, class Launch>
void with_unary_op(UnaryOp op, Launch&& launch) {
  if constexpr (kSameDtype) {
    if (op == UnaryOp::gelu) return launch(std::integral_constant<int, static_cast<int>(UnaryOp::gelu)>{});
    if (op == UnaryOp::gelu_tanh) return launch(std::integral_constant<int, static_cast<int>(UnaryOp::gelu_tanh)>{});
  }
  launch(std::integral_constant<int, kAnyOp>{});
}

// launch(a, b, ...) with each tensor's data as a pointer to its flat type, when every tensor has one.
template <class Launch>
bool with_flat_pointers(const Tensor& a, const Tensor& b, Launch&& launch) {
  bool done = false;
  with_flat_type(a.dtype(), [&](auto* ta) {
    with_flat_type(b.dtype(), [&](auto* tb) {
      launch(static_cast<decltype(ta)>(a.data()), static_cast<decltype(tb)>(b.data()));
      done = true;
    });
  });
  return done;
}
template <class Launch>
bool with_flat_pointers(const Tensor& a, const Tensor& b, const Tensor& c, Launch&& launch) {
  bool done = false;
  with_flat_type(c.dtype(), [&](auto* tc) {
    done = with_flat_pointers(a, b, [&](auto* pa, auto* pb) { launch(pa, pb, static_cast<decltype(tc)>(c.data())); });
  });
  return done;
}

// One thread's share of the pass: element o of g. The pass adds its totals into kernels.h's CheckTotals
// in device memory (the layout a caller may read later, read_later.h).
struct CheckTally {
  unsigned long long nonfinite = 0, underflow = 0;
  double squares = 0;

  __device__ void add(const ElementType& tg, void* g, std::int64_t o, float factor, bool write, float underflow_below) {
    const float v = load(tg, g, o);
    if (v != 0 && fabsf(v) < underflow_below) ++underflow;
    float r = v;
    if (write) {
      store(tg, g, o, mul_as_cpu(v, factor));
      r = load(tg, g, o);  // the value as stored, as the CPU's check sees it
    }
    if (isfinite(r)) {
      squares += static_cast<double>(r) * r;
    } else {
      ++nonfinite;
    }
  }

  // Sums over the warp, then one atomic per warp. Every thread of the block calls it.
  __device__ void add_to(CheckTotals* totals) {
    for (int d = 16; d > 0; d /= 2) {
      nonfinite += __shfl_down_sync(0xffffffffU, nonfinite, d);
      underflow += __shfl_down_sync(0xffffffffU, underflow, d);
      squares += __shfl_down_sync(0xffffffffU, squares, d);
    }
    if ((threadIdx.x & 31) == 0) {
      atomicAdd(reinterpret_cast<unsigned long long*>(&totals->nonfinite), nonfinite);
      atomicAdd(reinterpret_cast<unsigned long long*>(&totals->underflow), underflow);
      atomicAdd(&totals->sum_squares, squares);
    }
  }
};

// A strided gradient: one launch of its own.
__global__ void scale_and_check_kernel(Strided<1> it, std::int64_t n, ElementType tg, void* g, float factor,
                                       bool write, float underflow_below, CheckTotals* totals) {
  CheckTally tally;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t o[1];
    it.offsets(i, o);
    tally.add(tg, g, o[0], factor, write, underflow_below);
  }
  tally.add_to(totals);
}

// Contiguous gradients of one dtype, many to a launch (chunk_lists.h): each block takes one chunk of
// kCheckChunk elements of one tensor. The list is a kernel parameter (under 4 KiB).
constexpr std::int64_t kCheckChunk = kScaleCheckLists.chunk;
struct TensorList {
  void* data[kScaleCheckLists.tensors];
  std::int64_t count[kScaleCheckLists.tensors];
  std::uint8_t block_tensor[kScaleCheckLists.blocks];
  std::int32_t block_chunk[kScaleCheckLists.blocks];
};
static_assert(sizeof(TensorList) + sizeof(ElementType) + 64 <= 4096, "kernel parameters past 4 KiB");

__global__ void scale_and_check_list_kernel(TensorList list, ElementType tg, float factor, bool write,
                                            float underflow_below, CheckTotals* totals) {
  const int t = list.block_tensor[blockIdx.x];
  const std::int64_t begin = static_cast<std::int64_t>(list.block_chunk[blockIdx.x]) * kCheckChunk;
  const std::int64_t end = begin + kCheckChunk < list.count[t] ? begin + kCheckChunk : list.count[t];
  CheckTally tally;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    tally.add(tg, list.data[t], i, factor, write, underflow_below);
  }
  tally.add_to(totals);
}

// Launches the list kernel over the contiguous tensors of `dtype` among `gradients`.
void check_contiguous(std::span<const Tensor> gradients, DType dtype, float factor, bool write, float below,
                      CheckTotals* totals) {
  std::vector<const Tensor*> chosen;
  std::vector<std::int64_t> counts;
  for (const Tensor& g : gradients) {
    if (g.dtype() != dtype || !g.is_contiguous() || g.numel() == 0) continue;
    chosen.push_back(&g);
    counts.push_back(g.numel());
  }
  for (const ChunkLaunch& l : plan_chunk_launches(counts, kScaleCheckLists)) {
    TensorList list{};
    for (std::size_t slot = 0; slot < l.members.size(); ++slot) {
      list.data[slot] = chosen[l.members[slot]]->data();
      list.count[slot] = counts[l.members[slot]];
    }
    for (std::size_t b = 0; b < l.blocks.size(); ++b) {
      list.block_tensor[b] = static_cast<std::uint8_t>(l.blocks[b].slot);
      list.block_chunk[b] = static_cast<std::int32_t>(l.blocks[b].chunk);
    }
    scale_and_check_list_kernel<<<static_cast<unsigned>(l.blocks.size()), kThreads, 0, stream()>>>(
        list, element_type(dtype), factor, write, below, totals);
    check_launch("scale_and_check");
  }
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst) {
  const std::int64_t n = src.numel();
  if (n == 0) return;
  const Tensor* ts[2] = {&src, &dst};
  const Strided<2> it = strided(src.shape(), ts, "copy");
  const ElementType from = element_type(src.dtype()), to = element_type(dst.dtype());
  const bool flat = src.dtype() != dst.dtype() && is_flat(it) && with_flat_pointers(src, dst, [&](const auto* s, auto* d) {
    const bool packed = packable({s, d});
    cast_flat_kernel<<<flat_blocks(n, packed), kThreads, 0, stream()>>>(n, packed, from, s, to, d);
  });
  if (!flat) copy_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(it, n, from, src.data(), to, dst.data());
  check_launch("copy");
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  for (const Tensor* t : {&a, &b, &out}) refuse_f64("binary", *t);
  const std::int64_t n = out.numel();
  if (n == 0) return;
  const Tensor* ts[3] = {&a, &b, &out};
  const Strided<3> it = strided(out.shape(), ts, "binary");
  const ElementType ta = element_type(a.dtype()), tb = element_type(b.dtype()), tout = element_type(out.dtype());
  const bool flat = is_flat(it) && with_flat_pointers(a, b, out, [&](const auto* pa, const auto* pb, auto* po) {
    const bool packed = packable({pa, pb, po});
    binary_flat_kernel<<<flat_blocks(n, packed), kThreads, 0, stream()>>>(n, packed, op, ta, pa, tb, pb, tout, po);
  });
  if (!flat) binary_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(it, n, op, ta, a.data(), tb, b.data(), tout, out.data());
  check_launch("binary");
}

void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) {
  for (const Tensor* t : {&x, &out}) refuse_f64("unary", *t);
  const std::int64_t n = x.numel();
  if (n == 0) return;
  const Tensor* ts[2] = {&x, &out};
  const Strided<2> it = strided(x.shape(), ts, "unary");
  const ElementType tx = element_type(x.dtype()), tout = element_type(out.dtype());
  const auto a = static_cast<float>(alpha);
  const bool flat = is_flat(it) && with_flat_pointers(x, out, [&](const auto* px, auto* po) {
    using X = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
    using O = std::remove_pointer_t<decltype(po)>;
    const bool packed = packable({px, po});
    with_unary_op<std::is_same_v<X, O>>(op, [&](auto k) {
      unary_flat_kernel<X, O, k()><<<flat_blocks(n, packed), kThreads, 0, stream()>>>(n, packed, op, a, tx, px, tout, po);
    });
  });
  if (!flat) unary_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(it, n, op, a, tx, x.data(), tout, out.data());
  check_launch("unary");
}

void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) {
  for (const Tensor* t : {&x, &grad_y, &grad_x}) refuse_f64("unary_backward", *t);
  const std::int64_t n = x.numel();
  if (n == 0) return;
  const Tensor* ts[3] = {&x, &grad_y, &grad_x};
  const Strided<3> it = strided(x.shape(), ts, "unary_backward");
  const ElementType tx = element_type(x.dtype()), tg = element_type(grad_y.dtype()), tgx = element_type(grad_x.dtype());
  const auto a = static_cast<float>(alpha);
  const bool flat = is_flat(it) && with_flat_pointers(x, grad_y, grad_x, [&](const auto* px, const auto* pg, auto* pgx) {
    using X = std::remove_cv_t<std::remove_pointer_t<decltype(px)>>;
    using G = std::remove_cv_t<std::remove_pointer_t<decltype(pg)>>;
    using O = std::remove_pointer_t<decltype(pgx)>;
    constexpr bool same = std::is_same_v<X, G> && std::is_same_v<X, O>;
    const bool packed = packable({px, pg, pgx});
    with_unary_op<same>(op, [&](auto k) {
      unary_backward_flat_kernel<X, G, O, k()>
          <<<flat_blocks(n, packed), kThreads, 0, stream()>>>(n, packed, op, a, tx, px, tg, pg, tgx, pgx);
    });
  });
  if (!flat) {
    unary_backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(it, n, op, a, tx, x.data(), tg, grad_y.data(), tgx,
                                                                     grad_x.data());
  }
  check_launch("unary_backward");
}

GradientCheck scale_and_check(std::span<const Tensor> gradients, double factor, double underflow_below, const Tensor& left) {
  if (!gradients.empty()) check_place<CheckTotals>("scale_and_check", left, gradients.front().device());
  GradientCheck result;
  std::vector<DType> dtypes;  // of the contiguous gradients, in order of appearance
  for (const Tensor& g : gradients) {
    refuse_f64("scale_and_check", g);
    result.count += g.numel();
    if (g.is_contiguous() && std::find(dtypes.begin(), dtypes.end(), g.dtype()) == dtypes.end()) {
      dtypes.push_back(g.dtype());
    }
  }
  if (result.count == 0) return result;
  // Every launch adds into one small device buffer: the caller's (read by it later, with the step's
  // other values), or one of the caching allocator's, read back once here.
  const DeviceTotals<CheckTotals> totals(gradients.front().device(), left);
  CheckTotals* t = totals.get();
  const auto f = static_cast<float>(factor);
  const bool write = factor != 1.0;
  const auto below = static_cast<float>(underflow_below);
  for (DType d : dtypes) check_contiguous(gradients, d, f, write, below, t);
  for (const Tensor& g : gradients) {
    if (g.is_contiguous() || g.numel() == 0) continue;
    const Tensor* ts[1] = {&g};
    scale_and_check_kernel<<<blocks_for(g.numel()), kThreads, 0, stream()>>>(
        strided(g.shape(), ts, "scale_and_check"), g.numel(), element_type(g.dtype()), g.data(), f, write, below, t);
    check_launch("scale_and_check");
  }
  return totals.left() ? result : check_of(totals.read(), result.count);
}

}  // namespace mantissa::detail::cuda
