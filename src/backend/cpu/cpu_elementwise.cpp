// Elementwise kernels of the CPU backend: rows of every operand are converted to f32 in blocks (contiguous
// f32 rows are read and written in place), the op runs in f32 in loops the compiler vectorizes (the op is
// a template argument, so no switch per element), and the result is rounded once into the output dtype.
// Rows are split across threads.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "../../core/channels_last.h"
#include "../read_later.h"
#include "../reference/reference_kernels.h"
#include "cpu_kernels.h"
#include "onednn_context.h"
#include "mantissa/numeric/bulk.h"
#include "rows.h"
#include "unary_math.h"

// glibc's vector math library (libmvec, part of libm) has SIMD versions of these; declaring them so
// lets GCC vectorize the loops that call them (exp, in GELU's too, and tanh) in each ISA's clone.
extern "C" {
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float tanhf(float);
}

namespace mantissa::detail {
namespace {

// Below this many elements, one thread.
constexpr std::int64_t kParallelElements = 1 << 15;

// Runs body(offsets, inner_strides, n, bufs) over every row segment of at most kRowBlock elements;
// bufs[k] is a float buffer per operand. Segments (not rows) are split across threads, so one long
// contiguous row parallelizes as well as many short ones. The dimensions are walked in the memory order
// of the last operand (the output): a permuted dense output (channels-last) then gives rows as long as
// a contiguous one's, not rows strided by C (the order of an elementwise op's elements changes no result).
template <std::size_t N, class Body>
void for_segments(const Shape& shape_in, const std::array<const Tensor*, N>& ops, Body&& body) {
  const Shape& order_by = ops.back()->strides();
  std::vector<std::size_t> dims(shape_in.size());
  for (std::size_t d = 0; d < dims.size(); ++d) dims[d] = d;
  std::stable_sort(dims.begin(), dims.end(), [&](std::size_t a, std::size_t b) { return order_by[a] > order_by[b]; });
  Shape shape;
  std::vector<Shape> strides(N);
  for (const std::size_t d : dims) {
    shape.push_back(shape_in[d]);
    for (std::size_t k = 0; k < N; ++k) strides[k].push_back(ops[k]->strides()[d]);
  }
  const RowSpace space(shape, strides);
  const std::int64_t len = space.row_length();
  const std::int64_t per_row = (len + kRowBlock - 1) / kRowBlock;
  const std::int64_t segments = space.rows() * per_row;
  const bool parallel = space.rows() * len >= kParallelElements && segments > 1;
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t s = 0; s < segments; ++s) {
    alignas(64) float bufs[N][kRowBlock];
    std::int64_t off[N];
    space.row_offsets(s / per_row, off);
    const std::int64_t at = (s % per_row) * kRowBlock;
    const std::int64_t n = std::min(kRowBlock, len - at);
    std::int64_t seg[N];
    std::int64_t inner[N];
    for (std::size_t k = 0; k < N; ++k) {
      inner[k] = space.inner_stride(k);
      seg[k] = off[k] + at * inner[k];
    }
    body(seg, inner, n, bufs);
  }
}

// The loops, over f32 or bf16 storage (T: float or bf16 bits, rows.h's f32_of and store_as).
template <BinaryOp Op, class T>
[[gnu::always_inline]] inline void binary_loop(const T* a, const T* b, T* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) store_as(out[i], binary_value(Op, f32_of(a[i]), f32_of(b[i])));
}

template <UnaryOp Op, class T>
[[gnu::always_inline]] inline void unary_loop(const T* x, T* out, std::int64_t n, float alpha) {
  for (std::int64_t i = 0; i < n; ++i) store_as(out[i], unary_value(Op, f32_of(x[i]), alpha));
}

template <UnaryOp Op, class T>
[[gnu::always_inline]] inline void unary_backward_loop(const T* x, const T* g, T* out, std::int64_t n, float alpha) {
  for (std::int64_t i = 0; i < n; ++i) store_as(out[i], unary_gradient(Op, f32_of(x[i]), f32_of(g[i]), alpha));
}

