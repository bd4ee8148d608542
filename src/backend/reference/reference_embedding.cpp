// Reference embedding lookup and its scatter-add backward.
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {

void reference_embedding(const Tensor& weight, std::span<const std::int64_t> ids, const Tensor& out) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::int64_t d = 0; d < weight.size(1); ++d) {
      put(out, static_cast<std::int64_t>(i), d, at(weight, ids[i], d));
    }
  }
}

void reference_embedding_backward(std::span<const std::int64_t> ids, const Tensor& grad_out, const Tensor& grad_weight) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    for (std::int64_t d = 0; d < grad_weight.size(1); ++d) {
      put(grad_weight, ids[i], d, at(grad_weight, ids[i], d) + at(grad_out, static_cast<std::int64_t>(i), d));
    }
  }
}

}  // namespace mantissa::detail
