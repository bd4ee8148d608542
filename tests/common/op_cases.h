// One table of op cases shared by the gradient checks (f64, reference backend), the parity tests (cpu
// backend against the reference, in every compute dtype) and the special-value tests (NaN and infinities
// through both). Adding an op means adding a case here.
// Each case says how far its output may differ between backends: how many elements each output sums
// (`reduction`), how many times the forward rounds into the dtype (`roundings`), and what bounds the
// rounding errors of a sum (`bound`).
#pragma once

#include <cmath>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "mantissa/ops/ops.h"

namespace mantissa::testing {

enum class Layout { contiguous, transposed, strided };

struct InputSpec {
  Shape shape;
  Layout layout = Layout::contiguous;
  double low = -2, high = 2;  // values uniform in [low, high)
};

// What bounds an output element's accumulated rounding error: its own magnitude (one rounding per
// element), the same op applied to the inputs' absolute values (sums and products of sums), or the
// largest output magnitude (composite losses).
enum class Bound { pointwise, abs_inputs, normwise };

struct Case {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  std::int64_t reduction = 1;
  int roundings = 1;
  Bound bound = Bound::pointwise;
  // The special-value test (tests/parity/special_values_test.cpp): the cpu backend may turn outputs whose
  // window holds a NaN or an infinity into NaN where the reference has a number (oneDNN's blocked bf16
  // convolution multiplies its zero padding by the window's inputs: 0 * inf).
  bool nan_spreads_in_windows = false;
  // The same test: the cpu backend may give NaN where the reference has an infinity (never where it has
  // a number). oneDNN's AVX-512 bf16 products, on the blocked attention's strided batches with an odd
  // number of query rows, give NaN for sums the reference finds infinite, as if a padding zero met an
  // infinity; capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2) they agree.
  bool infinity_may_be_nan = false;
};

inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// The special-value tests' comparison: NaN where `want` has NaN, the same infinity where it has one, a
// number where it has a number (how close the numbers are is the parity tests' business).
inline bool same_class(double want, double got) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return want == got;
  return true;
}

// A leaf with `spec`'s shape whose memory layout is as asked: transposed views swap the last two
// dimensions of a contiguous tensor; strided views take every other element of the first dimension.
inline Tensor make_input(const InputSpec& spec, std::uint64_t seed, DType dtype = DType::f64) {
  Tensor t;
  if (spec.layout == Layout::transposed && spec.shape.size() >= 2) {
    Shape s = spec.shape;
    std::swap(s[s.size() - 1], s[s.size() - 2]);
    t = transpose(Tensor::uniform(s, dtype, seed, spec.low, spec.high), -1, -2);
  } else if (spec.layout == Layout::strided && !spec.shape.empty()) {
    Shape s = spec.shape;
    s[0] = 2 * s[0];
    t = slice(Tensor::uniform(s, dtype, seed, spec.low, spec.high), 0, 0, s[0], 2);
  } else {
    t = Tensor::uniform(spec.shape, dtype, seed, spec.low, spec.high);
  }
  t.set_requires_grad();
  return t;
}

