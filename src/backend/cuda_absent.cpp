// A build without the CUDA backend (no nvcc when it was configured, or MANTISSA_WITH_CUDA=OFF): the
// questions of backend/cuda.h get their honest answers, and tensors on cuda have no allocator.
#include "mantissa/backend/cuda.h"

namespace mantissa {
namespace {
bool tf32_allowed = false;
bool fused_attention_allowed = true;
bool fp8_tensor_cores_allowed = true;
}  // namespace

CudaInfo cuda_info() {
  CudaInfo info;
  info.unavailable = "this build has no CUDA backend (no CUDA compiler was found when it was configured)";
  return info;
}
bool cuda_available() { return false; }
void cuda_synchronize() {}
void set_cuda_allow_tf32(bool allow) { tf32_allowed = allow; }
bool cuda_allow_tf32() { return tf32_allowed; }
void set_cuda_fused_attention(bool allow) { fused_attention_allowed = allow; }
bool cuda_fused_attention() { return fused_attention_allowed; }
void set_cuda_fp8_tensor_cores(bool allow) { fp8_tensor_cores_allowed = allow; }
bool cuda_fp8_tensor_cores() { return fp8_tensor_cores_allowed; }
std::int64_t cuda_fp8_products() { return 0; }

}  // namespace mantissa
