// Matrix products on oneDNN. f32, and bf16 where oneDNN multiplies it on this CPU (AVX-512 and up), go
// straight to oneDNN's matmul on the strided views (bf16 products accumulate in f32 inside oneDNN, as
// AVX512-BF16's vdpbf16ps does). A dtype oneDNN cannot multiply here (f16 on these CPUs; bf16 on an
// AVX2-only CPU) is converted to f32 block by block (row blocks of A of about 8 MiB in f32, the weight
// once per product) and multiplied into an f32 block of the output, then rounded once: the numbers of hardware bf16/f16 with
// f32 accumulation (every bf16 and f16 value is exact in f32), without a full f32 copy of either input.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <vector>

#include "../read_later.h"
#include "../scaled_operands.h"
#include "cpu_kernels.h"
#include "onednn_context.h"
#include "rows.h"

namespace mantissa::detail {
namespace {

// One oneDNN matmul on raw pointers with the given views; accumulate adds into dst (sum post-op); a
// bias (contiguous [N], or null) is added by oneDNN before the output is rounded.
void run_matmul(const Shape& as, const Shape& ast, const void* a, const Shape& ws, const Shape& wst, const void* w,
                const Shape& os, const Shape& ost, void* out, DType in, DType out_type, bool accumulate,
                const Tensor* bias = nullptr, float alpha = 1.0f) {
  // A scaled product (FP8's): alpha applied to the f32 sums, then the bias added as a post-op, so that
  // the bias is not scaled.
  const bool scaled = alpha != 1.0f;
  const dnnl::memory::desc a_md = memory_desc(as, ast, in);
  const dnnl::memory::desc w_md = memory_desc(ws, wst, in);
  const dnnl::memory::desc o_md = memory_desc(os, ost, out_type);
  const dnnl::memory::desc b_md = bias ? memory_desc({1, 1, os[2]}, {os[2], os[2], 1}, bias->dtype()) : dnnl::memory::desc();
  PrimitiveKey key("matmul");
  key.add(static_cast<std::int64_t>(in)).add(static_cast<std::int64_t>(out_type)).add(std::int64_t{accumulate});
  key.add(bias ? static_cast<std::int64_t>(bias->dtype()) : -1).add(as).add(ast).add(ws).add(wst).add(os).add(ost);
  key.add(static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(alpha)));
  const dnnl::primitive prim = cached_primitive(key.str(), [&] {
    dnnl::primitive_attr attr;
    dnnl::post_ops ops;
    if (accumulate) ops.append_sum(1.0f);
    if (scaled) {
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, alpha, 0.0f);
      if (bias) ops.append_binary(dnnl::algorithm::binary_add, b_md);
    }
    if (accumulate || scaled) attr.set_post_ops(ops);
    const dnnl::matmul::desc d =
        bias && !scaled ? dnnl::matmul::desc(a_md, w_md, b_md, o_md) : dnnl::matmul::desc(a_md, w_md, o_md);
    return dnnl::matmul(dnnl::matmul::primitive_desc(d, attr, onednn_engine()));
  });
  dnnl::engine& eng = onednn_engine();
  dnnl::memory am(a_md, eng, const_cast<void*>(a));
  dnnl::memory wm(w_md, eng, const_cast<void*>(w));
  dnnl::memory om(o_md, eng, out);
  if (bias && scaled) {
    const int post_op = (accumulate ? 1 : 0) + 1;
    execute_timed(prim, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, om},
                         {DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1, dnnl::memory(b_md, eng, bias->data())}});
  } else if (bias) {
    execute_timed(prim, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, dnnl::memory(b_md, eng, bias->data())},
                         {DNNL_ARG_DST, om}});
  } else {
    execute_timed(prim, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, om}});
  }
}

// Whether an f32 product of m rows with a row-major [k, n] weight gains from reordering the weight into
// [n, k] storage first: for wide weights oneDNN 2.6's row-major kernel was 2-3x slower on this machine
// (n >= 2304, m >= 512: 90-146 against 260-280 GFLOP/s); narrower ones ran at the same speed either
// way, so there the copy only cost.
bool worth_reordering(std::int64_t m, std::int64_t n) { return n >= 2304 && m >= 512; }

