// Unary ops and the softmax backward on oneDNN's eltwise and softmax primitives: vectorized erf, tanh
// and the rest, which plain loops get only with fast-math. Used for contiguous f32 and bf16 tensors
// (computed in f32 inside oneDNN, rounded once) where oneDNN runs the dtype on this CPU (onednn_probe.cpp);
// f16, strided views and bf16 on AVX2-only CPUs take the f32 loops instead.
//
// Exceptions, found by the parity tests: oneDNN 2.6's f32 gelu_erf loses accuracy for negative inputs
// (relative error up to ~3e-6, the 1 + erf cancellation): far below bf16's resolution, so bf16 uses
// oneDNN for its forward and f32 the accurate loop (its backward is the loop in every dtype: faster).
// gelu_tanh too is the loop in f32: oneDNN's 1 + tanh cancels the same way and gives 0 below x = -9
// where the value is still 1e-37 (CpuMath's per-element test). Its relu, exp (forward and backward),
// softmax forward and log-softmax backward turn NaN (and a softmax row's inf) into numbers, where the
// reference keeps NaN (and its f32 log-softmax backward is ~50 ulps off), and its pow and relu backward
// disagree with the reference on infinities: those run on mantissa's loops in every dtype.

#include "cpu_kernels.h"
#include "onednn_context.h"

namespace mantissa::detail {
namespace {

using dnnl::algorithm;

struct EltwiseAlg {
  algorithm alg;
  float alpha, beta;
};

EltwiseAlg eltwise_alg(UnaryOp op, double a) {
  const auto alpha = static_cast<float>(a);
  switch (op) {
    case UnaryOp::neg: return {algorithm::eltwise_linear, -1.0f, 0.0f};
    case UnaryOp::abs: return {algorithm::eltwise_abs, 0.0f, 0.0f};
    case UnaryOp::add_scalar: return {algorithm::eltwise_linear, 1.0f, alpha};
    case UnaryOp::mul_scalar: return {algorithm::eltwise_linear, alpha, 0.0f};
    case UnaryOp::pow_scalar: return {algorithm::eltwise_pow, 1.0f, alpha};
    case UnaryOp::exp: return {algorithm::eltwise_exp, 0.0f, 0.0f};
    case UnaryOp::log: return {algorithm::eltwise_log, 0.0f, 0.0f};
    case UnaryOp::sqrt: return {algorithm::eltwise_sqrt, 0.0f, 0.0f};
    case UnaryOp::relu: return {algorithm::eltwise_relu, 0.0f, 0.0f};
    case UnaryOp::gelu: return {algorithm::eltwise_gelu_erf, 0.0f, 0.0f};
    case UnaryOp::silu: return {algorithm::eltwise_swish, 1.0f, 0.0f};
    case UnaryOp::tanh: return {algorithm::eltwise_tanh, 0.0f, 0.0f};
    case UnaryOp::sigmoid: return {algorithm::eltwise_logistic, 0.0f, 0.0f};
    case UnaryOp::gelu_tanh: return {algorithm::eltwise_gelu_tanh, 0.0f, 0.0f};
  }
  return {algorithm::eltwise_linear, 1.0f, 0.0f};
}

// The ops whose f32 values oneDNN computes less accurately than mantissa's loop (above).
bool f32_loop_only(UnaryOp op) { return op == UnaryOp::gelu || op == UnaryOp::gelu_tanh; }

bool usable(OnednnPrimitive kind, std::initializer_list<const Tensor*> ts) {
  const DType t = (*ts.begin())->dtype();
  if ((t != DType::f32 && t != DType::bf16) || !onednn_supports(kind, t)) return false;
  for (const Tensor* x : ts) {
    if (x->dtype() != t || !x->is_contiguous() || x->numel() == 0) return false;
  }
  return true;
}

dnnl::memory::desc flat_desc(const Tensor& t) {
  return dnnl::memory::desc({t.numel()}, onednn_type(t.dtype()), dnnl::memory::format_tag::a);
}

std::string eltwise_key(const char* kind, const EltwiseAlg& e, const Tensor& t) {
  PrimitiveKey k(kind);
  k.add(static_cast<std::int64_t>(e.alg)).add(static_cast<double>(e.alpha)).add(static_cast<double>(e.beta));
  k.add(static_cast<std::int64_t>(t.dtype())).add(t.numel());
  return k.str();
}

dnnl::eltwise_forward::primitive_desc forward_pd(const EltwiseAlg& e, const dnnl::memory::desc& md) {
  return dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, e.alg, md, e.alpha, e.beta), onednn_engine());
}

}  // namespace

