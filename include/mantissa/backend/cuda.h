// What this build and this machine offer for NVIDIA GPUs: whether the CUDA backend was compiled in, the
// GPUs the driver reports (or why there is none), and which kernel families run on them in which dtypes.
// Tensors go to a GPU with Tensor::to(Device{DeviceType::cuda, 0}) or ops' to_device(); a kernel the
// CUDA backend does not have yet is an error naming it, never a silent fall back to the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mantissa {

struct CudaDeviceInfo {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  std::int64_t memory_bytes = 0;
  int multiprocessors = 0;
};

struct CudaInfo {
  bool built = false;          // this build has the CUDA backend
  std::string versions;        // "CUDA runtime 13.0, cuBLASLt 130100"
  std::string architectures;   // what the kernels were compiled for ("80;90a-real")
  std::vector<CudaDeviceInfo> devices;
  std::string unavailable;     // why no GPU can be used here; empty when one can
  // The kernel families the CUDA backend runs, each with its dtypes.
  std::vector<std::pair<std::string, std::string>> kernels;
  // Self-attention's fused kernel (cuDNN's, through mantissa's plugin), or why attention runs as
  // products and a softmax.
  std::string fused_attention;
};

CudaInfo cuda_info();
// Built, and at least one GPU usable.
bool cuda_available();
// Waits until the GPU has finished the work queued so far (for timing); nothing without a GPU.
void cuda_synchronize();
// Whether f32 products may use TF32 tensor cores (10-bit mantissa inputs, f32 accumulation); off by
// default, as in PyTorch since 1.12.
void set_cuda_allow_tf32(bool allow);
bool cuda_allow_tf32();
// Whether self_attention on a GPU may run cuDNN's fused attention (bf16 and fp16, head widths that are
// multiples of 8 up to 128); on by default unless the environment has MANTISSA_ATTENTION=unfused. Off,
// or where it is not available, attention runs as products and a softmax (CudaInfo::fused_attention
// says why).
void set_cuda_fused_attention(bool allow);
bool cuda_fused_attention();
// Whether FP8's products may run on fp8 tensor cores (compute capability 8.9 and up; the per-tensor
// recipes, whose operands lie on the fp8 grids, at sizes that are multiples of 16): on by default unless
// the environment has MANTISSA_FP8_PRODUCTS=emulated. Off, or elsewhere, they run as bf16 products of
// the same values (the CPU's way), with the same numbers up to the order of the f32 sums.
void set_cuda_fp8_tensor_cores(bool allow);
bool cuda_fp8_tensor_cores();
// How many FP8 products have run on fp8 tensor cores in this process (0 without a GPU): whether a run's
// FP8 used them, or fell back to the bf16 products.
std::int64_t cuda_fp8_products();

}  // namespace mantissa
