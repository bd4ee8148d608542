// The CUDA backend's registration: its kernels for Impl::cuda in the registry (registry.cpp calls this
// once, in builds with CUDA). Kernels not listed here are errors naming the kernel and cuda:0.
#include "../registry.h"
#include "cuda_kernels.h"

namespace mantissa::detail {

void register_cuda_kernels() {
  cuda::keep_allocator_registration();
  set_device_kernel_clock(DeviceType::cuda, cuda::kernel_clock());
  cuda::register_fused_attention();
  register_kernel<kernel::Copy>(Impl::cuda, cuda::copy);
  register_kernel<kernel::Binary>(Impl::cuda, cuda::binary);
  register_kernel<kernel::Unary>(Impl::cuda, cuda::unary);
  register_kernel<kernel::UnaryBackward>(Impl::cuda, cuda::unary_backward);
  register_kernel<kernel::ScaleAndCheck>(Impl::cuda, cuda::scale_and_check);
  register_kernel<kernel::SgdUpdate>(Impl::cuda, cuda::sgd_update);
  register_kernel<kernel::AdamUpdate>(Impl::cuda, cuda::adam_update);
  register_kernel<kernel::RoundInto>(Impl::cuda, cuda::round_into);
  register_kernel<kernel::Matmul>(Impl::cuda, cuda::matmul);
  register_kernel<kernel::MatmulAccumulate>(Impl::cuda, cuda::matmul_accumulate);
  register_kernel<kernel::MatmulRowSums>(Impl::cuda, cuda::matmul_row_sums);
  register_kernel<kernel::MatmulGelu>(Impl::cuda, cuda::matmul_gelu);
  register_kernel<kernel::MatmulGeluBackward>(Impl::cuda, cuda::matmul_gelu_backward);
  register_kernel<kernel::Softmax>(Impl::cuda, cuda::softmax);
  register_kernel<kernel::SoftmaxBackward>(Impl::cuda, cuda::softmax_backward);
  register_kernel<kernel::AttentionSoftmax>(Impl::cuda, cuda::attention_softmax);
  register_kernel<kernel::AttentionSoftmaxBackward>(Impl::cuda, cuda::attention_softmax_backward);
  register_kernel<kernel::CrossEntropy>(Impl::cuda, cuda::cross_entropy);
  register_kernel<kernel::CrossEntropyBackward>(Impl::cuda, cuda::cross_entropy_backward);
  register_kernel<kernel::LayerNorm>(Impl::cuda, cuda::layer_norm);
  register_kernel<kernel::AddLayerNorm>(Impl::cuda, cuda::add_layer_norm);
  register_kernel<kernel::LayerNormBackward>(Impl::cuda, cuda::layer_norm_backward);
  register_kernel<kernel::Reduce>(Impl::cuda, cuda::reduce);
  register_kernel<kernel::Embedding>(Impl::cuda, cuda::embedding);
  register_kernel<kernel::EmbeddingBackward>(Impl::cuda, cuda::embedding_backward);
  register_kernel<kernel::Pool2d>(Impl::cuda, cuda::pool2d);
  register_kernel<kernel::Pool2dBackward>(Impl::cuda, cuda::pool2d_backward);
  register_kernel<kernel::BatchNorm>(Impl::cuda, cuda::batch_norm);
  register_kernel<kernel::BatchNormBackward>(Impl::cuda, cuda::batch_norm_backward);
  register_kernel<kernel::Numerics>(Impl::cuda, cuda::numerics);
  register_kernel<kernel::ScaledMatmul>(Impl::cuda, cuda::scaled_matmul);
  register_kernel<kernel::Fp8Amax>(Impl::cuda, cuda::fp8_amax);
  register_kernel<kernel::Fp8Quantize>(Impl::cuda, cuda::fp8_quantize);
  register_kernel<kernel::Fp8QuantizeCurrent>(Impl::cuda, cuda::fp8_quantize_current);
  register_kernel<kernel::BlockQuantize>(Impl::cuda, cuda::block_quantize);
  register_kernel<kernel::HadamardRows>(Impl::cuda, cuda::hadamard_rows);
  register_kernel<kernel::LstmCell>(Impl::cuda, cuda::lstm_cell);
  register_kernel<kernel::LstmCellBackward>(Impl::cuda, cuda::lstm_cell_backward);
#ifdef MANTISSA_WITH_CUDNN
  register_kernel<kernel::Conv2d>(Impl::cuda, cuda::conv2d);
  register_kernel<kernel::Conv2dBackwardData>(Impl::cuda, cuda::conv2d_backward_data);
  register_kernel<kernel::Conv2dBackwardWeights>(Impl::cuda, cuda::conv2d_backward_weights);
#endif
}

}  // namespace mantissa::detail