template <class T>
[[gnu::always_inline]] inline void dispatch_binary(BinaryOp op, const T* a, const T* b, T* out, std::int64_t n) {
  switch (op) {
    case BinaryOp::add: return binary_loop<BinaryOp::add>(a, b, out, n);
    case BinaryOp::sub: return binary_loop<BinaryOp::sub>(a, b, out, n);
    case BinaryOp::mul: return binary_loop<BinaryOp::mul>(a, b, out, n);
    case BinaryOp::div: return binary_loop<BinaryOp::div>(a, b, out, n);
    case BinaryOp::eq: return binary_loop<BinaryOp::eq>(a, b, out, n);
  }
}
MANTISSA_VECTOR_CLONES void run_binary(BinaryOp op, const float* a, const float* b, float* out, std::int64_t n) {
  dispatch_binary(op, a, b, out, n);
}
MANTISSA_VECTOR_CLONES void run_binary(BinaryOp op, const std::uint16_t* a, const std::uint16_t* b, std::uint16_t* out,
                                       std::int64_t n) {
  dispatch_binary(op, a, b, out, n);
}

// Calls fn.template operator()<Op>() for the op given at run time. Inlined, with fn, into each ISA's clone
// of its callers: a call left out of line is compiled for the baseline ISA (SSE2, and libmvec's SSE
// expf, a quarter of AVX-512's width).
template <class Fn>
[[gnu::always_inline]] inline void dispatch_unary(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::neg: return fn.template operator()<UnaryOp::neg>();
    case UnaryOp::abs: return fn.template operator()<UnaryOp::abs>();
    case UnaryOp::add_scalar: return fn.template operator()<UnaryOp::add_scalar>();
    case UnaryOp::mul_scalar: return fn.template operator()<UnaryOp::mul_scalar>();
    case UnaryOp::pow_scalar: return fn.template operator()<UnaryOp::pow_scalar>();
    case UnaryOp::exp: return fn.template operator()<UnaryOp::exp>();
    case UnaryOp::log: return fn.template operator()<UnaryOp::log>();
    case UnaryOp::sqrt: return fn.template operator()<UnaryOp::sqrt>();
    case UnaryOp::relu: return fn.template operator()<UnaryOp::relu>();
    case UnaryOp::gelu: return fn.template operator()<UnaryOp::gelu>();
    case UnaryOp::silu: return fn.template operator()<UnaryOp::silu>();
    case UnaryOp::tanh: return fn.template operator()<UnaryOp::tanh>();
    case UnaryOp::sigmoid: return fn.template operator()<UnaryOp::sigmoid>();
    case UnaryOp::gelu_tanh: return fn.template operator()<UnaryOp::gelu_tanh>();
  }
}

// The elementwise loops for one block, per ISA (the loops above are inlined into each clone).
MANTISSA_VECTOR_CLONES void run_unary(UnaryOp op, const float* x, float* out, std::int64_t n, float alpha) {
  dispatch_unary(op, [&]<UnaryOp Op>() __attribute__((always_inline)) { unary_loop<Op>(x, out, n, alpha); });
}
MANTISSA_VECTOR_CLONES void run_unary(UnaryOp op, const std::uint16_t* x, std::uint16_t* out, std::int64_t n, float alpha) {
  dispatch_unary(op, [&]<UnaryOp Op>() __attribute__((always_inline)) { unary_loop<Op>(x, out, n, alpha); });
}

MANTISSA_VECTOR_CLONES void run_unary_backward(UnaryOp op, const float* x, const float* g, float* out, std::int64_t n,
                                               float alpha) {
  dispatch_unary(op, [&]<UnaryOp Op>() __attribute__((always_inline)) { unary_backward_loop<Op>(x, g, out, n, alpha); });
}
MANTISSA_VECTOR_CLONES void run_unary_backward(UnaryOp op, const std::uint16_t* x, const std::uint16_t* g, std::uint16_t* out,
                                               std::int64_t n, float alpha) {
  dispatch_unary(op, [&]<UnaryOp Op>() __attribute__((always_inline)) { unary_backward_loop<Op>(x, g, out, n, alpha); });
}