inline std::vector<Case> op_cases() {
  using V = const std::vector<Tensor>&;
  const Layout C = Layout::contiguous;
  const Layout T = Layout::transposed;
  const Layout S = Layout::strided;
  const Bound A = Bound::abs_inputs;
  const Bound N = Bound::normwise;
  std::vector<Case> c;
  c.push_back({"add_broadcast", {{{3, 4}}, {{4}}}, [](V x) { return add(x[0], x[1]); }});
  c.push_back({"sub_broadcast_both", {{{3, 1}}, {{1, 5}}}, [](V x) { return sub(x[0], x[1]); }});
  c.push_back({"mul_transposed", {{{4, 3}, T}, {{4, 3}, S}}, [](V x) { return mul(x[0], x[1]); }});
  c.push_back({"div", {{{2, 3, 4}}, {{3, 1}, C, 0.5, 2}}, [](V x) { return div(x[0], x[1]); }});
  c.push_back({"scalar_ops", {{{5, 2}, S}}, [](V x) { return add(mul(x[0], -1.5), 0.25); }, 1, 2});
  c.push_back({"pow", {{{6}, C, 0.5, 2}}, [](V x) { return pow(x[0], 2.5); }});
  c.push_back({"neg", {{{3, 3}, T}}, [](V x) { return neg(x[0]); }});
  c.push_back({"abs", {{{3, 3}, S}}, [](V x) { return abs(x[0]); }});
  c.push_back({"exp", {{{4, 2}}}, [](V x) { return exp(x[0]); }});
  c.push_back({"log", {{{4, 2}, S, 0.2, 3}}, [](V x) { return log(x[0]); }});
  c.push_back({"sqrt", {{{7}, C, 0.2, 3}}, [](V x) { return sqrt(x[0]); }});
  c.push_back({"relu", {{{5, 4}, T}}, [](V x) { return relu(x[0]); }});
  c.push_back({"gelu", {{{5, 4}}}, [](V x) { return gelu(x[0]); }});
  c.push_back({"gelu_tanh", {{{5, 4}}}, [](V x) { return gelu_tanh(x[0]); }});
  c.push_back({"silu", {{{5, 4}, S}}, [](V x) { return silu(x[0]); }});
  c.push_back({"tanh", {{{6, 3}}}, [](V x) { return tanh(x[0]); }});
  c.push_back({"sigmoid", {{{6, 3}, T}}, [](V x) { return sigmoid(x[0]); }});
  c.push_back({"sum_all", {{{3, 4}, T}}, [](V x) { return sum(x[0]); }, 12, 1, A});
  c.push_back({"sum_axes", {{{2, 3, 4}}}, [](V x) { return sum(x[0], {0, 2}); }, 8, 1, A});
  c.push_back({"mean_keepdim", {{{3, 5}, S}}, [](V x) { return mean(x[0], {1}, true); }, 5, 1, A});
  c.push_back({"amax", {{{4, 6}}}, [](V x) { return amax(x[0], {-1}); }});
  c.push_back({"variance", {{{3, 7}, T}}, [](V x) { return variance(x[0], {1}, false, 1); }, 14, 2, N});
  c.push_back({"reshape", {{{3, 4}, T}}, [](V x) { return mul(reshape(x[0], {2, -1}), reshape(x[0], {2, 6})); }});
  c.push_back({"permute", {{{2, 3, 4}}}, [](V x) { return permute(x[0], {2, 0, 1}); }});
  // Layout-changing copies (oneDNN's reorder on the CPU): a transposed view made contiguous, a 3-D permute.
  c.push_back({"contiguous_transposed", {{{33, 40}, T}}, [](V x) { return contiguous(x[0]); }});
  c.push_back({"contiguous_permuted", {{{3, 17, 20}}}, [](V x) { return contiguous(permute(x[0], {2, 0, 1})); }});
  c.push_back({"slice", {{{6, 5}}}, [](V x) { return slice(x[0], 1, 1, -1, 2); }});
  c.push_back({"expand", {{{3, 1}}}, [](V x) { return expand(x[0], {2, 3, 4}); }});
  c.push_back({"concat", {{{2, 3}}, {{4, 3}, S}}, [](V x) {
                 const Tensor parts[] = {x[0], x[1]};
                 return concat(parts, 0);
               }});
  c.push_back({"matmul", {{{3, 5}}, {{5, 4}}}, [](V x) { return matmul(x[0], x[1]); }, 5, 1, A});
  c.push_back({"matmul_transposed", {{{3, 5}, T}, {{5, 4}, T}}, [](V x) { return matmul(x[0], x[1]); }, 5, 1, A});
  c.push_back({"matmul_batched", {{{2, 3, 4}}, {{2, 4, 5}, T}}, [](V x) { return matmul(x[0], x[1]); }, 4, 1, A});
  c.push_back({"matmul_shared_right", {{{2, 3, 4}}, {{4, 2}}}, [](V x) { return matmul(x[0], x[1]); }, 6, 1, A});
  c.push_back({"linear", {{{4, 3}}, {{5, 3}}, {{5}}}, [](V x) { return linear(x[0], x[1], x[2]); }, 4, 2, A});
  // Views that start one element into their storage: a GPU's product must not assume aligned matrices.
  c.push_back({"matmul_offset_views", {{{3, 9}}, {{9, 6}}},
               [](V x) { return matmul(slice(x[0], 1, 1, 8), slice(x[1], 0, 1, 8)); }, 7, 1, A});
  c.push_back({"linear_offset_bias", {{{4, 3}}, {{5, 3}}, {{6}}},
               [](V x) { return linear(x[0], x[1], slice(x[2], 0, 1, 6)); }, 4, 2, A});
  // GPT-2's MLP as one op: the GELU from the first product's sum before its rounding, its gradient
  // applied to the second product's input gradient before that one's.
  c.push_back({"gelu_mlp", {{{2, 3, 4}}, {{6, 4}}, {{6}}, {{5, 6}, T}, {{5}}},
               [](V x) { return gelu_mlp(x[0], x[1], x[2], x[3], x[4]); }, 11, 3, N});
  c.push_back({"softmax", {{{3, 6}}}, [](V x) { return softmax(x[0]); }, 6});
  c.push_back({"softmax_axis0", {{{4, 3}, T}}, [](V x) { return softmax(x[0], 0); }, 4});
  c.push_back({"log_softmax", {{{3, 5}, S}}, [](V x) { return log_softmax(x[0]); }, 5, 1, N});
  c.push_back({"cross_entropy", {{{4, 5}}}, [](V x) {
                 const std::int64_t t[] = {1, 0, 4, 2};
                 return cross_entropy(x[0], t);
               }, 20, 1, N});
  c.push_back({"cross_entropy_smooth_ignore_sum", {{{4, 5}, T}}, [](V x) {
                 const std::int64_t t[] = {3, -100, 4, 0};
                 return cross_entropy(x[0], t, Reduction::sum, -100, 0.1);
               }, 20, 1, N});
  // Logits spread over +-120: most rows' target probabilities underflow f32, so the loss must come
  // from another class (lse = x_m - log p_m).
  c.push_back({"cross_entropy_confident", {{{8, 6}}}, [](V x) {
                 const std::int64_t t[] = {0, 1, 2, 3, 4, 5, 0, 1};
                 return cross_entropy(mul(x[0], 60.0), t);
               }, 48, 2, N});
  // The classifier fused with the loss, in blocks of 3 rows (the last one shorter), a row ignored.
  c.push_back({"linear_cross_entropy_blocked", {{{7, 4}}, {{6, 4}, T}}, [](V x) {
                 const std::int64_t t[] = {1, 0, 5, -100, 2, 3, 4};
                 return linear_cross_entropy(x[0], x[1], t, Reduction::mean, -100, 0.1, 3);
               }, 24, 2, N});
  // The same with the logits' gradient made in forward and kept.
  c.push_back({"linear_cross_entropy_kept", {{{7, 4}}, {{6, 4}, T}}, [](V x) {
                 const std::int64_t t[] = {1, 0, 5, -100, 2, 3, 4};
                 return linear_cross_entropy(x[0], x[1], t, Reduction::mean, -100, 0.1, 0, ClassifierGradient::kept);
               }, 24, 2, N});
  c.push_back({"mse", {{{3, 4}}, {{3, 4}, T}}, [](V x) { return mse_loss(x[0], x[1]); }, 12, 1, N});
  c.push_back({"layer_norm", {{{2, 3, 6}}, {{6}}, {{6}}}, [](V x) { return layer_norm(x[0], x[1], x[2]); }, 12, 2, N});
  // The residual sum and its norm in one pass, both outputs used (each gets its own gradient).
  c.push_back({"add_layer_norm", {{{2, 3, 6}}, {{2, 3, 6}, T}, {{6}}, {{6}}}, [](V x) {
                 const auto [sum, norm] = add_layer_norm(x[0], x[1], x[2], x[3], 1e-5, x[0].dtype());
                 return add(sum, norm);
               }, 12, 3, N});
  c.push_back({"layer_norm_strided", {{{4, 5}, S}, {{5}}, {{5}}}, [](V x) { return layer_norm(x[0], x[1], x[2]); },
               10, 2, N});
  c.push_back({"embedding", {{{5, 3}}}, [](V x) {
                 const std::int64_t ids[] = {4, 0, 4, 2, 1, 4};
                 return embedding(x[0], ids, {2, 3});
               }, 3});
  c.push_back({"dropout", {{{4, 6}, T}}, [](V x) { return dropout(x[0], 0.3, 1234); }, 1, 2});
  c.push_back({"attention_causal", {{{2, 4, 3}}, {{2, 4, 3}, T}, {{2, 4, 2}}},
               [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, 8, 3, N});
  // Long enough rows for the vector loops and several threads; causal with fewer queries than keys.
  c.push_back({"attention_causal_long", {{{1, 2, 33, 4}}, {{1, 2, 33, 4}}, {{1, 2, 33, 3}, T}},
               [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, 33, 3, N});
  c.push_back({"attention_causal_fewer_queries", {{{2, 3, 4}}, {{2, 6, 4}}, {{2, 6, 3}}},
               [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }, 8, 3, N});
  c.push_back({"self_attention", {{{2, 5, 3 * 6}}}, [](V x) { return self_attention(x[0], 2); }, 5, 3, N});
  c.push_back({"self_attention_long", {{{2, 33, 3 * 8}, Layout::strided}}, [](V x) { return self_attention(x[0], 2); },
               33, 3, N});
  // In blocks of query rows (the last one shorter), each against the keys it sees.
  c.push_back({"self_attention_blocked", {{{2, 33, 3 * 8}, Layout::strided}},
               [](V x) { return self_attention(x[0], 2, true, 8); }, 33, 3, N});
  c.back().infinity_may_be_nan = true;
  c.push_back({"self_attention_blocked_full", {{{2, 17, 3 * 6}}}, [](V x) { return self_attention(x[0], 2, false, 5); },
               17, 3, N});
  c.push_back({"attention_cross", {{{1, 2, 3, 4}}, {{1, 2, 5, 4}}, {{1, 2, 5, 3}}},
               [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], false); }, 10, 3, N});
  // LSTM cell: gates from two strided or transposed products; h and c both reach the output. The long
  // case has rows long enough for the vector loops and several threads; the two-step case sends the
  // first step's c (and h, through the second step's gates) into the second.
  c.push_back({"lstm_cell", {{{3, 4 * 5}}, {{3, 4 * 5}, S}, {{3, 5}}},
               [](V x) { return lstm_cell(x[0], x[1], x[2]); }, 2, 2, N});
  c.push_back({"lstm_cell_long", {{{12, 4 * 33}, T}, {{12, 4 * 33}}, {{12, 33}, S}},
               [](V x) { return lstm_cell(x[0], x[1], x[2]); }, 2, 2, N});
  c.push_back({"lstm_cell_two_steps", {{{2, 4 * 3}}, {{2, 4 * 3}}, {{2, 3}}, {{3, 4 * 3}}}, [](V x) {
                 const Tensor first = lstm_cell(x[0], x[1], x[2]);
                 const Tensor h = reshape(slice(first, 0, 0, 1), {2, 3});
                 const Tensor c1 = reshape(slice(first, 0, 1, 2), {2, 3});
                 return lstm_cell(x[0], matmul(h, x[3]), c1);
               }, 6, 4, N});
  c.push_back({"conv2d", {{{2, 3, 6, 5}}, {{4, 3, 3, 3}}, {{4}}},
               [](V x) { return conv2d(x[0], x[1], x[2], {1, 1, 1, 1, 1, 1, 1}); }, 27, 2, A});
  c.back().nan_spreads_in_windows = true;
  c.push_back({"conv2d_strided_dilated_grouped", {{{1, 4, 7, 7}}, {{6, 2, 2, 3}}},
               [](V x) { return conv2d(x[0], x[1], {}, {2, 1, 1, 0, 2, 1, 2}); }, 12, 1, A});
  c.back().nan_spreads_in_windows = true;
  c.push_back({"max_pool2d", {{{2, 2, 5, 6}}}, [](V x) { return max_pool2d(x[0], 2, 2); }});
  c.push_back({"max_pool2d_padded_overlapping", {{{1, 3, 5, 5}}}, [](V x) { return max_pool2d(x[0], 3, 2, 1); }});
  c.push_back({"avg_pool2d", {{{2, 2, 6, 4}}}, [](V x) { return avg_pool2d(x[0], 2, 2); }, 4, 1, A});
  c.push_back({"batch_norm_train", {{{4, 3, 2, 2}}, {{3}}, {{3}}}, [](V x) {
                 const Tensor rm = Tensor::zeros({3}, DType::f32, x[0].device());
                 const Tensor rv = Tensor::full({3}, 1.0, DType::f32, x[0].device());
                 return batch_norm(x[0], x[1], x[2], rm, rv, true);
               }, 16, 2, N});
  c.push_back({"batch_norm_eval", {{{3, 2, 3}}, {{2}}, {{2}}}, [](V x) {
                 const Tensor rm = Tensor::from_values({0.5, -0.25}, {2}, DType::f32).to(x[0].device());
                 const Tensor rv = Tensor::from_values({2.0, 0.5}, {2}, DType::f32).to(x[0].device());
                 return batch_norm(x[0], x[1], x[2], rm, rv, false);
               }, 1, 3, N});
  return c;
}

}  // namespace mantissa::testing
