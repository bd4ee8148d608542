// Tensors: a dtype chosen at run time, a shape, row-major strides over reference-counted storage (so
// reshape, transpose and slice are views without copies), a device, and the autograd state.
//
// Tensor is a cheap handle (a shared pointer); copies share the data. Ops are free functions in
// mantissa/ops/; the autograd methods here (backward, grad) are in mantissa/autograd/.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mantissa/core/device.h"
#include "mantissa/core/dtype.h"
#include "mantissa/core/storage.h"

namespace mantissa {

using Shape = std::vector<std::int64_t>;

class Node;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: no data
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Values are rounded to the dtype to nearest even.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  static Tensor from_values(std::span<const double> values, const Shape& shape, DType dtype);
  static Tensor from_values(std::initializer_list<double> values, const Shape& shape, DType dtype);
  // Normal(mean, stddev) and uniform [low, high) values from a seeded generator: the same seed gives the
  // same values on every machine.
  static Tensor randn(const Shape& shape, DType dtype, std::uint64_t seed, double mean = 0, double stddev = 1);
  static Tensor uniform(const Shape& shape, DType dtype, std::uint64_t seed, double low, double high);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& strides() const;  // in elements
  std::int64_t offset() const;   // in elements, into the storage
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const;
  DType dtype() const;
  Device device() const;
  const Storage& storage() const;
  bool is_contiguous() const;
  // Address of element [0, 0, ...].
  void* data() const;
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data());
  }

  // A contiguous copy on `device`, the same dtype and bits, without autograd history (ops' to_device
  // records one).
  Tensor to(Device device) const;

  // Every element in row-major order, exactly, as double (NaN, inf kept), from any device.
  std::vector<double> to_doubles() const;
  double item() const;  // the value of a one-element tensor
  std::string str() const;  // "Tensor[2, 3] bf16" and the values, for messages

  // Autograd (mantissa/autograd/).
  bool requires_grad() const;
  // Marks a leaf as needing its gradient; throws for a non-leaf.
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward pass reaches this leaf
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;  // drops the gradient
  const std::shared_ptr<Node>& grad_fn() const;
  // Reverse-mode differentiation from this tensor: a scalar unless `gradient` (same shape) is given.
  // The graph is freed afterwards unless retain_graph.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  // The same data without autograd history.
  Tensor detach() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  Storage storage;
  std::int64_t offset = 0;
  Shape shape;
  Shape strides;
  DType dtype = DType::f32;

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<Node> grad_fn;           // the op that made this tensor; null for leaves
  std::shared_ptr<Node> grad_accumulator;  // for leaves that require grad: adds into `grad`
};

// Number of elements of a shape, and its row-major strides.
std::int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);

// A tensor over existing storage (views).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset);

}  // namespace mantissa