// A segment's bf16 elements where they are (bf16_in_place).
std::uint16_t* bf16_at(const Tensor& t, std::int64_t off) { return t.data_as<std::uint16_t>() + off; }

// Copies one row of n elements of `size` bytes, `from_stride` and `to_stride` elements apart, bit for bit.
void copy_row(const std::byte* from, std::int64_t from_stride, std::byte* to, std::int64_t to_stride, std::int64_t n,
              std::size_t size) {
  if (from_stride == 1 && to_stride == 1) {
    std::memcpy(to, from, static_cast<std::size_t>(n) * size);
    return;
  }
  const auto strided = [&]<class Bits>() {
    const auto* f = reinterpret_cast<const Bits*>(from);
    auto* t = reinterpret_cast<Bits*>(to);
    for (std::int64_t i = 0; i < n; ++i) t[i * to_stride] = f[i * from_stride];
  };
  switch (size) {
    case 1: return strided.template operator()<std::uint8_t>();
    case 2: return strided.template operator()<std::uint16_t>();
    case 4: return strided.template operator()<std::uint32_t>();
    default: return strided.template operator()<std::uint64_t>();
  }
}

// A same-dtype copy, bit for bit: one copy_row per row (a memcpy where the last dimension is contiguous
// on both sides), the rows walked with a running multi-index (no division per row; rows of a few dozen
// elements made the per-row offset arithmetic cost more than the copy), split across threads.
void copy_rows(const Tensor& src, const Tensor& dst) {
  const Shape& shape = src.shape();
  const int outer = static_cast<int>(shape.size()) - 1;
  const std::int64_t len = shape.back();
  std::int64_t rows = 1;
  for (int d = 0; d < outer; ++d) rows *= shape[static_cast<std::size_t>(d)];
  if (rows == 0 || len == 0) return;
  const std::size_t size = dtype_size(src.dtype());
  const auto* from = static_cast<const std::byte*>(src.data());
  auto* to = static_cast<std::byte*>(dst.data());
  const Shape& ss = src.strides();
  const Shape& ds = dst.strides();
#pragma omp parallel if (rows * len >= kParallelElements)
  {
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    const std::int64_t begin = rows * me / threads, end = rows * (me + 1) / threads;
    std::vector<std::int64_t> idx(static_cast<std::size_t>(outer));
    std::int64_t so = 0, d_off = 0;
    for (std::int64_t r = begin, d = outer - 1; d >= 0; --d) {  // the first row's index and offsets
      const auto u = static_cast<std::size_t>(d);
      idx[u] = r % shape[u];
      r /= shape[u];
      so += idx[u] * ss[u];
      d_off += idx[u] * ds[u];
    }
    for (std::int64_t r = begin; r < end; ++r) {
      copy_row(from + static_cast<std::size_t>(so) * size, ss.back(), to + static_cast<std::size_t>(d_off) * size,
               ds.back(), len, size);
      for (int d = outer - 1; d >= 0; --d) {  // next row: increment the index, carrying
        const auto u = static_cast<std::size_t>(d);
        so += ss[u];
        d_off += ds[u];
        if (++idx[u] < shape[u]) break;
        so -= ss[u] * shape[u];
        d_off -= ds[u] * shape[u];
        idx[u] = 0;
      }
    }
  }
}

