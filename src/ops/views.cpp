// Views (reshape, transpose, permute, slice, expand) share storage with their input; copies and casts
// make new storage. Each records its backward rule: views map the gradient back to the input's shape.
#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

using detail::normalize_axis;

class ReshapeNode final : public Node {
 public:
  std::string_view name() const override { return "reshape"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {reshape(g, inputs[0].shape)}; }
};

class PermuteNode final : public Node {
 public:
  explicit PermuteNode(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}
  std::string_view name() const override { return "permute"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    std::vector<std::int64_t> inverse(dims_.size());
    for (std::size_t i = 0; i < dims_.size(); ++i) inverse[static_cast<std::size_t>(dims_[i])] = static_cast<std::int64_t>(i);
    return {permute(g, inverse)};
  }

 private:
  std::vector<std::int64_t> dims_;
};

class SliceNode final : public Node {
 public:
  SliceNode(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step)
      : dim_(dim), start_(start), end_(end), step_(step) {}
  std::string_view name() const override { return "slice"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor full = Tensor::zeros(inputs[0].shape, g.dtype(), g.device());
    run_kernel_on<kernel::Copy>(g, g, slice(full, dim_, start_, end_, step_));
    return {full};
  }

 private:
  std::int64_t dim_, start_, end_, step_;
};

class ExpandNode final : public Node {
 public:
  std::string_view name() const override { return "expand"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {sum_to(g, inputs[0].shape)}; }
};

class IdentityNode final : public Node {
 public:
  std::string_view name() const override { return "contiguous"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {g}; }
};

class CastNode final : public Node {
 public:
  std::string_view name() const override { return "cast"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {cast(g, inputs[0].dtype)}; }
};

class ToDeviceNode final : public Node {
 public:
  explicit ToDeviceNode(Device from) : from_(from) {}
  std::string_view name() const override { return "to_device"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {to_device(g, from_)}; }

 private:
  Device from_;
};

class ConcatNode final : public Node {
 public:
  ConcatNode(std::int64_t dim, std::vector<std::int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::string_view name() const override { return "concat"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    std::vector<Tensor> out;
    std::int64_t at = 0;
    for (std::int64_t s : sizes_) {
      out.push_back(contiguous_copy(slice(g, dim_, at, at + s)));
      at += s;
    }
    return out;
  }

 private:
  std::int64_t dim_;
  std::vector<std::int64_t> sizes_;
};

}  // namespace

Tensor reshape(const Tensor& x, Shape shape) {
  std::int64_t known = 1;
  std::int64_t infer = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_str(shape));
      infer = static_cast<std::int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0 && known != 0) shape[static_cast<std::size_t>(infer)] = x.numel() / known;
  if (numel_of(shape) != x.numel()) {
    throw std::invalid_argument("reshape: cannot view " + shape_str(x.shape()) + " as " + shape_str(shape));
  }
  const Tensor source = contiguous(x);
  Tensor out = make_view(source, shape, contiguous_strides(shape), source.offset());
  if (needs_grad({&x})) record(out, std::make_shared<ReshapeNode>(), {&x});
  return out;
}

