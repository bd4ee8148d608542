// The machine's arithmetic peak, measured in the same process as the figure compared with it: long
// runs of independent FMA (f32) and VDPBF16PS (bf16) chains on every thread. Other machines here have
// other CPUs, so a peak is measured, never assumed.
#pragma once

#include <optional>
#include <string>

namespace mantissa::cli {

struct Peak {
  double gflops;
  std::string instruction;  // what was timed, e.g. "vfmadd231ps zmm"
};

// f32 multiply-add peak on `threads` threads (AVX-512, else AVX2 FMA; MANTISSA_ISA=avx2 asks for AVX2).
Peak f32_peak(int threads);
// bf16 dot-product peak (AVX512-BF16), or nothing on CPUs without it or where oneDNN multiplies bf16 in
// f32 (capped with ONEDNN_MAX_CPU_ISA / MANTISSA_ISA): the f32 peak is then the one that applies.
std::optional<Peak> bf16_peak(int threads);
// bf16 tile matrix-multiply peak (AMX), or nothing on CPUs (or kernels) without it. oneDNN uses AMX for
// bf16 matmul where it exists, so that is the peak its bf16 figures compare with.
std::optional<Peak> amx_bf16_peak(int threads);
// Whether AMX bf16 tiles exist and this process may use them.
bool amx_bf16_usable();

}  // namespace mantissa::cli