// oneDNN 2.6's f32 product on CPUs without AVX-512 (its AVX2 "gemm:jit") runs at half speed where it
// reads an operand along a stride of a multiple of 4 KiB while the other side is narrow (cache-set
// aliasing, by the pattern): a row-major w (stored [K, N], N * 4 bytes a multiple of 4096) with M <= 256,
// 100-107 GFLOP/s against 176-198 with w stored [N, K]; such a w is reordered first, as a wide one is
// (a copy costs about a tenth of such a product). A transposed a, stored [K, M] with M * 4 bytes a
// multiple of 4096, with N <= 256 is as slow, 88-99 against 179-216 row-major: it is copied row-major a
// block of rows at a time into a fixed workspace (a whole copy would be a temporary the size of an
// activation's gradient, where the classifier promises none of [N, V]). Zen 5 capped to AVX2
// (ONEDNN_MAX_CPU_ISA=AVX2), 2 threads, M 128-4096, K 512-4096, N 128-3072; with AVX-512 every layout ran
// within 10% of the others. These are weight-gradient products of GPT layers 1024 wide.
bool avx2_gemm() {
  static const bool without_avx512 = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512_bit = static_cast<unsigned>(dnnl::cpu_isa::avx512_core) & ~static_cast<unsigned>(dnnl::cpu_isa::avx2);
    return (isa & avx512_bit) == 0;
  }();
  return without_avx512;
}
bool aliased(std::int64_t stride_elements) { return stride_elements > 0 && stride_elements * 4 % 4096 == 0; }
// Rows of such an a copied at a time: a 1 MiB workspace with K 2048.
constexpr std::int64_t kAliasedRows = 128;

void weight_view(const Tensor& w, Shape& shape, Shape& strides) {
  shape = w.shape();
  strides = w.strides();
  if (strides[0] == 0) {
    shape[0] = 1;
    strides[0] = shape[1] * shape[2];
  }
}

// The (row, column) strides of the f32 block that block_to_f32 makes of a rows x cols view.
std::pair<std::int64_t, std::int64_t> block_orientation(std::int64_t s_row, std::int64_t s_col, std::int64_t rows,
                                                        std::int64_t cols) {
  const bool column_major = s_row == 1 && s_col != 1;
  return column_major ? std::make_pair(std::int64_t{1}, rows) : std::make_pair(cols, std::int64_t{1});
}

// rows x cols of a 2-D strided view starting at element `off` of t, as f32 in `dst`, keeping the view's
// orientation so that every read runs along contiguous memory: row-major unless the view's columns are
// the contiguous ones (a transposed operand). Returns the block's (row, column) strides.
std::pair<std::int64_t, std::int64_t> block_to_f32(const Tensor& t, std::int64_t off, std::int64_t s_row,
                                                   std::int64_t s_col, std::int64_t rows, std::int64_t cols, float* dst) {
  const bool column_major = s_row == 1 && s_col != 1;
  const std::int64_t lines = column_major ? cols : rows;   // runs of contiguous elements
  const std::int64_t length = column_major ? rows : cols;  // elements per run
  const std::int64_t s_line = column_major ? s_col : s_row;
  const std::int64_t s_elem = column_major ? s_row : s_col;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 15))
  for (std::int64_t l = 0; l < lines; ++l) {
    for (std::int64_t e = 0; e < length; e += kRowBlock) {
      load_f32(t, off + l * s_line + e * s_elem, s_elem, std::min(kRowBlock, length - e), dst + l * length + e);
    }
  }
  return block_orientation(s_row, s_col, rows, cols);
}

// The bias [n] in f32, or nothing.
std::vector<float> bias_as_f32(const Tensor& bias, std::int64_t n) {
  std::vector<float> out(bias.defined() ? static_cast<std::size_t>(n) : 0);
  for (std::int64_t c = 0; c < static_cast<std::int64_t>(out.size()); c += kRowBlock) {
    load_f32(bias, c * bias.strides()[0], bias.strides()[0], std::min(kRowBlock, n - c), out.data() + c);
  }
  return out;
}

// Many small products (attention's heads): a chunk of whole batch entries converted at a time and run
// as one batched f32 matmul, so each call is big enough for oneDNN and the threads.
constexpr std::int64_t kChunkFloats = 1 << 20;

