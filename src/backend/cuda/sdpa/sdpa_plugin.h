// The C interface of mantissa's fused-attention plugin (libmantissa_cudnn_sdpa.so, cudnn_sdpa.cpp):
// causal or full self-attention forward and backward by cuDNN's fused scaled-dot-product attention,
// built with NVIDIA's header-only cuDNN frontend. It is a plugin, loaded with dlopen at the first
// attention on a GPU (cuda_attention.cpp), because the frontend links cuDNN itself: the library stays
// loadable where cuDNN is not, and falls back to attention as products and a softmax.
//
// Layouts are the self_attention op's: qkv [B, T, 3 H D] (each token's q, k and v side by side), the
// output [B, T, H D], the softmax statistics [B, H, T] in f32 (what backward needs of the forward), and
// the gradient of qkv laid out as qkv. Every function returns 0, or non-zero with a one-line reason in
// `error` (error_size bytes, always terminated).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct MantissaSdpaShape {
  std::int64_t batch, heads, seq, head_dim;
  std::int32_t bf16;    // 1: bf16 tensors, 0: fp16
  std::int32_t causal;  // 1: each query sees the keys up to its own position
  float scale;          // the scores' factor, 1 / sqrt(head_dim)
};

// Builds (once per shape and direction, then cached) cuDNN's plan; its workspace in bytes.
int mantissa_sdpa_prepare(const MantissaSdpaShape* shape, int backward, std::int64_t* workspace_bytes, char* error,
                          std::size_t error_size);

// On `stream` (a cudaStream_t); workspace of the size prepare() gave, or null for 0.
int mantissa_sdpa_forward(const MantissaSdpaShape* shape, const void* qkv, void* out, float* stats, void* workspace,
                          void* stream, char* error, std::size_t error_size);
int mantissa_sdpa_backward(const MantissaSdpaShape* shape, const void* qkv, const void* out, const void* grad_out,
                           const float* stats, void* grad_qkv, void* workspace, void* stream, char* error,
                           std::size_t error_size);

}  // extern "C"
