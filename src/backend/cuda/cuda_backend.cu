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
  register_kernel<kernel::Softmax>(Impl::cuda, cuda::softmax);
  register_kernel<kernel::SoftmaxBackward>(Impl::cuda, cuda::softmax_backward);
  register_kernel<kernel::AttentionSoftmax>(Impl::cuda, cuda::attention_softmax);
  register_kernel<kernel::AttentionSoftmaxBackward>(Impl::cuda, cuda::attention_softmax_backward);
  register_kernel<kernel::CrossEntropy>(Impl::cuda, cuda::cross_entropy);
  register_kernel<kernel::CrossEntropyBackward>(Impl::cuda, cuda::cross_entropy_backward);
  register_kernel<kernel::LayerNorm>(Impl::cuda, cuda::layer_norm);
  register_kernel<kernel::LayerNormBackward>(Impl::cuda, cuda::layer_norm_backward);
  register_kernel<kernel::Reduce>(Impl::cuda, cuda::reduce);
  register_kernel<kernel::Embedding>(Impl::cuda, cuda::embedding);
  register_kernel<kernel::EmbeddingBackward>(Impl::cuda, cuda::embedding_backward);
}

}  // namespace mantissa::detail