void matmul_via_f32_batched_chunks(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  const std::int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const Shape& sa = a.strides();
  const Shape& sw = w.strides();
  const Shape& so = out.strides();
  const std::int64_t per_entry = m * k + k * n + m * n;
  const std::int64_t chunk = std::clamp<std::int64_t>(kChunkFloats / per_entry, 1, batch);
  std::vector<float> a_blk(static_cast<std::size_t>(chunk * m * k)), w_blk(static_cast<std::size_t>(chunk * k * n)),
      c_blk(static_cast<std::size_t>(chunk * m * n));
  const std::vector<float> bias_f32 = bias_as_f32(bias, n);
  for (std::int64_t b0 = 0; b0 < batch; b0 += chunk) {
    const std::int64_t nb = std::min(chunk, batch - b0);
    // Every entry's block has the same orientation; the entries are converted in parallel (the
    // conversion inside runs on its thread alone).
    const auto as = block_orientation(sa[1], sa[2], m, k);
    const auto ws = block_orientation(sw[1], sw[2], k, n);
#pragma omp parallel for schedule(static) if (nb * per_entry >= (1 << 15))
    for (std::int64_t b = 0; b < nb; ++b) {
      block_to_f32(a, (b0 + b) * sa[0], sa[1], sa[2], m, k, a_blk.data() + b * m * k);
      block_to_f32(w, (b0 + b) * sw[0], sw[1], sw[2], k, n, w_blk.data() + b * k * n);
    }
    run_matmul({nb, m, k}, {m * k, as.first, as.second}, a_blk.data(), {nb, k, n}, {k * n, ws.first, ws.second},
               w_blk.data(), {nb, m, n}, {m * n, n, 1}, c_blk.data(), DType::f32, DType::f32, false);
#pragma omp parallel for schedule(static) if (nb * m * n >= (1 << 15))
    for (std::int64_t r = 0; r < nb * m; ++r) {
      float* row = c_blk.data() + r * n;
      for (std::int64_t c = 0; c < static_cast<std::int64_t>(bias_f32.size()); ++c) row[c] += bias_f32[static_cast<std::size_t>(c)];
      const std::int64_t b = b0 + r / m, i = r % m;
      for (std::int64_t c = 0; c < n; c += kRowBlock) {
        store_f32(out, b * so[0] + i * so[1] + c * so[2], so[2], std::min(kRowBlock, n - c), row + c);
      }
    }
  }
}

// The depth (K) of each converted block: all of K where the weight fits in kMaxWeightFloats, so that
// every oneDNN call is one full product of a row block (splitting K into accumulating calls of 256 ran
// the products at half the f32 speed on AVX2); 256 for larger weights, converted as they are used.
constexpr std::int64_t kMaxWeightFloats = 1 << 24;  // 64 MiB in f32
// Rows of A per block: about this many f32 values of A, and at least 64 rows.
constexpr std::int64_t kBlockFloats = 1 << 21;  // 8 MiB

