// Reductions over axes (sum, mean, max, variance) and sum_to, the inverse of broadcasting. Kernels
// accumulate in f32 (f64 for f64) whatever the dtype they read and write.
#include <algorithm>
#include <stdexcept>

#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

Shape keepdim_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out = shape;
  for (int a : axes) out[static_cast<std::size_t>(a)] = 1;
  return out;
}

Shape dropped_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (std::find(axes.begin(), axes.end(), static_cast<int>(i)) == axes.end()) out.push_back(shape[i]);
  }
  return out;
}

std::int64_t reduced_count(const Shape& shape, const std::vector<int>& axes) {
  std::int64_t n = 1;
  for (int a : axes) n *= shape[static_cast<std::size_t>(a)];
  return n;
}

class ReduceNode final : public Node {
 public:
  ReduceNode(ReduceOp op, std::vector<int> axes, const Tensor& x, const Tensor& out_keepdim)
      : op_(op), axes_(std::move(axes)) {
    if (op == ReduceOp::max) {
      x_ = save_for_backward(x);
      max_ = save_for_backward(out_keepdim);
    }
  }
  std::string_view name() const override { return "reduce"; }
  void release() override {
    x_ = {};
    max_ = {};
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Shape& shape = inputs[0].shape;
    const Tensor gk = reshape(g, keepdim_shape(shape, axes_));
    switch (op_) {
      case ReduceOp::sum: return {expand(gk, shape)};
      case ReduceOp::mean: return {expand(mul(gk, 1.0 / static_cast<double>(reduced_count(shape, axes_))), shape)};
      case ReduceOp::max: {
        // Ties share the gradient equally.
        const Tensor mask = equal(x_, expand(max_, shape));
        const Tensor ties = sum(mask, std::vector<std::int64_t>(axes_.begin(), axes_.end()), true);
        return {mul(mask, expand(div(gk, ties), shape))};
      }
    }
    return {};
  }

 private:
  ReduceOp op_;
  std::vector<int> axes_;
  Tensor x_, max_;
};

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& axes_in, bool keepdim, const char* name) {
  detail::check_computable(x, name);
  const std::vector<int> axes = detail::normalize_axes(axes_in, x.dim(), name);
  if (op == ReduceOp::max) {
    for (int a : axes) {
      if (x.shape()[static_cast<std::size_t>(a)] == 0) throw std::invalid_argument("amax over an empty axis");
    }
  }
  Tensor out = Tensor::empty(keepdim_shape(x.shape(), axes), x.dtype(), x.device());
  run_kernel_on<kernel::Reduce>(x, op, x, axes, out);
  Tensor result = out;
  if (!keepdim) result = make_view(out, dropped_shape(x.shape(), axes), contiguous_strides(dropped_shape(x.shape(), axes)), 0);
  if (needs_grad({&x})) record(result, std::make_shared<ReduceNode>(op, axes, x, out), {&x});
  return result;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce(ReduceOp::sum, detail::autocast_input(x, AutocastOp::sum), axes, keepdim, "sum");
}
Tensor mean(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce(ReduceOp::mean, detail::autocast_input(x, AutocastOp::mean), axes, keepdim, "mean");
}
Tensor amax(const Tensor& x, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce(ReduceOp::max, x, axes, keepdim, "amax");
}

Tensor variance(const Tensor& x_in, std::vector<std::int64_t> axes, bool keepdim, int correction) {
  const Tensor x = detail::autocast_input(x_in, AutocastOp::variance);
  const std::vector<int> norm = detail::normalize_axes(axes, x.dim(), "variance");
  const std::int64_t n = reduced_count(x.shape(), norm);
  if (n - correction <= 0) throw std::invalid_argument("variance: not enough elements for the correction");
  // Computed in f32 (f64 for f64): deviations from the mean are small differences of large numbers.
  const Tensor xf = x.dtype() == DType::f64 ? x : cast(x, DType::f32);
  const Tensor d = sub(xf, mean(xf, axes, true));
  Tensor v = mul(sum(mul(d, d), axes, keepdim), 1.0 / static_cast<double>(n - correction));
  return cast(v, x.dtype());
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  if (x.shape().size() < shape.size()) {
    throw std::invalid_argument("sum_to: " + shape_str(x.shape()) + " has fewer dimensions than " + shape_str(shape));
  }
  const std::size_t lead = x.shape().size() - shape.size();
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < x.shape().size(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(static_cast<std::int64_t>(i));
  }
  if (axes.empty()) return reshape(x, shape);
  return reshape(sum(x, axes, true), shape);
}

}  // namespace mantissa
