// Self-attention as one fused kernel, where a device's backend has one (the CUDA backend: cuDNN's fused
// attention, through a plugin). self_attention (src/ops/attention.cpp) asks for it first and otherwise
// composes products and the attention softmax, which every device has. Registered by the backend at its
// registration, like the kernels of the registry; not a registry kernel because the reference and the
// CPU have no fused form (their oracle is the composition).
#pragma once

#include <cstdint>
#include <string>

#include "mantissa/core/tensor.h"

namespace mantissa::detail {

struct FusedAttention {
  // Whether qkv [B, T, 3 H D] (contiguous, H heads of width D; q, k and v of a token side by side) runs
  // fused with this mask and scale; if not, why, in `why`. Prepares what the calls need.
  bool (*supports)(const Tensor& qkv, std::int64_t heads, bool causal, double scale, std::string& why) = nullptr;
  // out [B, T, H D] (contiguous, qkv's dtype); stats [B, H, T] f32, the softmax's statistics for backward.
  void (*forward)(const Tensor& qkv, std::int64_t heads, bool causal, double scale, const Tensor& out,
                  const Tensor& stats) = nullptr;
  // grad_out contiguous in qkv's dtype; grad_qkv laid out as qkv.
  void (*backward)(const Tensor& qkv, const Tensor& out, const Tensor& grad_out, const Tensor& stats,
                   std::int64_t heads, bool causal, double scale, const Tensor& grad_qkv) = nullptr;
};

void set_fused_attention(DeviceType type, const FusedAttention& fused);
// The device's fused attention, or null where it has none.
const FusedAttention* fused_attention(DeviceType type);

}  // namespace mantissa::detail