void matmul_via_f32_blockwise(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  const std::int64_t batch = out.size(0);
  if (batch > 1 && out.size(1) * a.size(2) + a.size(2) * out.size(2) + out.size(1) * out.size(2) <= kChunkFloats / 4) {
    matmul_via_f32_batched_chunks(a, w, bias, out);
    return;
  }
  const std::int64_t m = out.size(1);
  const std::int64_t n = out.size(2);
  const std::int64_t k = a.size(2);
  const Shape& sa = a.strides();
  const Shape& sw = w.strides();
  const Shape& so = out.strides();
  const bool keep_weight = k * n <= kMaxWeightFloats;
  const std::int64_t depth = keep_weight ? k : std::min<std::int64_t>(k, 256);
  const std::int64_t rows = std::clamp<std::int64_t>(kBlockFloats / std::max<std::int64_t>(depth, 1), 64, std::max<std::int64_t>(m, 1));
  // Scratch as tensors, so that memory_stats() counts it (temporary).
  Tensor a_blk = Tensor::empty({std::min(m, rows) * depth}, DType::f32);
  Tensor c_blk = Tensor::empty({std::min(m, rows) * n}, DType::f32);
  const std::vector<float> bias_f32 = bias_as_f32(bias, n);
  // The weight in f32, converted (and reordered where that pays) once per matrix and reused by every row
  // block; a weight over kMaxWeightFloats is converted block by block as it is used.
  struct WeightBlock {
    Tensor data;
    std::int64_t row_stride = 0, col_stride = 0;
  };
  WeightBlock blk;
  const auto convert_weight_block = [&](std::int64_t b, std::int64_t p0) {
    const std::int64_t kb = std::min(depth, k - p0);
    if (!blk.data.defined() || blk.data.numel() < kb * n) blk.data = Tensor::empty({kb * n}, DType::f32);
    auto [wr, wc] = block_to_f32(w, b * sw[0] + p0 * sw[1], sw[1], sw[2], kb, n, blk.data.data_as<float>());
    if (wc == 1 && worth_reordering(std::min(m, rows), n)) {  // row-major: into the layout f32 multiplies fastest
      Tensor reordered = Tensor::empty({kb * n}, DType::f32);
      onednn_reorder({1, kb, n}, {kb * n, n, 1}, blk.data.data(), {kb * n, 1, kb}, reordered.data(), DType::f32);
      blk.data = reordered;
      wr = 1, wc = kb;
    }
    blk.row_stride = wr;
    blk.col_stride = wc;
  };
  for (std::int64_t b = 0; b < batch; ++b) {
    // A weight shared by every batch entry (stride 0) is converted once.
    if (keep_weight && (b == 0 || sw[0] != 0)) convert_weight_block(b, 0);
    for (std::int64_t i0 = 0; i0 < m; i0 += rows) {
      const std::int64_t mb = std::min(rows, m - i0);
      for (std::int64_t p0 = 0; p0 < k; p0 += depth) {
        const std::int64_t kb = std::min(depth, k - p0);
        const auto [ar, ac] = block_to_f32(a, b * sa[0] + i0 * sa[1] + p0 * sa[2], sa[1], sa[2], mb, kb, a_blk.data_as<float>());
        if (!keep_weight) convert_weight_block(b, p0);
        run_matmul({1, mb, kb}, {mb * kb, ar, ac}, a_blk.data(), {1, kb, n}, {kb * n, blk.row_stride, blk.col_stride},
                   blk.data.data(), {1, mb, n}, {mb * n, n, 1}, c_blk.data(), DType::f32, DType::f32, p0 > 0);
      }
      float* c = c_blk.data_as<float>();
#pragma omp parallel for schedule(static) if (mb * n >= (1 << 15))
      for (std::int64_t r = 0; r < mb; ++r) {
        float* row = c + r * n;
        for (std::int64_t col = 0; col < static_cast<std::int64_t>(bias_f32.size()); ++col) row[col] += bias_f32[static_cast<std::size_t>(col)];
        for (std::int64_t col = 0; col < n; col += kRowBlock) {
          store_f32(out, b * so[0] + (i0 + r) * so[1] + col * so[2], so[2], std::min(kRowBlock, n - col), row + col);
        }
      }
    }
  }
}

}  // namespace

void cpu_matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  cpu_scaled_matmul(a, w, 1.0, bias, out);
}