// ReLU on the bits of one dtype, at memory speed: negative numbers (and -0) become +0; positive ones
// and NaN pass (a NaN's magnitude bits exceed inf's), a NaN with `quiet` (its format's quiet bit, or 0
// for f32) set: the bits of the f32 loop, through the conversions for bf16 and f16 (which quiet every
// NaN). The same as unary_value's relu, and four times faster than converting bf16 through f32 (bf16
// 21 G/s, oneDNN's relu 15).
template <class Bits>
MANTISSA_VECTOR_CLONES void relu_bits_loop(const Bits* x, Bits* y, std::int64_t n, Bits inf, Bits quiet) {
  constexpr Bits kSign = Bits(Bits(1) << (8 * sizeof(Bits) - 1));
  for (std::int64_t i = 0; i < n; ++i) {
    const Bits v = x[i], magnitude = Bits(v & Bits(~kSign));
    const bool zero_it = (v & kSign) != 0 && magnitude <= inf;
    const Bits kept = magnitude > inf ? Bits(v | quiet) : v;
    y[i] = zero_it ? Bits(0) : kept;
  }
}

template <class Bits>
void relu_bits(const Bits* x, Bits* y, std::int64_t n, Bits inf, Bits quiet) {
  constexpr std::int64_t kChunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (std::int64_t at = 0; at < n; at += kChunk) relu_bits_loop(x + at, y + at, std::min(kChunk, n - at), inf, quiet);
}

// Its backward on bits: g where x > 0 (sign clear, not zero, not NaN), else +0 (unary_gradient's rule);
// a NaN g made quiet as above.
template <class Bits>
MANTISSA_VECTOR_CLONES void relu_backward_bits_loop(const Bits* x, const Bits* g, Bits* out, std::int64_t n, Bits inf,
                                                    Bits quiet) {
  constexpr Bits kSign = Bits(Bits(1) << (8 * sizeof(Bits) - 1));
  for (std::int64_t i = 0; i < n; ++i) {
    const Bits v = x[i], gv = g[i];
    const bool positive = (v & kSign) == 0 && v != 0 && v <= inf;
    const Bits kept = Bits(gv & Bits(~kSign)) > inf ? Bits(gv | quiet) : gv;
    out[i] = positive ? kept : Bits(0);
  }
}

template <class Bits>
void relu_backward_bits(const Bits* x, const Bits* g, Bits* out, std::int64_t n, Bits inf, Bits quiet) {
  constexpr std::int64_t kChunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (std::int64_t at = 0; at < n; at += kChunk) {
    relu_backward_bits_loop(x + at, g + at, out + at, std::min(kChunk, n - at), inf, quiet);
  }
}

// The oneDNN type a same-dtype copy can move its elements as, bit for bit (f16 as bf16: oneDNN's
// bf16-to-bf16 reorder moves the 16 bits untouched where the CPU has AVX-512, its f16 one is a slow
// reference loop that also quiets signalling NaNs); nullopt when it cannot (fp8, more than 12 dimensions,
// zero or negative strides, or a reorder that is not bit for bit on this CPU: AVX2's goes through f32).
std::optional<DType> reorder_type(const Tensor& src, const Tensor& dst) {
  const DType t = src.dtype();
  if (t != dst.dtype() || (t != DType::f32 && t != DType::bf16 && t != DType::f16)) return std::nullopt;
  if (src.numel() == 0 || src.dim() < 2 || src.dim() > DNNL_MAX_NDIMS) return std::nullopt;
  for (std::size_t d = 0; d < src.shape().size(); ++d) {
    if (src.strides()[d] <= 0 || dst.strides()[d] <= 0) return std::nullopt;
  }
  const DType bits = t == DType::f16 ? DType::bf16 : t;
  if (!onednn_supports(OnednnPrimitive::reorder, bits)) return std::nullopt;
  return bits;
}

// Whether a and b lie densely in the same order (both contiguous, or both channels-last with the same
// strides): element i of one's memory is element i of the other's.
bool same_dense_layout(const Tensor& a, const Tensor& b) {
  if (a.is_contiguous() && b.is_contiguous()) return true;
  return is_channels_last(a) && a.strides() == b.strides() && a.shape() == b.shape();
}

}  // namespace

