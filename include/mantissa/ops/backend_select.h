// Which kernels run ops on the CPU: the oneDNN backend (default, fast) or the reference backend (plain
// loops in f64/f32, the oracle the tests compare with).
#pragma once

namespace mantissa {

enum class CpuBackend : unsigned char { onednn, reference };

CpuBackend cpu_backend_kind();
// For this thread.
void set_cpu_backend(CpuBackend kind);

class CpuBackendScope {
 public:
  explicit CpuBackendScope(CpuBackend kind) : saved_(cpu_backend_kind()) { set_cpu_backend(kind); }
  ~CpuBackendScope() { set_cpu_backend(saved_); }
  CpuBackendScope(const CpuBackendScope&) = delete;
  CpuBackendScope& operator=(const CpuBackendScope&) = delete;

 private:
  CpuBackend saved_;
};

}  // namespace mantissa
