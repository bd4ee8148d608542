// Argument checks shared by the op front-ends.
#include "op_support.h"

#include <algorithm>
#include <stdexcept>

#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"

namespace mantissa::detail {

void check_computable(const Tensor& x, const char* op) {
  if (!x.defined()) throw std::invalid_argument(std::string(op) + ": undefined tensor");
  if (is_storage_only(x.dtype())) {
    throw std::invalid_argument(std::string(op) + ": " + std::string(dtype_name(x.dtype())) +
                                " is a storage format; cast() to f32, bf16 or f16 first");
  }
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // f32 with anything narrower, or f16 with bf16
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                                  " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::int64_t normalize_axis(std::int64_t axis, std::int64_t rank, const char* op) {
  if (axis < -rank || axis >= rank) {
    throw std::invalid_argument(std::string(op) + ": axis " + std::to_string(axis) + " out of range for rank " +
                                std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int> normalize_axes(const std::vector<std::int64_t>& axes, std::int64_t rank, const char* op) {
  std::vector<int> out;
  if (axes.empty()) {
    for (std::int64_t i = 0; i < rank; ++i) out.push_back(static_cast<int>(i));
    return out;
  }
  for (std::int64_t a : axes) out.push_back(static_cast<int>(normalize_axis(a, rank, op)));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::int64_t window_out_size(std::int64_t in, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                             std::int64_t dilation, const char* op) {
  const std::int64_t span = dilation * (kernel - 1) + 1;
  if (in + 2 * pad < span || stride <= 0) {
    throw std::invalid_argument(std::string(op) + ": window of " + std::to_string(span) + " does not fit input of " +
                                std::to_string(in) + " with padding " + std::to_string(pad));
  }
  return (in + 2 * pad - span) / stride + 1;
}

bool channels_last_activations(const Tensor& x) {
  return x.dim() == 4 && x.device().type == DeviceType::cpu && cpu_backend_kind() == CpuBackend::onednn &&
         onednn_supports(OnednnPrimitive::convolution, x.dtype());
}

Tensor to_channels_last(const Tensor& x) {
  if (is_channels_last(x)) return x;
  return permute(contiguous(permute(x, {0, 2, 3, 1})), {0, 3, 1, 2});
}

}  // namespace mantissa::detail