void cpu_copy(const Tensor& src, const Tensor& dst) {
  // Contiguous same-dtype copies are a memcpy; contiguous casts are one bulk conversion.
  if (src.is_contiguous() && dst.is_contiguous()) {
    const auto n = static_cast<std::size_t>(src.numel());
    if (src.dtype() == dst.dtype()) {
      std::memcpy(dst.data(), src.data(), n * dtype_size(src.dtype()));
      return;
    }
    if (src.dtype() == DType::f32 && dst.dtype() != DType::f64) {
      encode_array(format_of(dst.dtype()), src.data_as<float>(), dst.data(), n);
      return;
    }
    if (dst.dtype() == DType::f32 && src.dtype() != DType::f64) {
      decode_array(format_of(src.dtype()), src.data(), dst.data_as<float>(), n);
      return;
    }
  }
  if (src.dtype() == dst.dtype() && src.dim() >= 2 && src.strides().back() == 1 && dst.strides().back() == 1) {
    copy_rows(src, dst);  // permuted copies of whole rows (attention's heads)
    return;
  }
  if (const std::optional<DType> bits = reorder_type(src, dst)) {
    // Other same-dtype layouts, such as a transposed view made contiguous: oneDNN's reorder moves
    // tiles, where the segment loop below gathers element by element (and round-trips through f32).
    onednn_reorder(src.shape(), src.strides(), src.data(), dst.strides(), dst.data(), *bits);
    return;
  }
  if (src.dtype() == dst.dtype() && src.dim() >= 1) {
    copy_rows(src, dst);  // the rest of the same-dtype copies: element by element, bit for bit
    return;
  }
  const std::array<const Tensor*, 2> ops{&src, &dst};
  for_segments(src.shape(), ops, [&](const std::int64_t* off, const std::int64_t* inner, std::int64_t n, auto& b) {
    load_f32(src, off[0], inner[0], n, b[0]);
    store_f32(dst, off[1], inner[1], n, b[0]);
  });
}

void cpu_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const std::array<const Tensor*, 3> ops{&a, &b, &out};
  for_segments(out.shape(), ops, [&](const std::int64_t* off, const std::int64_t* inner, std::int64_t n, auto& buf) {
    if (bf16_in_place(a, inner[0]) && bf16_in_place(b, inner[1]) && bf16_in_place(out, inner[2])) {
      return run_binary(op, bf16_at(a, off[0]), bf16_at(b, off[1]), bf16_at(out, off[2]), n);
    }
    float* to = f32_destination(out, off[2], inner[2], buf[2]);
    run_binary(op, f32_source(a, off[0], inner[0], n, buf[0]), f32_source(b, off[1], inner[1], n, buf[1]), to, n);
    f32_finish(out, off[2], inner[2], n, to);
  });
}

void cpu_unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) {
  if (op == UnaryOp::relu && x.dtype() == out.dtype() && same_dense_layout(x, out)) {
    const auto n = x.numel();
    switch (x.dtype()) {
      case DType::f32: return relu_bits(x.data_as<std::uint32_t>(), out.data_as<std::uint32_t>(), n, 0x7f800000U, 0U);
      case DType::bf16:
        return relu_bits(x.data_as<std::uint16_t>(), out.data_as<std::uint16_t>(), n, std::uint16_t{0x7f80},
                         std::uint16_t{0x40});
      case DType::f16:
        return relu_bits(x.data_as<std::uint16_t>(), out.data_as<std::uint16_t>(), n, std::uint16_t{0x7c00},
                         std::uint16_t{0x200});
      default: break;
    }
  }
  const std::array<const Tensor*, 2> ops{&x, &out};
  const auto a = static_cast<float>(alpha);
  for_segments(x.shape(), ops, [&](const std::int64_t* off, const std::int64_t* inner, std::int64_t n, auto& buf) {
    if (bf16_in_place(x, inner[0]) && bf16_in_place(out, inner[1])) {
      return run_unary(op, bf16_at(x, off[0]), bf16_at(out, off[1]), n, a);
    }
    float* to = f32_destination(out, off[1], inner[1], buf[1]);
    run_unary(op, f32_source(x, off[0], inner[0], n, buf[0]), to, n, a);
    f32_finish(out, off[1], inner[1], n, to);
  });
}

