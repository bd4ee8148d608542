// The losses: cross-entropy (softmax and loss fused, with ignore index and label smoothing) and mean
// squared error, computed in f32 whatever the dtype of the logits.
#include <cmath>
#include <stdexcept>
#include <string>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class CrossEntropyNode final : public Node {
 public:
  CrossEntropyNode(const Tensor& probs, std::span<const std::int64_t> targets, std::int64_t ignore_index, double smoothing)
      : probs_(save_for_backward(probs)), targets_(targets.begin(), targets.end()), ignore_(ignore_index),
        smoothing_(smoothing) {}
  std::string_view name() const override { return "cross_entropy"; }
  void release() override {
    probs_ = Tensor();
    targets_.clear();
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gx = Tensor::empty(inputs[0].shape, inputs[0].dtype, probs_.device());
    run_kernel_on<kernel::CrossEntropyBackward>(probs_, probs_, targets_, ignore_, smoothing_,
                                                cast(g, probs_.dtype()), gx);
    return {gx};
  }

 private:
  Tensor probs_;
  std::vector<std::int64_t> targets_;
  std::int64_t ignore_;
  double smoothing_;
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
  if (static_cast<std::int64_t>(targets.size()) != n) {
    throw std::invalid_argument("cross_entropy: " + std::to_string(targets.size()) + " targets for " +
                                std::to_string(n) + " rows");
  }
  if (label_smoothing < 0 || label_smoothing > 1) {
    throw std::invalid_argument("cross_entropy: label smoothing must be in [0, 1]");
  }
  std::int64_t counted = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = targets[static_cast<std::size_t>(i)];
    if (t == ignore_index) continue;
    if (t < 0 || t >= c) {
      throw std::invalid_argument("cross_entropy: target " + std::to_string(t) + " of row " + std::to_string(i) +
                                  " is not a class in [0, " + std::to_string(c) + ")");
    }
    ++counted;
  }
  // Per-row losses from the fused kernel (softmax kept for backward), then their sum or mean.
  const DType f = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor probs = Tensor::empty({n, c}, f, logits.device());
  Tensor losses = Tensor::empty({n}, f, logits.device());
  run_kernel_on<kernel::CrossEntropy>(logits, logits, targets, ignore_index, label_smoothing, probs, losses);
  if (needs_grad({&logits})) {
    record(losses, std::make_shared<CrossEntropyNode>(probs, targets, ignore_index, label_smoothing), {&logits});
  }
  // A policy that runs the loss in low precision too (AutocastPolicy::all_low) gets its value rounded
  // into the region's dtype, as a model run wholly in fp16 computes it.
  const Tensor total = sum(detail::autocast_runs_low(AutocastOp::cross_entropy) && f == DType::f32
                               ? cast(losses, *autocast_dtype()) : losses);
  if (reduction == Reduction::sum) return total;
  // Mean over the rows that count (NaN when none does, as 0/0).
  return mul(total, 1.0 / static_cast<double>(counted));
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
