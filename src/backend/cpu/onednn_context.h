// The oneDNN engine and stream the CPU backend runs on, and a cache of primitives keyed by shape, strides
// and dtypes (creating a primitive costs 0.2-0.6 ms; a cached one about 10 us less than that, every step).
// Which primitives run with which dtype here: onednn_supports() (onednn_probe.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "mantissa/core/tensor.h"
#include "mantissa/backend/backend_select.h"

namespace mantissa::detail {

dnnl::engine& onednn_engine();
dnnl::stream& onednn_stream();

// oneDNN's data type for a dtype; f64 and fp8 have none here.
dnnl::memory::data_type onednn_type(DType t);


// A strided memory descriptor for a tensor view.
dnnl::memory::desc memory_desc(const Tensor& t);
dnnl::memory::desc memory_desc(const Shape& shape, const Shape& strides, DType t);

// Runs a primitive and waits for it, counting its wall time in kernel_times().
void execute_timed(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args);

// A primitive cache key: the kind's name, then numbers and shapes appended as raw bytes (each shape led
// by its length, so different splits cannot collide). Formatting keys with ostringstream cost about
// 9 us a matmul, more than a small product itself.
class PrimitiveKey {
 public:
  explicit PrimitiveKey(const char* kind) : bytes_(kind) { bytes_.push_back('\0'); }
  PrimitiveKey& add(std::int64_t v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  PrimitiveKey& add(double v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  PrimitiveKey& add(const std::vector<std::int64_t>& shape) {
    add(static_cast<std::int64_t>(shape.size()));
    bytes_.append(reinterpret_cast<const char*>(shape.data()), shape.size() * sizeof(std::int64_t));
    return *this;
  }
  PrimitiveKey& add(const dnnl::memory::desc& md) {
    bytes_.append(reinterpret_cast<const char*>(&md.data), sizeof md.data);
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  std::string bytes_;
};

// The primitive cached under `key`, made by `make` the first time.
dnnl::primitive cached_primitive(const std::string& key, const std::function<dnnl::primitive()>& make);

// A view copied into other strides by oneDNN's reorder, which moves tiles (a blocked transpose when the
// layouts differ in order). Strides must be positive; at most 12 dimensions.
void onednn_reorder(const Shape& shape, const Shape& from_strides, const void* src, const Shape& to_strides, void* dst,
                    DType t);

}  // namespace mantissa::detail
