// Tensor construction, shape queries, element access and printing. Autograd lives in src/autograd/.
#include "mantissa/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <sstream>
#include <stdexcept>

#include "element_io.h"
#include "strided.h"

namespace mantissa {

// Element counts are checked: a negative size, or a product past 2^60 (whose byte count could wrap),
// is an error naming the shape, never a wrapped number.
std::int64_t numel_of(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) {
    if (s < 0) throw std::invalid_argument("shape " + shape_str(shape) + " has a negative size");
    if (s != 0 && n > (std::int64_t{1} << 60) / s) {
      throw std::length_error("shape " + shape_str(shape) + " has more than 2^60 elements");
    }
    n *= s;
  }
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (std::int64_t s : shape) {
    if (s < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(shape));
  }
  auto impl = std::make_shared<TensorImpl>();
  const std::int64_t n = numel_of(shape);  // checked: at most 2^60, so the byte count (8 bytes at most each) fits
  impl->storage = allocate_storage(static_cast<std::size_t>(n) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  fill_zero_bytes(t.storage(), 0, t.storage()->bytes());  // +0 is all-zero bits in every format
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  const std::size_t size = dtype_size(dtype);
  const auto total = static_cast<std::size_t>(t.numel()) * size;
  if (total == 0) return t;
  // The value rounded once, then its encoding repeated by the device's allocator where the tensor lives
  // (encoding every element cost 4 us for 256 bf16 ones; a GPU's filled through the host waited for it).
  std::uint64_t pattern = 0;
  detail::store_element(dtype, &pattern, 0, value);
  fill_pattern_bytes(t.storage(), 0, total, &pattern, size);
  return t;
}

Tensor Tensor::from_values(std::span<const double> values, const Shape& shape, DType dtype) {
  if (static_cast<std::int64_t>(values.size()) != numel_of(shape)) {
    throw std::invalid_argument(std::to_string(values.size()) + " values do not fill shape " + shape_str(shape));
  }
  Tensor t = empty(shape, dtype);
  for (std::size_t i = 0; i < values.size(); ++i) {
    detail::store_element(dtype, t.data(), static_cast<std::int64_t>(i), values[i]);
  }
  return t;
}

Tensor Tensor::from_values(std::initializer_list<double> values, const Shape& shape, DType dtype) {
  return from_values(std::span<const double>(values.begin(), values.size()), shape, dtype);
}

namespace {
double unit_uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }
}  // namespace

Tensor Tensor::randn(const Shape& shape, DType dtype, std::uint64_t seed, double mean, double stddev) {
  // Box-Muller from a 64-bit Mersenne twister: the same values with every standard library.
  std::mt19937_64 rng(seed);
  Tensor t = empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); i += 2) {
    const double u = 1.0 - unit_uniform(rng);  // (0, 1]
    const double v = unit_uniform(rng);
    const double r = std::sqrt(-2.0 * std::log(u));
    detail::store_element(dtype, t.data(), i, mean + stddev * r * std::cos(2 * std::numbers::pi * v));
    if (i + 1 < t.numel()) {
      detail::store_element(dtype, t.data(), i + 1, mean + stddev * r * std::sin(2 * std::numbers::pi * v));
    }
  }
  return t;
}

Tensor Tensor::uniform(const Shape& shape, DType dtype, std::uint64_t seed, double low, double high) {
  std::mt19937_64 rng(seed);
  Tensor t = empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    detail::store_element(dtype, t.data(), i, low + (high - low) * unit_uniform(rng));
  }
  return t;
}

const Shape& Tensor::shape() const { return impl_->shape; }
const Shape& Tensor::strides() const { return impl_->strides; }
std::int64_t Tensor::offset() const { return impl_->offset; }
std::int64_t Tensor::numel() const { return numel_of(impl_->shape); }
DType Tensor::dtype() const { return impl_->dtype; }
Device Tensor::device() const { return impl_->storage->device(); }
const Storage& Tensor::storage() const { return impl_->storage; }

std::int64_t Tensor::size(std::int64_t d) const {
  const std::int64_t n = dim();
  if (d < -n || d >= n) {
    throw std::out_of_range("dimension " + std::to_string(d) + " out of range for shape " + shape_str(shape()));
  }
  return shape()[static_cast<std::size_t>(d < 0 ? d + n : d)];
}

bool Tensor::is_contiguous() const { return impl_->strides == contiguous_strides(impl_->shape); }

void* Tensor::data() const {
  return static_cast<char*>(impl_->storage->data()) +
         impl_->offset * static_cast<std::int64_t>(dtype_size(impl_->dtype));
}

namespace {
// Elements from the first to one past the last that a view reaches, in its storage (strides >= 0).
std::int64_t span_of(const Tensor& t) {
  if (t.numel() == 0) return 0;
  std::int64_t last = 0;
  for (std::size_t d = 0; d < t.shape().size(); ++d) {
    if (t.strides()[d] < 0) throw std::invalid_argument("a view with a negative stride cannot change device");
    last += (t.shape()[d] - 1) * t.strides()[d];
  }
  return last + 1;
}
}  // namespace

Tensor Tensor::to(Device device) const {
  const std::size_t size = dtype_size(dtype());
  Tensor out = empty(shape(), dtype(), device);
  if (is_contiguous()) {
    copy_bytes(out.storage(), 0, storage(), static_cast<std::size_t>(offset()) * size,
               static_cast<std::size_t>(numel()) * size);
    return out;
  }
  // A strided view: the part of its storage it reaches, brought to the host, gathered element by element.
  Tensor host = *this;
  if (this->device().type != DeviceType::cpu) {
    const std::int64_t span = span_of(*this);
    host = make_view(empty({span}, dtype()), shape(), strides(), 0);
    copy_bytes(host.storage(), 0, storage(), static_cast<std::size_t>(offset()) * size, static_cast<std::size_t>(span) * size);
  }
  Tensor dense = device.type == DeviceType::cpu ? out : empty(shape(), dtype());
  auto* to = static_cast<unsigned char*>(dense.data());
  const auto* from = static_cast<const unsigned char*>(host.data());
  std::int64_t k = 0;
  detail::for_each_offset(shape(), {host.strides()}, [&](const std::int64_t* off) {
    std::memcpy(to + k++ * static_cast<std::int64_t>(size), from + off[0] * static_cast<std::int64_t>(size), size);
  });
  if (device.type != DeviceType::cpu) copy_bytes(out.storage(), 0, dense.storage(), 0, static_cast<std::size_t>(numel()) * size);
  return out;
}

std::vector<double> Tensor::to_doubles() const {
  if (device().type != DeviceType::cpu) return to(Device::cpu()).to_doubles();
  std::vector<double> out(static_cast<std::size_t>(numel()));
  const void* base = data();
  std::size_t k = 0;
  detail::for_each_offset(shape(), {strides()}, [&](const std::int64_t* off) {
    out[k++] = detail::load_element(dtype(), base, off[0]);
  });
  return out;
}

double Tensor::item() const {
  if (numel() != 1) throw std::invalid_argument("item() of a tensor of shape " + shape_str(shape()));
  return to_doubles()[0];
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream s;
  s << "Tensor" << shape_str(shape()) << " " << dtype_name(dtype()) << " {";
  const std::vector<double> v = to_doubles();
  for (std::size_t i = 0; i < v.size() && i < 8; ++i) s << (i ? ", " : "") << v[i];
  if (v.size() > 8) s << ", ...";
  s << "}";
  return s.str();
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, std::int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

}  // namespace mantissa