void cpu_unary_keeping_input(UnaryOp op, double alpha, const Tensor& x, const Tensor& out, const Tensor& kept) {
  const std::array<const Tensor*, 3> ops{&x, &out, &kept};
  const auto a = static_cast<float>(alpha);
  for_segments(x.shape(), ops, [&](const std::int64_t* off, const std::int64_t* inner, std::int64_t n, auto& buf) {
    load_f32(x, off[0], inner[0], n, buf[0]);
    store_f32(kept, off[2], inner[2], n, buf[0]);
    run_unary(op, buf[0], buf[1], n, a);
    store_f32(out, off[1], inner[1], n, buf[1]);
  });
}

void cpu_unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) {
  if (op == UnaryOp::relu && x.dtype() == grad_y.dtype() && x.dtype() == grad_x.dtype() && same_dense_layout(x, grad_y) &&
      same_dense_layout(x, grad_x)) {
    const auto n = x.numel();
    switch (x.dtype()) {
      case DType::f32:
        return relu_backward_bits(x.data_as<std::uint32_t>(), grad_y.data_as<std::uint32_t>(),
                                  grad_x.data_as<std::uint32_t>(), n, 0x7f800000U, 0U);
      case DType::bf16:
        return relu_backward_bits(x.data_as<std::uint16_t>(), grad_y.data_as<std::uint16_t>(),
                                  grad_x.data_as<std::uint16_t>(), n, std::uint16_t{0x7f80}, std::uint16_t{0x40});
      case DType::f16:
        return relu_backward_bits(x.data_as<std::uint16_t>(), grad_y.data_as<std::uint16_t>(),
                                  grad_x.data_as<std::uint16_t>(), n, std::uint16_t{0x7c00}, std::uint16_t{0x200});
      default: break;
    }
  }
  const std::array<const Tensor*, 3> ops{&x, &grad_y, &grad_x};
  const auto a = static_cast<float>(alpha);
  for_segments(x.shape(), ops, [&](const std::int64_t* off, const std::int64_t* inner, std::int64_t n, auto& buf) {
    if (bf16_in_place(x, inner[0]) && bf16_in_place(grad_y, inner[1]) && bf16_in_place(grad_x, inner[2])) {
      return run_unary_backward(op, bf16_at(x, off[0]), bf16_at(grad_y, off[1]), bf16_at(grad_x, off[2]), n, a);
    }
    float* to = f32_destination(grad_x, off[2], inner[2], buf[2]);
    run_unary_backward(op, f32_source(x, off[0], inner[0], n, buf[0]), f32_source(grad_y, off[1], inner[1], n, buf[1]), to,
                       n, a);
    f32_finish(grad_x, off[2], inner[2], n, to);
  });
}

}  // namespace mantissa::detail

