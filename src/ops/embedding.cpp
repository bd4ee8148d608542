// The embedding front-end: rows of a table picked by ids, and the backward that adds each gradient row
// into the table's gradient.
#include <stdexcept>
#include <string>

#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

class EmbeddingNode final : public Node {
 public:
  explicit EmbeddingNode(std::span<const std::int64_t> ids) : ids_(ids.begin(), ids.end()) {}
  std::string_view name() const override { return "embedding"; }
  void release() override { ids_.clear(); }
  std::vector<Tensor> backward(const Tensor& g) override {
    const Shape& ws = inputs[0].shape;
    Tensor gw = Tensor::zeros(ws, DType::f32, g.device());
    run_kernel_on<kernel::EmbeddingBackward>(g, ids_, reshape(g, {-1, ws[1]}), gw);
    return {gw};
  }

 private:
  std::vector<std::int64_t> ids_;
};

}  // namespace

Tensor embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Shape& ids_shape) {
  detail::check_computable(weight, "embedding");
  if (weight.dim() != 2) throw std::invalid_argument("embedding: weight must be [V, D], got " + shape_str(weight.shape()));
  if (numel_of(ids_shape) != static_cast<std::int64_t>(ids.size())) {
    throw std::invalid_argument("embedding: " + std::to_string(ids.size()) + " ids do not fill shape " +
                                shape_str(ids_shape));
  }
  const std::int64_t v = weight.size(0);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v) {
      throw std::invalid_argument("embedding: id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                                  " is not in [0, " + std::to_string(v) + ")");
    }
  }
  Shape shape = ids_shape;
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype(), weight.device());
  run_kernel_on<kernel::Embedding>(weight, weight, ids, reshape(out, {-1, weight.size(1)}).detach());
  if (needs_grad({&weight})) record(out, std::make_shared<EmbeddingNode>(ids), {&weight});
  return out;
}

}  // namespace mantissa
