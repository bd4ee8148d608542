// oneDNN engine, stream, capability probe and primitive cache.
#include "onednn_context.h"

#include "mantissa/backend/backend_select.h"
#include "../profiler.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace mantissa::detail {

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

dnnl::memory::data_type onednn_type(DType t) {
  switch (t) {
    case DType::f32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::f16: return dnnl::memory::data_type::f16;
    default: break;
  }
  throw std::invalid_argument("oneDNN has no " + std::string(dtype_name(t)) + " type");
}

dnnl::memory::desc memory_desc(const Shape& shape, const Shape& strides, DType t) {
  return dnnl::memory::desc(dnnl::memory::dims(shape.begin(), shape.end()), onednn_type(t),
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

dnnl::memory::desc memory_desc(const Tensor& t) { return memory_desc(t.shape(), t.strides(), t.dtype()); }

void execute_timed(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  const auto t0 = std::chrono::steady_clock::now();
  p.execute(onednn_stream(), args);
  onednn_stream().wait();
  count_library_call(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

dnnl::primitive cached_primitive(const std::string& key, const std::function<dnnl::primitive()>& make) {
  static std::mutex mutex;
  static std::unordered_map<std::string, dnnl::primitive> cache;
  {
    std::lock_guard lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  dnnl::primitive p = make();
  std::lock_guard lock(mutex);
  return cache.emplace(key, p).first->second;
}

void onednn_reorder(const Shape& shape, const Shape& from_strides, const void* src, const Shape& to_strides, void* dst,
                    DType t) {
  const dnnl::memory::desc from = memory_desc(shape, from_strides, t);
  const dnnl::memory::desc to = memory_desc(shape, to_strides, t);
  PrimitiveKey key("reorder");
  key.add(static_cast<std::int64_t>(t)).add(shape).add(from_strides).add(to_strides);
  const dnnl::primitive prim = cached_primitive(key.str(), [&] {
    return dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to));
  });
  dnnl::memory fm(from, onednn_engine(), const_cast<void*>(src));
  dnnl::memory tm(to, onednn_engine(), dst);
  execute_timed(prim, {{DNNL_ARG_FROM, fm}, {DNNL_ARG_TO, tm}});
}

}  // namespace mantissa::detail