bool onednn_unary(UnaryOp op, double alpha, const Tensor& x, const Tensor& out) {
  if (!usable(OnednnPrimitive::eltwise, {&x, &out}) || (f32_loop_only(op) && x.dtype() == DType::f32)) return false;
  // oneDNN 2.6's relu and exp turn NaN into 0 or a number; mantissa's loops keep it NaN.
  if (op == UnaryOp::relu || op == UnaryOp::exp) return false;
  const EltwiseAlg e = eltwise_alg(op, alpha);
  const dnnl::memory::desc md = flat_desc(x);
  const dnnl::primitive prim =
      cached_primitive(eltwise_key("eltwise_fwd", e, x), [&] { return dnnl::eltwise_forward(forward_pd(e, md)); });
  dnnl::engine& eng = onednn_engine();
  execute_timed(prim, {{DNNL_ARG_SRC, dnnl::memory(md, eng, x.data())}, {DNNL_ARG_DST, dnnl::memory(md, eng, out.data())}});
  return true;
}

bool onednn_unary_backward(UnaryOp op, double alpha, const Tensor& x, const Tensor& grad_y, const Tensor& grad_x) {
  if (!usable(OnednnPrimitive::eltwise, {&x, &grad_y, &grad_x}) || (f32_loop_only(op) && x.dtype() == DType::f32)) return false;
  // exp's backward, like its forward, makes NaN a number; pow's makes NaN of x = +-inf; relu's
  // multiplies the gradient by 0 where x <= 0 (NaN for an inf gradient, where PyTorch passes 0).
  if (op == UnaryOp::exp || op == UnaryOp::pow_scalar || op == UnaryOp::relu) return false;
  // The erf GELU's gradient on bf16 rows: mantissa's loop (one exp, cpu/unary_math.h) ran a gpt-small
  // bf16 step's four in 5.7-5.9 ms where oneDNN's took 3.5-11.1 (five alternations), and keeps its digits.
  if (op == UnaryOp::gelu) return false;
  const EltwiseAlg e = eltwise_alg(op, alpha);
  const dnnl::memory::desc md = flat_desc(x);
  const dnnl::primitive prim = cached_primitive(eltwise_key("eltwise_bwd", e, x), [&] {
    return dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(e.alg, md, md, e.alpha, e.beta), onednn_engine(), forward_pd(e, md)));
  });
  dnnl::engine& eng = onednn_engine();
  execute_timed(prim, {{DNNL_ARG_SRC, dnnl::memory(md, eng, x.data())},
                       {DNNL_ARG_DIFF_DST, dnnl::memory(md, eng, grad_y.data())},
                       {DNNL_ARG_DIFF_SRC, dnnl::memory(md, eng, grad_x.data())}});
  return true;
}

namespace {

std::string softmax_key(const Tensor& x) {
  PrimitiveKey k("softmax_bwd");
  k.add(static_cast<std::int64_t>(x.dtype())).add(x.size(0)).add(x.size(1));
  return k.str();
}

}  // namespace

bool onednn_softmax_backward(const Tensor& y, const Tensor& grad_y, const Tensor& grad_x, bool log) {
  // Log-softmax's backward: ~50 ulps off in f32, and NaN rows come out as numbers in bf16.
  if (!usable(OnednnPrimitive::softmax, {&y, &grad_y, &grad_x}) || log) return false;
  const dnnl::memory::desc md = memory_desc(y);
  const dnnl::primitive prim = cached_primitive(softmax_key(y), [&] {
    const dnnl::softmax_v2_forward::primitive_desc hint(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training, algorithm::softmax_accurate, md, md, 1),
        onednn_engine());
    return dnnl::softmax_v2_backward(dnnl::softmax_v2_backward::primitive_desc(
        dnnl::softmax_v2_backward::desc(algorithm::softmax_accurate, md, md, md, 1), onednn_engine(), hint));
  });
  dnnl::engine& eng = onednn_engine();
  execute_timed(prim, {{DNNL_ARG_DST, dnnl::memory(md, eng, y.data())},
                       {DNNL_ARG_DIFF_DST, dnnl::memory(md, eng, grad_y.data())},
                       {DNNL_ARG_DIFF_SRC, dnnl::memory(md, eng, grad_x.data())}});
  return true;
}

}  // namespace mantissa::detail
