// Convolution on oneDNN: forward, backward data and backward weights, f32 and bf16 (accumulating in
// f32), over contiguous NCHW tensors. f16, which oneDNN 2.6 cannot convolve on CPUs without f16
// arithmetic, goes through f32 copies of the operands and one rounding of the result.
#include <sstream>
#include <stdexcept>

#include "cpu_kernels.h"
#include "mantissa/ops/ops.h"
#include "onednn_context.h"

namespace mantissa::detail {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

struct ConvShapes {
  memory::dims src, weights, dst, strides, dilates, pad_l, pad_r;
};

ConvShapes conv_shapes(const Shape& xs, const Shape& ws, const Shape& os, const Conv2dParams& p) {
  ConvShapes s;
  s.src = {xs[0], xs[1], xs[2], xs[3]};
  s.dst = {os[0], os[1], os[2], os[3]};
  s.weights = p.groups == 1 ? memory::dims{ws[0], ws[1], ws[2], ws[3]}
                            : memory::dims{p.groups, ws[0] / p.groups, ws[1], ws[2], ws[3]};
  s.strides = {p.stride_h, p.stride_w};
  s.dilates = {p.dilation_h - 1, p.dilation_w - 1};  // oneDNN counts the gaps
  s.pad_l = {p.pad_h, p.pad_w};
  // Right padding that makes the output exactly os (PyTorch's floor division leaves the rest unused).
  s.pad_r = {(os[2] - 1) * p.stride_h + (ws[2] - 1) * p.dilation_h + 1 - xs[2] - p.pad_h,
             (os[3] - 1) * p.stride_w + (ws[3] - 1) * p.dilation_w + 1 - xs[3] - p.pad_w};
  return s;
}

std::string conv_key(const char* kind, const ConvShapes& s, DType t) {
  std::ostringstream k;
  k << kind << int(t);
  for (const memory::dims* d : {&s.src, &s.weights, &s.dst, &s.strides, &s.dilates, &s.pad_l, &s.pad_r}) {
    k << '|';
    for (auto v : *d) k << v << ',';
  }
  return k.str();
}

struct Descs {
  memory::desc src, weights, dst;
};

Descs descs(const ConvShapes& s, DType t, bool grouped) {
  const memory::data_type dt = onednn_type(t);
  return {memory::desc(s.src, dt, tag::nchw), memory::desc(s.weights, dt, grouped ? tag::goihw : tag::oihw),
          memory::desc(s.dst, dt, tag::nchw)};
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvShapes& s, const Descs& d) {
  return dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.src,
                                      d.weights, d.dst, s.strides, s.dilates, s.pad_l, s.pad_r),
      onednn_engine());
}

// The three passes with every operand in one dtype that oneDNN convolves.
enum class Pass { forward, backward_data, backward_weights };

void run(Pass pass, const ConvShapes& s, DType t, bool grouped, void* src, void* weights, void* dst) {
  const Descs d = descs(s, t, grouped);
  const char* names[] = {"conv_fwd", "conv_bwd_data", "conv_bwd_weights"};
  const dnnl::primitive prim = cached_primitive(conv_key(names[static_cast<int>(pass)], s, t), [&]() -> dnnl::primitive {
    const auto fwd = forward_pd(s, d);
    switch (pass) {
      case Pass::forward: return dnnl::convolution_forward(fwd);
      case Pass::backward_data:
        return dnnl::convolution_backward_data(dnnl::convolution_backward_data::primitive_desc(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                                  s.strides, s.dilates, s.pad_l, s.pad_r),
            onednn_engine(), fwd));
      case Pass::backward_weights:
        return dnnl::convolution_backward_weights(dnnl::convolution_backward_weights::primitive_desc(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst,
                                                     s.strides, s.dilates, s.pad_l, s.pad_r),
            onednn_engine(), fwd));
    }
    throw std::logic_error("conv pass");
  });
  dnnl::engine& eng = onednn_engine();
  memory src_m(d.src, eng, src), w_m(d.weights, eng, weights), dst_m(d.dst, eng, dst);
  switch (pass) {
    case Pass::forward:
      execute_timed(prim, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, w_m}, {DNNL_ARG_DST, dst_m}});
      break;
    case Pass::backward_data:
      execute_timed(prim, {{DNNL_ARG_DIFF_DST, dst_m}, {DNNL_ARG_WEIGHTS, w_m}, {DNNL_ARG_DIFF_SRC, src_m}});
      break;
    case Pass::backward_weights:
      execute_timed(prim, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_DIFF_DST, dst_m}, {DNNL_ARG_DIFF_WEIGHTS, w_m}});
      break;
  }
}

// Runs a pass in the operands' dtype, or through f32 copies when oneDNN lacks it (f16 here).
void conv_pass(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  const ConvShapes s = conv_shapes(x.shape(), w.shape(), y.shape(), p);
  const DType t = x.dtype();
  if (onednn_conv_supports(t)) {
    run(pass, s, t, p.groups > 1, x.data(), w.data(), y.data());
    return;
  }
  // The pass writes one operand (y forward, x backward data, w backward weights) from the other two.
  Tensor xf = pass == Pass::backward_data ? Tensor::empty(x.shape(), DType::f32) : contiguous_copy(cast(x, DType::f32));
  Tensor wf = pass == Pass::backward_weights ? Tensor::empty(w.shape(), DType::f32) : contiguous_copy(cast(w, DType::f32));
  Tensor yf = pass == Pass::forward ? Tensor::empty(y.shape(), DType::f32) : contiguous_copy(cast(y, DType::f32));
  run(pass, s, DType::f32, p.groups > 1, xf.data(), wf.data(), yf.data());
  const Tensor& written = pass == Pass::forward ? yf : pass == Pass::backward_data ? xf : wf;
  const Tensor& target = pass == Pass::forward ? y : pass == Pass::backward_data ? x : w;
  cpu_copy(written, target);
}

}  // namespace

void cpu_conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) {
  conv_pass(Pass::forward, x, w, out, p);
}

void cpu_conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) {
  conv_pass(Pass::backward_data, grad_x, w, grad_out, p);
}

void cpu_conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w) {
  conv_pass(Pass::backward_weights, x, grad_w, grad_out, p);
}

}  // namespace mantissa::detail
