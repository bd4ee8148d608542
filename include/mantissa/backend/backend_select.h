// Which kernels run ops on the CPU: the oneDNN backend (default, fast) or the reference backend (plain
// loops in f64/f32, the oracle the tests compare with).
#pragma once

#include "mantissa/core/dtype.h"

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

// The oneDNN primitive kinds the CPU backend runs ops on.
enum class OnednnPrimitive : unsigned char { matmul, convolution, eltwise, layer_norm, softmax, reorder };
inline constexpr OnednnPrimitive kOnednnPrimitives[] = {OnednnPrimitive::matmul,     OnednnPrimitive::convolution,
                                                       OnednnPrimitive::eltwise,    OnednnPrimitive::layer_norm,
                                                       OnednnPrimitive::softmax,    OnednnPrimitive::reorder};
const char* onednn_primitive_name(OnednnPrimitive kind);

// Whether oneDNN runs `kind` with every operand in `t` on this CPU, probed once (for reorder: whether
// it moves every bit pattern untouched). Where it does not, the CPU backend takes a fallback with the
// same numbers (see cpu_path); ONEDNN_MAX_CPU_ISA caps what oneDNN may use.
bool onednn_supports(OnednnPrimitive kind, DType t);

// The path the CPU backend takes here for `kind`'s ops in `t`, in a few words, for `mantissa info`.
const char* cpu_path(OnednnPrimitive kind, DType t);

struct OnednnVersion {
  int major, minor, patch;
};
OnednnVersion onednn_version();

}  // namespace mantissa
