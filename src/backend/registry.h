// The kernel registry: for every kernel of kernels.h, a table of implementations indexed by who runs it
// (the reference loops, the CPU's kernels, CUDA's). Each backend fills in the kernels it has, at first
// use; run_kernel<K>(device, ...) is the one way ops reach a kernel: it picks the implementation for the
// device (the reference under CpuBackendScope(reference), and for f64 tensors, which exist for checks),
// times it under its family, counts its FLOPs and bytes, and says clearly when a device has no such kernel. A new
// device adds its files and one registration call (registry.cpp); the CPU's files do not change.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"
#include "mantissa/core/device.h"
#include "profiler.h"

namespace mantissa::detail {

enum class Impl : std::uint8_t { reference, cpu, cuda };
inline constexpr std::size_t kImpls = 3;
const char* impl_name(Impl impl);

template <class K>
struct KernelTable {
  inline static std::array<typename K::Fn*, kImpls> fn{};
};

template <class K>
void register_kernel(Impl impl, typename K::Fn* fn) {
  KernelTable<K>::fn[static_cast<std::size_t>(impl)] = fn;
}

// The implementation that runs kernels on `device` (registering every backend's kernels on first use).
Impl impl_for(Device device);

// For tests without a GPU: tensors on cuda:0 run the CPU's kernels (their memory a fake device's host
// memory, tests/unit/host_device_traffic_test.cpp), so a whole training step can be run "on a device"
// and what it copies and waits for counted. Returns the setting before.
bool set_cpu_kernels_for_gpu_tensors(bool on);

// Each backend's registration, called once by impl_for.
void register_reference_kernels();
void register_cpu_kernels();
void register_cuda_kernels();  // in builds with the CUDA backend (src/backend/cuda/)

[[noreturn]] void throw_missing_kernel(const char* kernel, Device device, Impl impl);

inline bool is_f64_tensor(const Tensor& t) { return t.defined() && t.dtype() == DType::f64; }
inline bool is_f64_tensor(std::span<const Tensor> ts) {
  for (const Tensor& t : ts) {
    if (is_f64_tensor(t)) return true;
  }
  return false;
}
inline bool is_f64_tensor(std::span<const ParamUpdate> list) {
  for (const ParamUpdate& u : list) {
    for (const Tensor* t : u.tensors()) {
      if (is_f64_tensor(*t)) return true;
    }
  }
  return false;
}
template <class T>
bool is_f64_tensor(const T&) {
  return false;
}

[[noreturn]] void throw_device_mismatch(const char* kernel, Device expected, Device found);

// Every tensor a kernel gets must be on the device it runs on: a CPU pointer in a GPU kernel (or the
// other way round) would read garbage or crash, never a clear error.
inline void check_device(const char* kernel, Device device, const Tensor& t) {
  if (t.defined() && !(t.device() == device)) throw_device_mismatch(kernel, device, t.device());
}
// (A list of tensors is passed as a std::span, which these two overloads look into.)
inline void check_device(const char* kernel, Device device, std::span<const Tensor> ts) {
  for (const Tensor& t : ts) check_device(kernel, device, t);
}
inline void check_device(const char* kernel, Device device, std::span<const ParamUpdate> list) {
  for (const ParamUpdate& u : list) {
    for (const Tensor* t : u.tensors()) check_device(kernel, device, *t);
  }
}
inline void check_device(const char* kernel, Device device, const ProductScale& scale) {
  check_device(kernel, device, scale.a_factor);
  check_device(kernel, device, scale.w_factor);
}
template <class T>
void check_device(const char*, Device, const T&) {}

// The bytes a kernel's tensor arguments hold, each once: what a kernel that reads its inputs and writes
// its outputs once moves (kernels.h's `bytes` says otherwise for those that update in place).
inline double argument_bytes(const Tensor& t) { return static_cast<double>(held_bytes(t)); }
inline double argument_bytes(std::span<const Tensor> ts) {
  double sum = 0;
  for (const Tensor& t : ts) sum += argument_bytes(t);
  return sum;
}
template <class T>
double argument_bytes(const T&) {
  return 0;
}

template <class K, class... A>
decltype(auto) run_kernel(Device device, A&&... args) {
  (check_device(K::name, device, args), ...);
  Impl impl = impl_for(device);
  // f64 tensors exist for checks; the CPU's kernels compute in f32, the reference in f64.
  if (impl == Impl::cpu && (is_f64_tensor(args) || ...)) impl = Impl::reference;
  typename K::Fn* fn = KernelTable<K>::fn[static_cast<std::size_t>(impl)];
  if (fn == nullptr) throw_missing_kernel(K::name, device, impl);
  const char* family;
  if constexpr (requires { K::family_of(args...); }) {
    family = K::family_of(args...);
  } else {
    family = K::family;
  }
  double flops = 0;
  if constexpr (requires { K::flops(args...); }) flops = K::flops(args...);
  double bytes = 0;
  if constexpr (requires { K::bytes(args...); }) {
    bytes = K::bytes(args...);
  } else {
    bytes = (argument_bytes(args) + ... + 0.0);
  }
  FamilyTimer timer(family, K::name, device, bytes, flops);
  return fn(std::forward<A>(args)...);
}

// fn(device, group) once per device among `items` (in order of first appearance), group being the items
// on that device, in order: a list kernel is one call per device (in practice one).
template <class T, class DeviceOf, class Fn>
void for_each_device(std::span<const T> items, DeviceOf device_of, Fn fn) {
  std::vector<bool> done(items.size(), false);
  std::vector<T> group;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (done[i]) continue;
    const Device device = device_of(items[i]);
    group.clear();
    for (std::size_t j = i; j < items.size(); ++j) {
      if (!done[j] && device_of(items[j]) == device) {
        group.push_back(items[j]);
        done[j] = true;
      }
    }
    fn(device, std::span<const T>(group));
  }
}

// run_kernel on the device of tensor `on`.
template <class K, class... A>
decltype(auto) run_kernel_on(const Tensor& on, A&&... args) {
  return run_kernel<K>(on.device(), std::forward<A>(args)...);
}

}  // namespace mantissa::detail