void cpu_scaled_matmul(const Tensor& a_in, const Tensor& w_in, const ProductScale& scale, const Tensor& bias, const Tensor& out) {
  // fp8 operands as bf16 (exact; the CPU has no fp8 product): the bf16 product is the fp8 one.
  const Tensor a = widened_operand(a_in, cpu_copy), w = widened_operand(w_in, cpu_copy);
  const DType t = a.dtype();
  const auto alpha = static_cast<float>(product_scale_on_host(scale));
  if (alpha != 1.0f && !onednn_supports(OnednnPrimitive::matmul, t)) {
    // No oneDNN product for the dtype: the f32 product, then alpha and the bias in f32, rounded once.
    const Tensor p = Tensor::empty(out.shape(), DType::f32, out.device());
    matmul_via_f32_blockwise(a, w, Tensor(), p);
    const std::vector<float> bias_f32 = bias_as_f32(bias, out.size(2));
    const std::int64_t n = out.size(2);
    for (std::int64_t b = 0; b < out.size(0); ++b) {
#pragma omp parallel for schedule(static) if (out.numel() >= (1 << 15))
      for (std::int64_t i = 0; i < out.size(1); ++i) {
        float* row = p.data_as<float>() + (b * out.size(1) + i) * n;
        for (std::int64_t c = 0; c < n; ++c) {
          row[c] = alpha * row[c] + (bias_f32.empty() ? 0.0f : bias_f32[static_cast<std::size_t>(c)]);
        }
        for (std::int64_t c = 0; c < n; c += kRowBlock) {
          store_f32(out, b * out.strides()[0] + i * out.strides()[1] + c * out.strides()[2], out.strides()[2],
                    std::min(kRowBlock, n - c), row + c);
        }
      }
    }
    return;
  }
  if (!onednn_supports(OnednnPrimitive::matmul, t)) {
    matmul_via_f32_blockwise(a, w, bias, out);
    return;
  }
  Shape ws, wst;
  weight_view(w, ws, wst);
  // oneDNN 2.6's f32 matmul runs up to 2-3x faster with wide weights stored [N, K] (column-major K x N)
  // than [K, N]: such a row-major f32 weight of one matrix is first reordered into the fast layout, which
  // costs a fraction of the product's time. (bf16 on AMX gains nothing from it in a training step.)
  Tensor reordered;
  const void* w_data = w.data();
  const std::int64_t m = a.size(1);
  const bool aliased_w = t == DType::f32 && avx2_gemm() && m <= 256 && ws[2] >= 1024 && aliased(wst[1]);
  if (t == DType::f32 && ws[0] == 1 && wst[2] == 1 && wst[1] == ws[2] && (worth_reordering(m, ws[2]) || aliased_w)) {
    reordered = Tensor::empty({ws[2], ws[1]}, t, w.device());
    const Shape column_major{ws[1] * ws[2], 1, ws[1]};
    onednn_reorder(ws, wst, w.data(), column_major, reordered.data(), t);
    wst = column_major;
    w_data = reordered.data();
  }
  Shape ast = a.strides();
  if (ast[0] == 0) ast[0] = a.size(1) * a.size(2);  // a batch of 1 seen through a stride-0 view
  // oneDNN takes an f32 bias, or one in the inputs' dtype.
  Tensor b = bias;
  if (b.defined() && ((b.dtype() != DType::f32 && b.dtype() != t) || !b.is_contiguous())) {
    b = Tensor::empty(bias.shape(), DType::f32, bias.device());
    cpu_copy(bias, b);
  }
  const std::int64_t k = a.size(2), n = out.size(2);
  const bool aliased_a = t == DType::f32 && avx2_gemm() && a.size(0) == 1 && ast[1] == 1 && ast[2] == m &&
                         aliased(m) && n <= 256 && m > kAliasedRows;
  if (!aliased_a) {
    run_matmul(a.shape(), ast, a.data(), ws, wst, w_data, out.shape(), out.strides(), out.data(), t, out.dtype(),
               false, b.defined() ? &b : nullptr, alpha);
    return;
  }
  // A transposed a read along a 4 KiB-aliased stride (avx2_gemm): kAliasedRows of its rows at a time
  // copied row-major into the workspace, each block's product run from there.
  const Tensor work = Tensor::empty({kAliasedRows, k}, DType::f32, a.device());
  const std::size_t out_size = dtype_size(out.dtype());
  for (std::int64_t first = 0; first < m; first += kAliasedRows) {
    const std::int64_t rows = std::min(kAliasedRows, m - first);
    onednn_reorder({1, rows, k}, {ast[0], 1, m}, a.data_as<float>() + first, {rows * k, k, 1}, work.data(), t);
    run_matmul({1, rows, k}, {rows * k, k, 1}, work.data(), ws, wst, w_data, {1, rows, n}, out.strides(),
               static_cast<char*>(out.data()) + first * out.strides()[1] * static_cast<std::int64_t>(out_size), t,
               out.dtype(), false, b.defined() ? &b : nullptr, alpha);
  }
}

namespace {

// Rows of g added into a block's partial sums before the partials join the total.
constexpr std::int64_t kSumRows = 64;

MANTISSA_VECTOR_CLONES void add_into(float* __restrict total, const float* __restrict v, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) total[i] += v[i];
}
// bf16 widened in the loop (rows.h's f32_of), no conversion pass.
MANTISSA_VECTOR_CLONES void add_bf16_into(float* __restrict total, const std::uint16_t* __restrict v, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) total[i] += f32_of(v[i]);
}

// The row sums of a [1, M, K] whose M is contiguous: a = g^T for g [K, M] row-major, the bias gradient's
// column sums of g. Each thread takes a range of g's columns and walks every row of them, adding
// kSumRows rows into partial sums before they join the total (each sum's error grows as (kSumRows + K /
// kSumRows) eps, a blocked sum's), and rounds the totals once into sums. At memory speed: oneDNN's
// product of g^T with a column of ones read g at a third of it (a gpt-small fp32 step: 7 of 245 ms).
void column_sums(const Tensor& a, const Tensor& sums) {
  const std::int64_t m = a.size(1), k = a.size(2), ld = a.strides()[2], s = sums.strides()[0];
#pragma omp parallel if (m * k >= (1 << 15))
  {
    const int threads = omp_get_num_threads(), me = omp_get_thread_num();
    const std::int64_t first = m * me / threads, last = m * (me + 1) / threads;
    alignas(64) float total[kRowBlock], part[kRowBlock], buf[kRowBlock];
    for (std::int64_t c = first; c < last; c += kRowBlock) {
      const std::int64_t n = std::min(kRowBlock, last - c);
      std::fill_n(total, n, 0.0f);
      for (std::int64_t r0 = 0; r0 < k; r0 += kSumRows) {
        std::fill_n(part, n, 0.0f);
        for (std::int64_t r = r0; r < std::min(k, r0 + kSumRows); ++r) {
          if (a.dtype() == DType::bf16) {
            add_bf16_into(part, a.data_as<std::uint16_t>() + r * ld + c, n);
          } else {
            add_into(part, f32_source(a, r * ld + c, 1, n, buf), n);
          }
        }
        add_into(total, part, n);
      }
      store_f32(sums, c * s, s, n, total);
    }
  }
}

}  // namespace

