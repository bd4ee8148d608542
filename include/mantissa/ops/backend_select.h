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

// What the CPU backend runs on this machine, probed once: which dtypes oneDNN's matmul and convolution
// implement here (the others run a documented fallback), and oneDNN's own version.
struct CpuCapabilities {
  bool matmul_f32, matmul_bf16, matmul_f16;
  bool conv_f32, conv_bf16, conv_f16;
  int onednn_major, onednn_minor, onednn_patch;
};
CpuCapabilities cpu_capabilities();

}  // namespace mantissa
