// The losses: cross-entropy (softmax and loss fused, with ignore index and label smoothing) and mean
// squared error, computed in f32 whatever the dtype of the logits; and cross-entropy fused with the
// classifier's product (ClassifierGradient): either the logits' gradient made in the forward pass, in
// place of the logits, and kept (llm.c's fused classifier: backward is the two products), or the logits
// made in blocks of rows and dropped, so that the [N, V] logits of a large vocabulary never exist whole,
// backward recomputing each block, turning it into its gradient in place and adding the block's term of
// dw inside the product. No probabilities are stored either way.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

// Keeps the logits (in their dtype: half the f32 probabilities' size in bf16); backward recomputes the
// softmax from them.
class CrossEntropyNode final : public Node {
 public:
  CrossEntropyNode(const Tensor& logits, std::span<const std::int64_t> targets, std::int64_t ignore_index, double smoothing)
      : logits_(save_for_backward(logits)), targets_(targets.begin(), targets.end()), ignore_(ignore_index),
        smoothing_(smoothing) {}
  std::string_view name() const override { return "cross_entropy"; }
  void release() override {
    logits_ = Tensor();
    targets_.clear();
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = Tensor::empty(inputs[0].shape, inputs[0].dtype, logits_.device());
    const DType f = logits_.dtype() == DType::f64 ? DType::f64 : DType::f32;
    run_kernel_on<kernel::CrossEntropyBackward>(logits_, logits_, targets_, ignore_, smoothing_, cast(g, f), gx, Tensor());
    return {gx};
  }

 private:
  Tensor logits_;
  std::vector<std::int64_t> targets_;
  std::int64_t ignore_;
  double smoothing_;
};

// Checks every target is a class in [0, classes) or ignore_index; returns how many rows count.
std::int64_t counted_targets(std::span<const std::int64_t> targets, std::int64_t rows, std::int64_t classes,
                             std::int64_t ignore_index, double label_smoothing, const char* op) {
  if (static_cast<std::int64_t>(targets.size()) != rows) {
    throw std::invalid_argument(std::string(op) + ": " + std::to_string(targets.size()) + " targets for " +
                                std::to_string(rows) + " rows");
  }
  if (label_smoothing < 0 || label_smoothing > 1) {
    throw std::invalid_argument(std::string(op) + ": label smoothing must be in [0, 1]");
  }
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t t = targets[static_cast<std::size_t>(i)];
    if (t == ignore_index) continue;
    if (t < 0 || t >= classes) {
      throw std::invalid_argument(std::string(op) + ": target " + std::to_string(t) + " of row " + std::to_string(i) +
                                  " is not a class in [0, " + std::to_string(classes) + ")");
    }
    ++counted;
  }
  return counted;
}

// Rows [r0, r1) of the classifier's input and their logits, in blocks.
struct RowBlock {
  std::int64_t r0, r1;
};
std::vector<RowBlock> row_blocks(std::int64_t rows, std::int64_t block) {
  std::vector<RowBlock> blocks;
  for (std::int64_t r0 = 0; r0 < rows; r0 += block) blocks.push_back({r0, std::min(rows, r0 + block)});
  return blocks;
}
Tensor rows_of(const Tensor& x, const RowBlock& b) { return slice(x, 0, b.r0, b.r1); }
std::span<const std::int64_t> targets_of(std::span<const std::int64_t> targets, const RowBlock& b) {
  return targets.subspan(static_cast<std::size_t>(b.r0), static_cast<std::size_t>(b.r1 - b.r0));
}
using detail::one_batch;

// One block's logits x w^T [rows, V], in the inputs' dtype.
Tensor block_logits(const Tensor& x, const Tensor& w, const RowBlock& b) {
  return detail::batched_product(rows_of(x, b), transpose(w, 0, 1), Tensor(), x.dtype());
}

// Rows per block when the caller leaves it to the op: one block on the CPU (then it is exactly the two
// ops); on a GPU, about 2^27 logits (256 MiB in bf16) at a time: GPT-2's 16 x 1024 rows are 7 blocks.
std::int64_t classifier_block_rows(std::int64_t asked, std::int64_t rows, std::int64_t classes, Device device) {
  const std::int64_t all = std::max<std::int64_t>(rows, 1);
  if (asked > 0) return std::min(asked, all);
  if (device.type == DeviceType::cpu) return all;
  return std::max<std::int64_t>(256, (std::int64_t{1} << 27) / std::max<std::int64_t>(classes, 1));
}

