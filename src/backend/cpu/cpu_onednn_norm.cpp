// Layer norm on oneDNN's layer_normalization primitives, for contiguous f32 and bf16 tensors with f32
// scale and shift (computed in f32, rounded once), where oneDNN runs the dtype on this CPU (else the
// loops of cpu_norm.cpp). oneDNN keeps the variance where mantissa's kernels
// keep rstd = 1 / sqrt(var + eps): the two are converted in a pass over the rows, which is tiny next to
// the normalization.
#include <cmath>
#include <vector>

#include "cpu_kernels.h"
#include "onednn_context.h"

namespace mantissa::detail {
namespace {

using dnnl::memory;
const auto kFlags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

bool usable(const Tensor& x, const Tensor& gamma, const Tensor& other) {
  return (x.dtype() == DType::f32 || x.dtype() == DType::bf16) && onednn_supports(OnednnPrimitive::layer_norm, x.dtype()) &&
         x.is_contiguous() && other.dtype() == x.dtype() &&
         other.is_contiguous() && gamma.dtype() == DType::f32 && gamma.is_contiguous() && x.numel() > 0;
}

std::string key(const char* kind, const Tensor& x, double eps) {
  PrimitiveKey k(kind);
  k.add(static_cast<std::int64_t>(x.dtype())).add(x.size(0)).add(x.size(1)).add(eps);
  return k.str();
}

dnnl::layer_normalization_forward::primitive_desc forward_pd(const memory::desc& data, const memory::desc& stats,
                                                             double eps) {
  return dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data, stats,
                                              static_cast<float>(eps), kFlags),
      onednn_engine());
}

}  // namespace

bool onednn_layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  if (!usable(x, gamma, y) || beta.dtype() != DType::f32 || !beta.is_contiguous()) return false;
  const memory::desc data = memory_desc(x);
  const memory::desc stats({x.size(0)}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc param({x.size(1)}, memory::data_type::f32, memory::format_tag::a);
  const dnnl::primitive prim = cached_primitive(key("lnorm_fwd", x, eps), [&] {
    return dnnl::layer_normalization_forward(forward_pd(data, stats, eps));
  });
  dnnl::engine& eng = onednn_engine();
  execute_timed(prim, {{DNNL_ARG_SRC, memory(data, eng, x.data())},
                       {DNNL_ARG_DST, memory(data, eng, y.data())},
                       {DNNL_ARG_SCALE, memory(param, eng, gamma.data())},
                       {DNNL_ARG_SHIFT, memory(param, eng, beta.data())},
                       {DNNL_ARG_MEAN, memory(stats, eng, mean.data())},
                       {DNNL_ARG_VARIANCE, memory(stats, eng, rstd.data())}});
  float* r = rstd.data_as<float>();
  for (std::int64_t i = 0; i < x.size(0); ++i) r[i] = 1.0f / std::sqrt(r[i] + static_cast<float>(eps));
  return true;
}

bool onednn_layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                const Tensor& grad_y, const Tensor& grad_x, const Tensor& grad_gamma,
                                const Tensor& grad_beta, double eps) {
  if (!usable(x, gamma, grad_y) || grad_x.dtype() != x.dtype() || !grad_x.is_contiguous()) return false;
  const memory::desc data = memory_desc(x);
  const memory::desc stats({x.size(0)}, memory::data_type::f32, memory::format_tag::a);
  const memory::desc param({x.size(1)}, memory::data_type::f32, memory::format_tag::a);
  const dnnl::primitive prim = cached_primitive(key("lnorm_bwd", x, eps), [&] {
    return dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(
        dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, data, data, stats, static_cast<float>(eps),
                                                 kFlags),
        onednn_engine(), forward_pd(data, stats, eps)));
  });
  // The variance back from rstd, in scratch; oneDNN 2.6 also asks for a shift it does not use.
  std::vector<float> var(static_cast<std::size_t>(x.size(0)));
  std::vector<float> unused_shift(static_cast<std::size_t>(x.size(1)), 0.0f);
  const float* r = rstd.data_as<float>();
  for (std::size_t i = 0; i < var.size(); ++i) var[i] = 1.0f / (r[i] * r[i]) - static_cast<float>(eps);
  dnnl::engine& eng = onednn_engine();
  execute_timed(prim, {{DNNL_ARG_SRC, memory(data, eng, x.data())},
                       {DNNL_ARG_DIFF_DST, memory(data, eng, grad_y.data())},
                       {DNNL_ARG_DIFF_SRC, memory(data, eng, grad_x.data())},
                       {DNNL_ARG_MEAN, memory(stats, eng, mean.data())},
                       {DNNL_ARG_VARIANCE, memory(stats, eng, var.data())},
                       {DNNL_ARG_SCALE, memory(param, eng, gamma.data())},
                       {DNNL_ARG_SHIFT, memory(param, eng, unused_shift.data())},
                       {DNNL_ARG_DIFF_SCALE, memory(param, eng, grad_gamma.data())},
                       {DNNL_ARG_DIFF_SHIFT, memory(param, eng, grad_beta.data())}});
  return true;
}

}  // namespace mantissa::detail
