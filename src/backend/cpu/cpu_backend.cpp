// The CPU backend's kernel table: oneDNN for matmul and convolution (in its blocked layouts), and where
// it runs the dtype here (onednn_probe.cpp) for layer norm, most eltwise ops and the softmax backward;
// f32 loops over converted row blocks for the rest (see cpu_kernels.h). run_kernel times each call and
// sends f64 tensors, which oneDNN does not compute, to the reference.
#include "../registry.h"
#include "cpu_kernels.h"

namespace mantissa::detail {
namespace {

// oneDNN where it takes the operands (contiguous, a dtype it runs here), else mantissa's loops.
void unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) {
  if (!onednn_unary(op, alpha, x, out)) cpu_unary(op, alpha, x, out);
}
void unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) {
  if (!onednn_unary_backward(op, alpha, x, grad_y, grad_x)) cpu_unary_backward(op, alpha, x, grad_y, grad_x);
}
void softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) {
  if (!onednn_softmax_backward(y, grad_y, grad_x, log)) cpu_softmax_backward(y, grad_y, grad_x, log);
}
// An f32 input normalized into a narrower output, or a narrower gradient for one (a layer norm whose
// output a product reads, ops/norm.cpp): oneDNN takes one dtype for both, so the output is made in f32
// and rounded once (the gradient widened exactly), as the f32 layer norm and a cast around it would do:
// the same bits either way.
Tensor f32_like(const Tensor& t) { return Tensor::empty(t.shape(), DType::f32, t.device()); }
void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                const Tensor& mean, const Tensor& rstd) {
  if (x.dtype() == DType::f32 && y.dtype() != DType::f32) {
    const Tensor wide = f32_like(y);
    layer_norm(x, gamma, beta, eps, wide, mean, rstd);
    cpu_copy(wide, y);
    return;
  }
  if (!onednn_layer_norm(x, gamma, beta, eps, y, mean, rstd)) cpu_layer_norm(x, gamma, beta, eps, y, mean, rstd);
}
void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma, const Tensor& grad_beta,
                         double eps) {
  if (x.dtype() == DType::f32 && grad_y.dtype() != DType::f32) {
    const Tensor wide = f32_like(grad_y);
    cpu_copy(grad_y, wide);
    layer_norm_backward(x, gamma, mean, rstd, wide, grad_x, grad_gamma, grad_beta, eps);
    return;
  }
  if (!onednn_layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta, eps)) {
    cpu_layer_norm_backward(x, gamma, mean, rstd, grad_y, grad_x, grad_gamma, grad_beta);
  }
}

}  // namespace

void register_cpu_kernels() {
  constexpr Impl cpu = Impl::cpu;
  register_kernel<kernel::Copy>(cpu, cpu_copy);
  register_kernel<kernel::Binary>(cpu, cpu_binary);
  register_kernel<kernel::Unary>(cpu, unary);
  register_kernel<kernel::UnaryBackward>(cpu, unary_backward);
  register_kernel<kernel::Reduce>(cpu, cpu_reduce);
  register_kernel<kernel::Matmul>(cpu, cpu_matmul);
  register_kernel<kernel::MatmulAccumulate>(cpu, cpu_matmul_accumulate);
  register_kernel<kernel::MatmulRowSums>(cpu, cpu_matmul_row_sums);
  register_kernel<kernel::MatmulGelu>(cpu, cpu_matmul_gelu);
  register_kernel<kernel::MatmulGeluBackward>(cpu, cpu_matmul_gelu_backward);
  // oneDNN 2.6's softmax forward turns a row with NaN or inf into numbers: the loop runs it.
  register_kernel<kernel::Softmax>(cpu, cpu_softmax);
  register_kernel<kernel::SoftmaxBackward>(cpu, softmax_backward);
  register_kernel<kernel::CrossEntropy>(cpu, cpu_cross_entropy);
  register_kernel<kernel::CrossEntropyBackward>(cpu, cpu_cross_entropy_backward);
  register_kernel<kernel::LstmCell>(cpu, cpu_lstm_cell);
  register_kernel<kernel::LstmCellBackward>(cpu, cpu_lstm_cell_backward);
  register_kernel<kernel::AttentionSoftmax>(cpu, cpu_attention_softmax);
  register_kernel<kernel::AttentionSoftmaxBackward>(cpu, cpu_attention_softmax_backward);
  register_kernel<kernel::ScaleAndCheck>(cpu, cpu_scale_and_check);
  register_kernel<kernel::Numerics>(cpu, cpu_numerics);
  register_kernel<kernel::SgdUpdate>(cpu, cpu_sgd_update);
  register_kernel<kernel::AdamUpdate>(cpu, cpu_adam_update);
  register_kernel<kernel::RoundInto>(cpu, cpu_round_into);
  register_kernel<kernel::LayerNorm>(cpu, layer_norm);
  register_kernel<kernel::AddLayerNorm>(cpu, kernel::add_then_layer_norm<cpu_binary, layer_norm>);
  register_kernel<kernel::LayerNormBackward>(cpu, layer_norm_backward);
  register_kernel<kernel::BatchNorm>(cpu, cpu_batch_norm);
  register_kernel<kernel::BatchNormBackward>(cpu, cpu_batch_norm_backward);
  register_kernel<kernel::Embedding>(cpu, cpu_embedding);
  register_kernel<kernel::EmbeddingBackward>(cpu, cpu_embedding_backward);
  register_kernel<kernel::Conv2d>(cpu, cpu_conv2d);
  register_kernel<kernel::Conv2dBackwardData>(cpu, cpu_conv2d_backward_data);
  register_kernel<kernel::Conv2dBackwardWeights>(cpu, cpu_conv2d_backward_weights);
  register_kernel<kernel::Pool2d>(cpu, cpu_pool2d);
  register_kernel<kernel::Pool2dBackward>(cpu, cpu_pool2d_backward);
  register_kernel<kernel::Fp8Amax>(cpu, cpu_fp8_amax);
  register_kernel<kernel::Fp8Quantize>(cpu, cpu_fp8_quantize);
  register_kernel<kernel::BlockQuantize>(cpu, cpu_block_quantize);
  register_kernel<kernel::HadamardRows>(cpu, cpu_hadamard_rows);
  register_kernel<kernel::Fp8QuantizeCurrent>(cpu, cpu_fp8_quantize_current);
  register_kernel<kernel::ScaledMatmul>(cpu, cpu_scaled_matmul);
}

}  // namespace mantissa::detail