class LinearCrossEntropyNode final : public Node {
 public:
  LinearCrossEntropyNode(const Tensor& x, const Tensor& w, std::span<const std::int64_t> targets, std::int64_t ignore_index,
                         double smoothing, double row_factor, std::int64_t block)
      : x_(save_for_backward(x)), w_(save_for_backward(w)), targets_(targets.begin(), targets.end()),
        ignore_(ignore_index), smoothing_(smoothing), row_factor_(row_factor), block_(block) {}
  std::string_view name() const override { return "linear_cross_entropy"; }
  void release() override {
    x_ = w_ = Tensor();
    targets_.clear();
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    const DType dtype = x_.dtype(), f = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Device device = x_.device();
    const Tensor gx = Tensor::empty(x_.shape(), dtype, device);
    // dw gathers a term from every block: summed in f32 (the first block's product writes it, the others
    // add into it), rounded once at the end.
    const Tensor gw_sum = x_.size(0) > 0 ? Tensor::empty(w_.shape(), f, device) : Tensor::zeros(w_.shape(), f, device);
    // Every row's loss gradient: the scalar's, times 1 / (counted rows) for the mean.
    const Tensor g_row = mul(cast(g, f), row_factor_);
    bool first = true;
    for (const RowBlock& b : row_blocks(x_.size(0), block_)) {
      // The block's logits become their gradient in place.
      const Tensor grad_logits = block_logits(x_, w_, b);
      run_kernel_on<kernel::CrossEntropyBackward>(grad_logits, grad_logits, targets_of(targets_, b), ignore_, smoothing_,
                                                  make_view(g_row, {b.r1 - b.r0}, {0}, g_row.offset()), grad_logits, Tensor());
      run_kernel_on<kernel::Matmul>(x_, one_batch(grad_logits), one_batch(w_), Tensor(), one_batch(rows_of(gx, b)));
      const Tensor term_a = one_batch(transpose(grad_logits, 0, 1)), term_w = one_batch(rows_of(x_, b));
      if (first) {
        run_kernel_on<kernel::Matmul>(x_, term_a, term_w, Tensor(), one_batch(gw_sum));
      } else {
        run_kernel_on<kernel::MatmulAccumulate>(x_, term_a, term_w, one_batch(gw_sum));
      }
      first = false;
    }
    return {gx, cast(gw_sum, dtype)};
  }

 private:
  Tensor x_, w_;
  std::vector<std::int64_t> targets_;
  std::int64_t ignore_;
  double smoothing_, row_factor_;
  std::int64_t block_;
};

// The kept gradient: G = softmax(logits) - target (unscaled, in the logits' dtype), made in forward.
// Backward: dx = G w, dw = G^T x, in f32, each times the upstream gradient and the row factor (in f32,
// on the device: no read of g by the host), rounded once into the dtype.
class KeptClassifierNode final : public Node {
 public:
  KeptClassifierNode(const Tensor& x, const Tensor& w, const Tensor& grad_logits, double row_factor)
      : x_(save_for_backward(x)), w_(save_for_backward(w)), grad_logits_(save_for_backward(grad_logits)),
        row_factor_(row_factor) {}
  std::string_view name() const override { return "linear_cross_entropy"; }
  void release() override { x_ = w_ = grad_logits_ = Tensor(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const DType dtype = x_.dtype(), f = dtype == DType::f64 ? DType::f64 : DType::f32;
    const Device device = x_.device();
    const Tensor factor = mul(cast(g, f), row_factor_);
    const bool rows = x_.size(0) > 0;  // without rows, no product writes them: dw is zeros
    Tensor gx = Tensor::empty(x_.shape(), f, device), gw = rows ? Tensor::empty(w_.shape(), f, device) : Tensor::zeros(w_.shape(), f, device);
    if (rows) {
      run_kernel_on<kernel::Matmul>(x_, one_batch(grad_logits_), one_batch(w_), Tensor(), one_batch(gx));
      run_kernel_on<kernel::Matmul>(x_, one_batch(transpose(grad_logits_, 0, 1)), one_batch(x_), Tensor(), one_batch(gw));
    }
    return {cast(mul(gx, factor), dtype), cast(mul(gw, factor), dtype)};
  }

 private:
  Tensor x_, w_, grad_logits_;
  double row_factor_;
};

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, std::span<const std::int64_t> targets, Reduction reduction,
                     std::int64_t ignore_index, double label_smoothing) {
  const Tensor logits = detail::autocast_input(logits_in, AutocastOp::cross_entropy);
  detail::check_computable(logits, "cross_entropy");
  if (logits.dim() != 2) {
    throw std::invalid_argument("cross_entropy: logits must be [N, C], got " + shape_str(logits.shape()));
  }
  const std::int64_t n = logits.size(0);
  const std::int64_t c = logits.size(1);
  const std::int64_t counted = counted_targets(targets, n, c, ignore_index, label_smoothing, "cross_entropy");
  // Per-row losses from the fused kernel (the logits kept for backward), then their sum or mean.
  const DType f = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor losses = Tensor::empty({n}, f, logits.device());
  run_kernel_on<kernel::CrossEntropy>(logits, logits, targets, ignore_index, label_smoothing, losses);
  if (needs_grad({&logits})) {
    record(losses, std::make_shared<CrossEntropyNode>(logits, targets, ignore_index, label_smoothing), {&logits});
  }
  // A policy that runs the loss in low precision too (AutocastPolicy::all_low) gets its value rounded
  // into the region's dtype, as a model run wholly in fp16 computes it.
  const Tensor total = sum(detail::autocast_runs_low(AutocastOp::cross_entropy) && f == DType::f32
                               ? cast(losses, *autocast_dtype()) : losses);
  if (reduction == Reduction::sum) return total;
  // Mean over the rows that count (NaN when none does, as 0/0).
  return mul(total, 1.0 / static_cast<double>(counted));
}

