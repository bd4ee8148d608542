// The CUDA backend's kernels that have another way to the same result, each switched by one environment
// variable read once: the default way, and the other one a device check turns to, to time both or to
// route around a kernel that crashes or hangs on a GPU it never ran on (scripts/gpu-check.sh switches
// them; docs/cuda.md). One table, so that the check, the docs and the code name the same switches:
// tests/unit/kernel_ways_test.cpp fails where a CUDA source reads the environment another way, or where
// gpu-check.sh or docs/cuda.md lacks a switch.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

namespace mantissa::detail::cuda {

enum class Way {
  fused_attention,          // cuDNN's fused attention (the plugin) for attention's forward and backward
  fp8_tensor_cores,         // FP8 products on fp8 tensor cores (compute capability 8.9 and up)
  gelu_epilogue,            // the MLP's GELU inside cuBLASLt's products (forward and backward)
  bias_gradient_epilogue,   // the bias gradient by cuBLASLt's BGRADB epilogue of the weight-gradient product
  fused_layer_norm_backward,  // layer norm's backward in one pass (grad_x and the parameters' sums)
  fused_add_layer_norm,     // the residual add inside the layer norm's packed pass
  packed_cross_entropy,     // the cross entropy reading each row of logits once (packed 16-byte loads)
};

struct WaySwitch {
  Way way;
  std::string_view variable;  // MANTISSA_...
  std::string_view other;     // the value that turns the other way on
  std::string_view otherwise;  // what runs then
};

inline constexpr WaySwitch kWaySwitches[] = {
    {Way::fused_attention, "MANTISSA_ATTENTION", "unfused", "attention as products and a softmax"},
    {Way::fp8_tensor_cores, "MANTISSA_FP8_PRODUCTS", "emulated", "FP8 products as bf16 products of the fp8 values"},
    {Way::gelu_epilogue, "MANTISSA_GELU_EPILOGUE", "off", "the product, then the GELU's own kernels"},
    {Way::bias_gradient_epilogue, "MANTISSA_BIAS_GRADIENT", "separate", "a plain weight-gradient product and the bias's row sums"},
    {Way::fused_layer_norm_backward, "MANTISSA_LAYER_NORM_BACKWARD", "two-pass", "grad_x by one kernel, the sums by another"},
    {Way::fused_add_layer_norm, "MANTISSA_ADD_LAYER_NORM", "separate", "the add's kernel, then the layer norm's"},
    {Way::packed_cross_entropy, "MANTISSA_CROSS_ENTROPY", "unpacked", "the row-by-element kernels, which read a row twice"},
};

// Whether `way` is on: its variable unset or set to anything but the other way's value. Read at each
// call; callers keep it (a static, or an atomic that the library's setters may change).
inline bool way_on(Way way) {
  for (const WaySwitch& s : kWaySwitches) {
    if (s.way != way) continue;
    const char* v = std::getenv(std::string(s.variable).c_str());
    return v == nullptr || std::string_view(v) != s.other;
  }
  return true;
}

}  // namespace mantissa::detail::cuda