// The product, then the row sums: where a's rows are contiguous columns of g (the bias gradient's case)
// by column_sums, else as a product with a column of ones (oneDNN, f32 accumulation).
void cpu_matmul_row_sums(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums) {
  cpu_matmul(a, w, Tensor(), out);
  const std::int64_t m = a.size(1), k = a.size(2), s = sums.strides()[0];
  if (a.strides()[1] == 1) {
    column_sums(a, sums);
    return;
  }
  const Tensor ones = Tensor::full({1, k, 1}, 1, a.dtype(), a.device());
  cpu_matmul(a, ones, Tensor(), make_view(sums, {1, m, 1}, {m * s, s, 1}, sums.offset()));
}

namespace {

// The fused GELU products go a block of rows at a time, so their f32 products are a block's (1 MiB), not
// a temporary the size of the layer's widest activation held at the top of the step's memory.
constexpr std::int64_t kGeluBlockElements = std::int64_t{1} << 18;

// Rows [first, first + count) of a one-matrix [1, M, X] view.
Tensor row_block(const Tensor& t, std::int64_t first, std::int64_t count) {
  return make_view(t, {1, count, t.size(2)}, t.strides(), t.offset() + first * t.strides()[1]);
}

// f(first, count) over blocks of rows of an [1, M, N] output.
template <class F>
void for_row_blocks(std::int64_t m, std::int64_t n, F&& f) {
  const std::int64_t rows = std::max<std::int64_t>(1, kGeluBlockElements / std::max<std::int64_t>(n, 1));
  for (std::int64_t first = 0; first < m; first += rows) f(first, std::min(rows, m - first));
}

}  // namespace

// The f32 product with its bias (into pre itself where pre is f32), then in one pass over it the GELU
// rounded into out and the sum rounded into pre.
void cpu_matmul_gelu(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& pre, const Tensor& out) {
  if (pre.dtype() == DType::f32) {
    cpu_matmul(a, w, bias, pre);
    cpu_unary(UnaryOp::gelu_tanh, 0, pre, out);
    return;
  }
  for_row_blocks(pre.size(1), pre.size(2), [&](std::int64_t first, std::int64_t count) {
    const Tensor sum = Tensor::empty({1, count, pre.size(2)}, DType::f32, pre.device());
    cpu_matmul(row_block(a, first, count), w, bias, sum);
    cpu_unary_keeping_input(UnaryOp::gelu_tanh, 0, sum, row_block(out, first, count), row_block(pre, first, count));
  });
}

// The f32 product, then times the GELU's gradient at pre, rounded once into out.
void cpu_matmul_gelu_backward(const Tensor& a, const Tensor& w, const Tensor& pre, const Tensor& out) {
  for_row_blocks(out.size(1), out.size(2), [&](std::int64_t first, std::int64_t count) {
    const Tensor product = Tensor::empty({1, count, out.size(2)}, DType::f32, out.device());
    cpu_matmul(row_block(a, first, count), w, Tensor(), product);
    cpu_unary_backward(UnaryOp::gelu_tanh, 0, row_block(pre, first, count), product, row_block(out, first, count));
  });
}

// The f32 product, then added to out in f32 and rounded once: the contract's order exactly (oneDNN's sum
// post-op would save the temporary but start the sum from out's old value). The CPU runs blocked
// products, the only users, where a caller asks for blocks.
void cpu_matmul_accumulate(const Tensor& a, const Tensor& w, const Tensor& out) {
  const Tensor p = Tensor::empty(out.shape(), DType::f32, out.device());
  cpu_matmul(a, w, Tensor(), p);
  cpu_binary(BinaryOp::add, out, p, out);
}

}  // namespace mantissa::detail