namespace mantissa::detail {

namespace {

// Adds a block's finite squares, non-finite values and underflows (nonzero, magnitude below `below`)
// to `c`. The squares are summed in f32 vector lanes (a block is kRowBlock values, so f32 loses nothing
// that matters to a norm) and the block's sum added in f64; a block with a value whose square would
// overflow f32 is summed again in f64.
MANTISSA_VECTOR_CLONES void tally(const float* x, std::int64_t len, float below, GradientCheck& c) {
  constexpr float kHuge = 1e18f;  // squares of smaller magnitudes are finite in f32
  float squares = 0;
  std::int32_t nonfinite = 0, underflow = 0, huge = 0;
#pragma omp simd reduction(+ : squares, nonfinite, underflow, huge)
  for (std::int64_t i = 0; i < len; ++i) {
    const float a = std::fabs(x[i]);
    const bool finite = a <= std::numeric_limits<float>::max();  // false for NaN too
    const float f = finite ? a : 0.0f;
    squares += f * f;
    nonfinite += finite ? 0 : 1;
    underflow += (a != 0.0f && a < below) ? 1 : 0;
    huge += (finite && a >= kHuge) ? 1 : 0;
  }
  c.nonfinite += nonfinite;
  c.underflow += underflow;
  if (huge == 0) {
    c.sum_squares += static_cast<double>(squares);
    return;
  }
  for (std::int64_t k = 0; k < len; ++k) {
    if (std::fabs(x[k]) <= std::numeric_limits<float>::max()) c.sum_squares += static_cast<double>(x[k]) * x[k];
  }
}

// Multiplies a block by f in place; returns how many of its values were nonzero with a magnitude below
// `below` before that.
MANTISSA_VECTOR_CLONES std::int64_t scale_counting_underflow(float* x, std::int64_t len, float f, float below) {
  std::int32_t underflow = 0;
  for (std::int64_t i = 0; i < len; ++i) {
    const float a = std::fabs(x[i]);
    underflow += (a != 0.0f && a < below) ? 1 : 0;
    x[i] *= f;
  }
  return underflow;
}

// One block of `len` values of gradient g from `at` on: scaled in place (unless factor is 1), tallied into c.
void scale_and_check_block(const Tensor& g, std::int64_t at, std::int64_t len, float f, float below, GradientCheck& c) {
  // Underflow is judged before scaling, the norm after it, on the values as stored (rounded into g's
  // dtype): with a factor of 1 (no loss scaling) nothing is written. f32 gradients are worked on where
  // they are; the others through an f32 copy of the block, re-read after the scaled values are stored.
  const bool rescale = f != 1.0f;
  if (g.dtype() == DType::f32) {
    float* x = g.data_as<float>() + at;
    if (rescale) c.underflow += scale_counting_underflow(x, len, f, below);
    tally(x, len, rescale ? 0.0f : below, c);
    return;
  }
  alignas(64) float buf[kRowBlock];
  load_f32(g, at, 1, len, buf);
  if (rescale) {
    c.underflow += scale_counting_underflow(buf, len, f, below);
    store_f32(g, at, 1, len, buf);
    load_f32(g, at, 1, len, buf);
  }
  tally(buf, len, rescale ? 0.0f : below, c);
}

}  // namespace

// The whole list in one parallel loop over the blocks of every gradient (a step's gradients are many
// small tensors and a few large ones; a loop per tensor paid a thread start-up for each). Each block's
// tally is kept and the tallies summed in order: the same totals whatever the threads do.
GradientCheck cpu_scale_and_check(std::span<const Tensor> gradients, double factor, double underflow_below, const Tensor& totals) {
  if (!gradients.empty()) check_place<CheckTotals>("scale_and_check", totals, gradients.front().device());
  const auto f = static_cast<float>(factor);
  const auto below = static_cast<float>(underflow_below);
  GradientCheck total;
  struct Block {
    const Tensor* g;
    std::int64_t at, len;
  };
  std::vector<Block> blocks;
  for (const Tensor& g : gradients) {
    total.count += g.numel();
    if (!g.is_contiguous()) {
      const GradientCheck c = reference_scale_and_check(g, factor, underflow_below);
      total.nonfinite += c.nonfinite;
      total.underflow += c.underflow;
      total.sum_squares += c.sum_squares;
      continue;
    }
    const std::int64_t n = g.numel();
    for (std::int64_t at = 0; at < n; at += kRowBlock) blocks.push_back({&g, at, std::min(kRowBlock, n - at)});
  }
  std::vector<GradientCheck> part(blocks.size());
  const auto n = static_cast<std::int64_t>(blocks.size());
#pragma omp parallel for schedule(static) if (n * kRowBlock >= kParallelElements)
  for (std::int64_t b = 0; b < n; ++b) {
    const Block& block = blocks[static_cast<std::size_t>(b)];
    scale_and_check_block(*block.g, block.at, block.len, f, below, part[static_cast<std::size_t>(b)]);
  }
  for (const GradientCheck& c : part) {
    total.nonfinite += c.nonfinite;
    total.underflow += c.underflow;
    total.sum_squares += c.sum_squares;
  }
  return leave_check(total, totals);
}

}  // namespace mantissa::detail