Tensor permute(const Tensor& x, std::vector<std::int64_t> dims) {
  const std::int64_t rank = x.dim();
  if (static_cast<std::int64_t>(dims.size()) != rank) {
    throw std::invalid_argument("permute: " + std::to_string(dims.size()) + " dims for a tensor of rank " +
                                std::to_string(rank));
  }
  Shape shape(dims.size());
  Shape strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    dims[i] = normalize_axis(dims[i], rank, "permute");
    if (seen[static_cast<std::size_t>(dims[i])]) throw std::invalid_argument("permute: repeated dimension");
    seen[static_cast<std::size_t>(dims[i])] = true;
    shape[i] = x.shape()[static_cast<std::size_t>(dims[i])];
    strides[i] = x.strides()[static_cast<std::size_t>(dims[i])];
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  if (needs_grad({&x})) record(out, std::make_shared<PermuteNode>(dims), {&x});
  return out;
}

Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(normalize_axis(d0, x.dim(), "transpose"))],
            dims[static_cast<std::size_t>(normalize_axis(d1, x.dim(), "transpose"))]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) {
  dim = normalize_axis(dim, x.dim(), "slice");
  if (step <= 0) throw std::invalid_argument("slice: step must be positive");
  const std::int64_t n = x.shape()[static_cast<std::size_t>(dim)];
  const auto clamp = [n](std::int64_t i) { return std::clamp<std::int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  Shape shape = x.shape();
  Shape strides = x.strides();
  shape[static_cast<std::size_t>(dim)] = (end - start + step - 1) / step;
  strides[static_cast<std::size_t>(dim)] *= step;
  Tensor out = make_view(x, shape, strides, x.offset() + start * x.strides()[static_cast<std::size_t>(dim)]);
  if (needs_grad({&x})) record(out, std::make_shared<SliceNode>(dim, start, end, step), {&x});
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  if (shape.size() < x.shape().size()) {
    throw std::invalid_argument("expand: cannot expand " + shape_str(x.shape()) + " to " + shape_str(shape));
  }
  const std::size_t lead = shape.size() - x.shape().size();
  Shape strides(shape.size(), 0);
  for (std::size_t i = 0; i < x.shape().size(); ++i) {
    const std::int64_t from = x.shape()[i];
    if (from == shape[lead + i]) {
      strides[lead + i] = x.strides()[i];
    } else if (from != 1) {
      throw std::invalid_argument("expand: cannot expand " + shape_str(x.shape()) + " to " + shape_str(shape));
    }
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  if (needs_grad({&x}) && shape != x.shape()) record(out, std::make_shared<ExpandNode>(), {&x});
  return shape == x.shape() ? x : out;
}

Tensor contiguous_copy(const Tensor& x) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  run_kernel_on<kernel::Copy>(x, x, out);
  return out;
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = contiguous_copy(x);
  if (needs_grad({&x})) record(out, std::make_shared<IdentityNode>(), {&x});
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  if (dst.shape() != src.shape()) {
    throw std::invalid_argument("copy_into: shape " + shape_str(src.shape()) + " into " + shape_str(dst.shape()));
  }
  NoGradGuard no_grad;
  const Tensor from = src.device() == dst.device() ? src : src.to(dst.device());
  run_kernel_on<kernel::Copy>(dst, from, dst);
  dst.storage()->bump_version();
}

Tensor to_device(const Tensor& x, Device device) {
  if (!x.defined()) throw std::invalid_argument("to_device: undefined tensor");
  if (x.device() == device) return x;
  Tensor out = x.to(device);
  if (needs_grad({&x})) record(out, std::make_shared<ToDeviceNode>(x.device()), {&x});
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  run_kernel_on<kernel::Copy>(x, x, out);
  if (needs_grad({&x})) record(out, std::make_shared<CastNode>(), {&x});
  return out;
}

Tensor concat(std::span<const Tensor> xs, std::int64_t dim) {
  if (xs.empty()) throw std::invalid_argument("concat: no tensors");
  dim = normalize_axis(dim, xs[0].dim(), "concat");
  Shape shape = xs[0].shape();
  std::vector<std::int64_t> sizes;
  shape[static_cast<std::size_t>(dim)] = 0;
  DType dtype = xs[0].dtype();
  for (const Tensor& x : xs) {
    detail::check_computable(x, "concat");
    Shape other = x.shape();
    if (other.size() != shape.size()) throw std::invalid_argument("concat: tensors of different rank");
    sizes.push_back(other[static_cast<std::size_t>(dim)]);
    other[static_cast<std::size_t>(dim)] = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (i != static_cast<std::size_t>(dim) && other[i] != shape[i]) {
        throw std::invalid_argument("concat: shapes " + shape_str(xs[0].shape()) + " and " + shape_str(x.shape()) +
                                    " differ outside dimension " + std::to_string(dim));
      }
    }
    shape[static_cast<std::size_t>(dim)] += sizes.back();
    dtype = detail::promote(dtype, x.dtype());
  }
  Tensor out = Tensor::empty(shape, dtype, xs[0].device());
  std::int64_t at = 0;
  for (const Tensor& x : xs) {
    const std::int64_t s = x.shape()[static_cast<std::size_t>(dim)];
    NoGradGuard no_grad;
    run_kernel_on<kernel::Copy>(x, x, slice(out, dim, at, at + s));
    at += s;
  }
  bool any = false;
  for (const Tensor& x : xs) any = any || needs_grad({&x});
  if (any) {
    auto node = std::make_shared<ConcatNode>(dim, sizes);
    // record() takes a fixed list; add the inputs one by one.
    for (const Tensor& x : xs) {
      record(out, node, {&x});
    }
  }
  return out;
}

}  // namespace mantissa