Tensor linear_cross_entropy(const Tensor& x_in, const Tensor& w_in, std::span<const std::int64_t> targets,
                            Reduction reduction, std::int64_t ignore_index, double label_smoothing,
                            std::int64_t row_block, ClassifierGradient gradient) {
  detail::check_computable(x_in, "linear_cross_entropy");
  detail::check_computable(w_in, "linear_cross_entropy");
  if (x_in.dim() != 2 || w_in.dim() != 2 || x_in.size(1) != w_in.size(1)) {
    throw std::invalid_argument("linear_cross_entropy: x [N, C] and w [V, C] expected, got " + shape_str(x_in.shape()) +
                                " and " + shape_str(w_in.shape()));
  }
  if (row_block < 0) throw std::invalid_argument("linear_cross_entropy: row_block must be 0 (automatic) or positive");
  const std::int64_t n = x_in.size(0), v = w_in.size(0);
  const std::int64_t block = classifier_block_rows(row_block, n, v, x_in.device());
  if (gradient == ClassifierGradient::automatic) {
    gradient = x_in.device().type == DeviceType::cpu ? ClassifierGradient::recomputed : ClassifierGradient::kept;
  }
  // Autocast casts the product's inputs as its policy for linear_cross_entropy says (low precision in a
  // region by default); the loss is f32 as cross_entropy's.
  const Tensor x0 = detail::autocast_input(x_in, AutocastOp::linear_cross_entropy);
  const Tensor w0 = detail::autocast_input(w_in, AutocastOp::linear_cross_entropy);
  if (gradient == ClassifierGradient::recomputed && block >= n) {
    Tensor logits;
    {
      Autocast as_cast(std::nullopt);  // the product in the dtype just chosen, not matmul's
      logits = matmul(x0, transpose(w0, 0, 1));
    }
    return cross_entropy(logits, targets, reduction, ignore_index, label_smoothing);
  }
  const DType dtype = detail::promote(x0.dtype(), w0.dtype());
  const Tensor x = cast(x0, dtype), w = cast(w0, dtype);
  const std::int64_t counted = counted_targets(targets, n, v, ignore_index, label_smoothing, "linear_cross_entropy");
  const double row_factor = reduction == Reduction::sum ? 1.0 : 1.0 / static_cast<double>(counted);
  const DType f = dtype == DType::f64 ? DType::f64 : DType::f32;
  // Kept: the logits of every row in one product, then in one read of them each row's loss and its
  // gradient, in place.
  const bool keep = gradient == ClassifierGradient::kept && needs_grad({&x, &w});
  Tensor kept_gradient;
  Tensor loss;
  {
    NoGradGuard no_grad;
    const Tensor losses = Tensor::empty({n}, f, x.device());
    if (keep) {
      kept_gradient = block_logits(x, w, {0, n});
      const Tensor unit = Tensor::full({1}, 1.0, f, x.device());
      run_kernel_on<kernel::CrossEntropyBackward>(x, kept_gradient, targets, ignore_index, label_smoothing,
                                                  make_view(unit, {n}, {0}, unit.offset()), kept_gradient, losses);
    } else {
      for (const RowBlock& b : row_blocks(n, block)) {
        run_kernel_on<kernel::CrossEntropy>(x, block_logits(x, w, b), targets_of(targets, b), ignore_index, label_smoothing,
                                            rows_of(losses, b));
      }
    }
    // As cross_entropy: rounded into the region's dtype under a policy that runs losses low too; the mean
    // over the rows that count (NaN when none does, as 0/0).
    const bool low = detail::autocast_runs_low(AutocastOp::cross_entropy) && losses.dtype() == DType::f32;
    loss = mul(sum(low ? cast(losses, *autocast_dtype()) : losses), row_factor);
  }
  if (keep) {
    record(loss, std::make_shared<KeptClassifierNode>(x, w, kept_gradient, row_factor), {&x, &w});
  } else if (needs_grad({&x, &w})) {
    record(loss, std::make_shared<LinearCrossEntropyNode>(x, w, targets, ignore_index, label_smoothing, row_factor, block),
           {&x, &w});
  }
  return loss;
}

Tensor mse_loss(const Tensor& a_in, const Tensor& b_in, Reduction reduction) {
  const Tensor a = detail::autocast_input(a_in, AutocastOp::mse_loss);
  const Tensor b = detail::autocast_input(b_in, AutocastOp::mse_loss);
  detail::check_computable(a, "mse_loss");
  detail::check_computable(b, "mse_loss");
  if (a.shape() != b.shape()) {
    throw std::invalid_argument("mse_loss: shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) + " differ");
  }
  const DType f = detail::promote(a.dtype(), b.dtype()) == DType::f64 ? DType::f64 : DType::f32;
  const Tensor d = sub(cast(a, f), cast(b, f));
  const Tensor sq = mul(d, d);
  return reduction == Reduction::sum ? sum(sq) : mean(sq);
}

}  // namespace mantissa
