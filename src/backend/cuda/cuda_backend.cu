// The CUDA backend's registration: its kernels for Impl::cuda in the registry (registry.cpp calls this
// once, in builds with CUDA). Kernels not listed here are errors naming the kernel and cuda:0.
#include "../registry.h"
#include "cuda_kernels.h"

namespace mantissa::detail {

void register_cuda_kernels() {
  cuda::keep_allocator_registration();
  register_kernel<kernel::Copy>(Impl::cuda, cuda::copy);
  register_kernel<kernel::Binary>(Impl::cuda, cuda::binary);
  register_kernel<kernel::Unary>(Impl::cuda, cuda::unary);
  register_kernel<kernel::UnaryBackward>(Impl::cuda, cuda::unary_backward);
  register_kernel<kernel::ScaleAndCheck>(Impl::cuda, cuda::scale_and_check);
  register_kernel<kernel::SgdUpdate>(Impl::cuda, cuda::sgd_update);
  register_kernel<kernel::AdamUpdate>(Impl::cuda, cuda::adam_update);
  register_kernel<kernel::RoundInto>(Impl::cuda, cuda::round_into);
  register_kernel<kernel::Matmul>(Impl::cuda, cuda::matmul);
}

}  // namespace mantissa::detail
