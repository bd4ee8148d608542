// The GPU's product layouts, checked without a GPU (src/backend/cuda/gemm_layout.h): plan_gemm turns
// strided views into cuBLASLt's transpose flags, leading dimensions and batch strides. A column-major
// product that reads raw memory as cuBLASLt would (the emulator below) must give the strided
// definition, on random layouts; and every product the ops issue while models train (spies in place of
// the CPU's product kernels) must be expressible with no copy, a shared weight folded into one product.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../src/backend/cuda/gemm_layout.h"
#include "../../src/backend/registry.h"
#include "../../src/core/element_io.h"
#include "mantissa/nn/models.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/ops/ops.h"
#include "test_support.h"

namespace mantissa {
namespace {

using detail::cuda::GemmLayout;
using detail::cuda::GemmOperand;
using detail::cuda::plan_gemm;
namespace kernel = detail::kernel;

double at(const Tensor& t, std::int64_t element) { return detail::load_element(t.dtype(), t.data(), element); }

// out[b][m][n] = sum_k a[b][m][k] w[b][k][n], by the views' strides, in f64.
double defined(const Tensor& a, const Tensor& w, std::int64_t b, std::int64_t m, std::int64_t n) {
  double s = 0;
  for (std::int64_t k = 0; k < a.size(2); ++k) {
    s += at(a, b * a.strides()[0] + m * a.strides()[1] + k * a.strides()[2]) *
         at(w, b * w.strides()[0] + k * w.strides()[1] + n * w.strides()[2]);
  }
  return s;
}

// Element (r, c) of op(X) for a stored column-major operand.
double op_element(const Tensor& t, const GemmOperand& o, std::int64_t batch, std::int64_t r, std::int64_t c) {
  const std::int64_t row = o.transposed ? c : r, col = o.transposed ? r : c;
  return at(t, batch * o.batch_stride + row + col * o.ld);
}

// What cuBLASLt computes from the layout alone: D (N x M) = op(A) . op(B) over raw memory, written at
// D's offsets. Returns, for each element offset of out's storage from out.data(), the value written
// (NaN where none was) and fails the test where an element is written twice.
std::vector<double> emulate(const GemmLayout& g, const Tensor& a, const Tensor& w, const Tensor& out) {
  std::int64_t span = 0;
  for (std::int64_t d = 0; d < 3; ++d) span += (out.size(d) - 1) * out.strides()[static_cast<std::size_t>(d)];
  std::vector<double> written(static_cast<std::size_t>(span + 1), std::numeric_limits<double>::quiet_NaN());
  for (std::int64_t b = 0; b < g.batch; ++b) {
    for (std::int64_t j = 0; j < g.m; ++j) {
      for (std::int64_t i = 0; i < g.n; ++i) {
        double s = 0;
        for (std::int64_t l = 0; l < g.k; ++l) s += op_element(w, g.w, b, i, l) * op_element(a, g.a, b, l, j);
        const std::int64_t at_d = b * g.d.batch_stride + i + j * g.d.ld;
        EXPECT_TRUE(at_d >= 0 && at_d <= span) << "D element outside the output";
        if (at_d < 0 || at_d > span) continue;
        EXPECT_TRUE(std::isnan(written[static_cast<std::size_t>(at_d)])) << "D element written twice";
        written[static_cast<std::size_t>(at_d)] = s;
      }
    }
  }
  return written;
}

// The layout's product equals the definition at every output element, summed in the same order.
void expect_layout_computes_product(const GemmLayout& g, const Tensor& a, const Tensor& w, const Tensor& out) {
  ASSERT_FALSE(g.copies());
  const std::vector<double> got = emulate(g, a, w, out);
  for (std::int64_t b = 0; b < out.size(0); ++b) {
    for (std::int64_t m = 0; m < out.size(1); ++m) {
      for (std::int64_t n = 0; n < out.size(2); ++n) {
        const std::int64_t off = b * out.strides()[0] + m * out.strides()[1] + n * out.strides()[2];
        ASSERT_EQ(got[static_cast<std::size_t>(off)], defined(a, w, b, m, n)) << "at [" << b << ", " << m << ", " << n << "]";
      }
    }
  }
}

// A [B, R, C] view of fresh random values laid out as `kind` says: 0 contiguous, 1 transposed (C
// outermost in memory), 2 rows padded (row stride past C), 3 transposed and padded, 4 shared by every
// batch (stride 0), 5 both inner strides past 1 (every other element: no layout reads it).
Tensor laid_out(std::int64_t batch, std::int64_t rows, std::int64_t cols, int kind, std::uint64_t seed) {
  const std::int64_t pad = kind == 2 || kind == 3 ? 3 : 0;
  const std::int64_t inner = kind == 5 ? 2 : 1;
  const std::int64_t stored_batch = kind == 4 ? 1 : batch;
  const bool transposed = kind == 1 || kind == 3;
  const std::int64_t lead = transposed ? rows : cols;  // the contiguous dimension's length
  const std::int64_t other = transposed ? cols : rows;
  const std::int64_t ld = lead * inner + pad;
  const Tensor storage = Tensor::randn({stored_batch * other * ld + 8}, DType::f32, seed);
  const std::int64_t bs = kind == 4 ? 0 : other * ld;
  const Shape strides = transposed ? Shape{bs, inner, ld} : Shape{bs, ld, inner};
  return make_view(storage, {batch, rows, cols}, strides, 5);
}

TEST(GemmLayout, EveryExpressibleLayoutComputesTheProductAndTheRestAreCopied) {
  MANTISSA_TRACE_SEED();
  std::mt19937_64 rng(testing::test_seed());
  int planned = 0, flattened = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::uniform_int_distribution<std::int64_t> size(1, 6);
    const std::int64_t batch = size(rng) % 3 + 1, m = size(rng), k = size(rng), n = size(rng);
    const int ka = static_cast<int>(rng() % 6), kw = static_cast<int>(rng() % 6);
    const Tensor a = laid_out(batch, m, k, ka == 4 ? 0 : ka, rng());  // a shared input is not a pattern of the ops
    const Tensor w = laid_out(batch, k, n, kw, rng());
    const Tensor out = laid_out(batch, m, n, static_cast<int>(rng() % 3) == 2 ? 2 : 0, rng());
    SCOPED_TRACE("a kind " + std::to_string(ka) + " w kind " + std::to_string(kw) + " [" + std::to_string(batch) + ", " +
                 std::to_string(m) + ", " + std::to_string(k) + "] x [" + std::to_string(k) + ", " + std::to_string(n) + "]");
    const GemmLayout g = plan_gemm(a, w, out);
    // Every other element in both inner dimensions has no layout unless a dimension is 1.
    EXPECT_EQ(g.copy_a, ka == 5 && m > 1 && k > 1);
    EXPECT_EQ(g.copy_w, kw == 5 && k > 1 && n > 1);
    EXPECT_FALSE(g.copy_out);
    // A weight shared by every batch under rows laid out one after another (a linear layer's input):
    // one product.
    if (kw == 4 && batch > 1 && (ka == 0 || ka == 2)) {
      EXPECT_TRUE(g.flattened);
      EXPECT_EQ(g.batch, 1);
      EXPECT_EQ(g.m, batch * m);
    }
    if (g.copies()) continue;
    expect_layout_computes_product(g, a, w, out);
    ++planned;
    flattened += g.flattened ? 1 : 0;
  }
  EXPECT_GT(planned, 200);
  EXPECT_GT(flattened, 10);
}

TEST(GemmLayout, AnOutputReadTransposedOrOverlappingOrAnOperandOfOneRepeatedValueIsCopied) {
  const Tensor a = laid_out(1, 4, 3, 0, 1), w = laid_out(1, 3, 5, 0, 2);
  EXPECT_TRUE(plan_gemm(a, w, laid_out(1, 4, 5, 1, 3)).copy_out);  // out^T is not a column-major D
  const Tensor a2 = laid_out(2, 4, 3, 0, 1), w2 = laid_out(2, 3, 5, 0, 2);
  const Tensor shared_out = laid_out(2, 4, 5, 4, 3);  // both batches written to one matrix
  EXPECT_TRUE(plan_gemm(a2, w2, shared_out).copy_out);
  // sum()'s gradient, one value broadcast over a matrix (every stride 0), has no leading dimension.
  const Tensor one = Tensor::randn({1}, DType::f32, 4);
  EXPECT_TRUE(plan_gemm(make_view(one, {2, 4, 3}, {0, 0, 0}, 0), w2, laid_out(2, 4, 5, 0, 5)).copy_a);
}

// ---- Every layout the ops produce: spies record each product the CPU's kernels are asked for.

struct Seen {
  std::string kernel, views;
  GemmLayout layout;
  bool shared_weight;  // w's batch stride 0 with more than one batch
};
std::vector<Seen> g_products;

template <class K>
typename K::Fn*& cpu_slot() {
  return detail::KernelTable<K>::fn[static_cast<std::size_t>(detail::Impl::cpu)];
}
kernel::Matmul::Fn* g_matmul = nullptr;
kernel::MatmulRowSums::Fn* g_row_sums = nullptr;
kernel::MatmulAccumulate::Fn* g_accumulate = nullptr;
kernel::ScaledMatmul::Fn* g_scaled = nullptr;

void record(const char* name, const Tensor& a, const Tensor& w, const Tensor& out) {
  const GemmLayout g = plan_gemm(a, w, out);
  const auto view = [](const Tensor& t) { return shape_str(t.shape()) + " strides " + shape_str(t.strides()); };
  g_products.push_back({name, view(a) + " . " + view(w) + " -> " + view(out), g, out.size(0) > 1 && w.strides()[0] == 0});
  if (!g.copies()) {
    SCOPED_TRACE(name);
    expect_layout_computes_product(g, a, w, out);
  }
}
void spy_matmul(const Tensor& a, const Tensor& w, const Tensor& bias, const Tensor& out) {
  record("matmul", a, w, out);
  g_matmul(a, w, bias, out);
}
void spy_row_sums(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& sums) {
  record("matmul_row_sums", a, w, out);
  g_row_sums(a, w, out, sums);
}
void spy_accumulate(const Tensor& a, const Tensor& w, const Tensor& out) {
  record("matmul_accumulate", a, w, out);
  g_accumulate(a, w, out);
}
void spy_scaled(const Tensor& a, const Tensor& w, const detail::ProductScale& scale, const Tensor& bias, const Tensor& out) {
  record("scaled_matmul", a, w, out);
  g_scaled(a, w, scale, bias, out);
}

class ProductSpies {
 public:
  ProductSpies() {
    detail::impl_for(Device::cpu());  // registers the kernels
    g_matmul = std::exchange(cpu_slot<kernel::Matmul>(), spy_matmul);
    g_row_sums = std::exchange(cpu_slot<kernel::MatmulRowSums>(), spy_row_sums);
    g_accumulate = std::exchange(cpu_slot<kernel::MatmulAccumulate>(), spy_accumulate);
    g_scaled = std::exchange(cpu_slot<kernel::ScaledMatmul>(), spy_scaled);
    g_products.clear();
  }
  ~ProductSpies() {
    cpu_slot<kernel::Matmul>() = g_matmul;
    cpu_slot<kernel::MatmulRowSums>() = g_row_sums;
    cpu_slot<kernel::MatmulAccumulate>() = g_accumulate;
    cpu_slot<kernel::ScaledMatmul>() = g_scaled;
  }
  ProductSpies(const ProductSpies&) = delete;
  ProductSpies& operator=(const ProductSpies&) = delete;
};

std::vector<std::int64_t> tokens(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> t(n);
  for (auto& v : t) v = static_cast<std::int64_t>(rng() % 256);
  return t;
}

// Backward from a gradient of fresh random values, as a loss's would be (sum()'s, one value broadcast
// with every stride 0, is an operand no layout reads: the test above).
void backward_from_random(const Tensor& y) { y.backward(Tensor::randn(y.shape(), y.dtype(), 12)); }

void expect_no_copies(const char* what) {
  ASSERT_FALSE(g_products.empty()) << what << ": no product seen";
  for (std::size_t i = 0; i < g_products.size(); ++i) {
    const Seen& s = g_products[i];
    EXPECT_FALSE(s.layout.copy_a) << what << ": product " << i << " (" << s.kernel << ") copies a: " << s.views;
    EXPECT_FALSE(s.layout.copy_w) << what << ": product " << i << " (" << s.kernel << ") copies w: " << s.views;
    EXPECT_FALSE(s.layout.copy_out) << what << ": product " << i << " (" << s.kernel << ") copies out: " << s.views;
    EXPECT_TRUE(!s.shared_weight || s.layout.flattened)
        << what << ": product " << i << " (" << s.kernel << ") is a batch of products over one weight: " << s.views;
  }
  g_products.clear();
}

TEST(GemmLayout, EveryProductOfAGptStepNeedsNoCopy) {
  const ProductSpies spies;
  for (const std::int64_t query_block : {std::int64_t{0}, std::int64_t{4}}) {
    const nn::Gpt gpt({.n_layer = 1, .n_head = 2, .n_embd = 16, .block_size = 8, .vocab = 256, .seed = 3});
    const std::vector<std::int64_t> ids = tokens(16, 1), next = tokens(16, 2);
    {
      Autocast bf16(DType::bf16);
      gpt.loss(ids, 2, 8, next).backward();
    }
    expect_no_copies("gpt");
    // The forms a GPU takes: attention in query blocks, the classifier in row blocks or its gradient kept.
    const Tensor x = Tensor::randn({2, 8, 48}, DType::f32, 4).set_requires_grad();
    backward_from_random(self_attention(x, 2, true, query_block == 0 ? 8 : query_block));
    expect_no_copies("self_attention");
    const Tensor h = Tensor::randn({16, 16}, DType::f32, 5).set_requires_grad();
    const Tensor head = Tensor::randn({256, 16}, DType::f32, 6).set_requires_grad();
    linear_cross_entropy(h, head, next, Reduction::mean, -100, 0.0, query_block == 0 ? 16 : 5).backward();
    expect_no_copies("linear_cross_entropy");
    linear_cross_entropy(h, head, next, Reduction::mean, -100, 0.0, 0, ClassifierGradient::kept).backward();
    expect_no_copies("linear_cross_entropy, the gradient kept");
  }
}

TEST(GemmLayout, EveryProductOfAnLstmAndOfBatchedMatmulsNeedsNoCopy) {
  const ProductSpies spies;
  const nn::LstmLm lstm({.vocab = 256, .embd = 8, .hidden = 16, .layers = 2, .seed = 1});
  nn::LstmLm::State state;
  const std::vector<std::int64_t> ids = tokens(12, 3), next = tokens(12, 4);
  cross_entropy(lstm.forward(ids, 2, 6, state), next).backward();
  expect_no_copies("lstm");
  // matmul's own rule: a 4-D product and its transposed backward operands, and a 3-D input against a
  // 2-D weight (the shared-weight batch).
  const Tensor q = Tensor::randn({2, 3, 5, 4}, DType::f32, 7).set_requires_grad();
  const Tensor k = Tensor::randn({2, 3, 6, 4}, DType::f32, 8).set_requires_grad();
  backward_from_random(matmul(q, transpose(k, -1, -2)));
  const Tensor x = Tensor::randn({3, 5, 4}, DType::f32, 9).set_requires_grad();
  const Tensor w = Tensor::randn({4, 7}, DType::f32, 10).set_requires_grad();
  backward_from_random(matmul(x, w));
  backward_from_random(linear(x, transpose(w, 0, 1), Tensor::randn({7}, DType::f32, 11).set_requires_grad()));
  expect_no_copies("matmul");
}

TEST(GemmLayout, EveryProductOfAnFp8LinearNeedsNoCopy) {
  const ProductSpies spies;
  for (const QuantRecipe recipe : {QuantRecipe::delayed, QuantRecipe::current, QuantRecipe::block}) {
    QuantOptions o;
    o.recipe = recipe;
    const auto state = std::make_shared<QuantState>(o);
    const Tensor w = Tensor::randn({48, 64}, DType::f32, 2, 0, 0.05).set_requires_grad();
    const Tensor x = Tensor::randn({2, 16, 64}, DType::f32, 3).set_requires_grad();
    Tensor y;
    {
      Autocast bf16(DType::bf16);
      y = fp8_linear(x, w, Tensor(), state);
    }
    y.backward(Tensor::randn({2, 16, 48}, DType::bf16, 9, 0, 1e-3));
    expect_no_copies(recipe.name().data());
  }
}

}  // namespace
}  // namespace mantissa
