// Which oneDNN primitives run with which dtype on this CPU, asked once per (kind, dtype) at first use.
// oneDNN 2.6 implements bf16 only where the CPU has AVX-512 (AVX512-BF16 or AMX natively, AVX512BW by
// emulation); on an AVX2-only CPU, or with ONEDNN_MAX_CPU_ISA capped below AVX-512, creating a bf16
// primitive descriptor throws. The CPU backend asks here before it takes a oneDNN path and otherwise runs
// the fallback each caller documents (f32 primitives on converted blocks, or mantissa's own loops), so
// bf16 and f16 work on every x86-64 CPU. Reorders are probed for more than existence: a same-dtype copy
// must move every 16-bit pattern untouched, which oneDNN's AVX2 reorder does not (it converts through f32).
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mantissa/backend/backend_select.h"
#include "onednn_context.h"

namespace mantissa::detail {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dnnl::algorithm;

bool probe_matmul(DType t) {
  const memory::desc md({2, 16, 16}, onednn_type(t), tag::abc);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), onednn_engine());
  return true;
}

bool probe_convolution(DType t) {
  const auto dt = onednn_type(t);
  const memory::desc src({1, 16, 8, 8}, dt, tag::nchw);
  const memory::desc w({16, 16, 3, 3}, dt, tag::oihw);
  const dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, algorithm::convolution_direct, src, w,
                                           src, {1, 1}, {0, 0}, {1, 1}, {1, 1});
  const dnnl::convolution_forward::primitive_desc fwd(fd, onednn_engine());
  dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algorithm::convolution_direct, src, w, src, {1, 1}, {0, 0}, {1, 1},
                                            {1, 1}),
      onednn_engine(), fwd);
  dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, src, w, src, {1, 1}, {0, 0}, {1, 1},
                                               {1, 1}),
      onednn_engine(), fwd);
  return true;
}

bool probe_eltwise(DType t) {
  const memory::desc md({64}, onednn_type(t), tag::a);
  const dnnl::eltwise_forward::primitive_desc fwd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm::eltwise_tanh, md, 0.0f, 0.0f),
      onednn_engine());
  dnnl::eltwise_backward::primitive_desc(dnnl::eltwise_backward::desc(algorithm::eltwise_tanh, md, md, 0.0f, 0.0f),
                                         onednn_engine(), fwd);
  return true;
}

bool probe_layer_norm(DType t) {
  const memory::desc data({4, 64}, onednn_type(t), tag::ab);
  const memory::desc stats({4}, memory::data_type::f32, tag::a);
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const dnnl::layer_normalization_forward::primitive_desc fwd(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data, stats, 1e-5f, flags),
      onednn_engine());
  dnnl::layer_normalization_backward::primitive_desc(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, data, data, stats, 1e-5f, flags),
      onednn_engine(), fwd);
  return true;
}

bool probe_softmax(DType t) {
  const memory::desc md({4, 64}, onednn_type(t), tag::ab);
  const dnnl::softmax_v2_forward::primitive_desc fwd(
      dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training, algorithm::softmax_accurate, md, md, 1),
      onednn_engine());
  dnnl::softmax_v2_backward::primitive_desc(
      dnnl::softmax_v2_backward::desc(algorithm::softmax_accurate, md, md, md, 1), onednn_engine(), fwd);
  return true;
}

// A transposing reorder of every bit pattern of the dtype's width: f32 by its existence (its reorder
// copies, it converts nothing); 16-bit types must come out bit for bit, signalling NaNs and all.
bool probe_reorder(DType t) {
  if (t == DType::f32) {
    dnnl::reorder::primitive_desc(onednn_engine(), memory::desc({16, 16}, memory::data_type::f32, tag::ab),
                                  onednn_engine(), memory::desc({16, 16}, memory::data_type::f32, tag::ba));
    return true;
  }
  std::vector<std::uint16_t> src(1 << 16), dst(1 << 16, 0);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint16_t>(i);
  const memory::desc from({256, 256}, onednn_type(t), tag::ab);
  const memory::desc to({256, 256}, onednn_type(t), tag::ba);
  dnnl::reorder prim(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to));
  memory fm(from, onednn_engine(), src.data());
  memory tm(to, onednn_engine(), dst.data());
  prim.execute(onednn_stream(), fm, tm);
  onednn_stream().wait();
  for (std::size_t r = 0; r < 256; ++r) {
    for (std::size_t c = 0; c < 256; ++c) {
      if (dst[c * 256 + r] != src[r * 256 + c]) return false;
    }
  }
  return true;
}

bool probe(OnednnPrimitive kind, DType t) {
  try {
    switch (kind) {
      case OnednnPrimitive::matmul: return probe_matmul(t);
      case OnednnPrimitive::convolution: return probe_convolution(t);
      case OnednnPrimitive::eltwise: return probe_eltwise(t);
      case OnednnPrimitive::layer_norm: return probe_layer_norm(t);
      case OnednnPrimitive::softmax: return probe_softmax(t);
      case OnednnPrimitive::reorder: return probe_reorder(t);
    }
  } catch (const dnnl::error&) {
  }
  return false;
}

constexpr std::size_t kKinds = std::size(kOnednnPrimitives);
constexpr std::array<DType, 3> kProbedTypes{DType::f32, DType::bf16, DType::f16};

}  // namespace
}  // namespace mantissa::detail

namespace mantissa {

const char* onednn_primitive_name(OnednnPrimitive kind) {
  switch (kind) {
    case OnednnPrimitive::matmul: return "matmul";
    case OnednnPrimitive::convolution: return "convolution";
    case OnednnPrimitive::eltwise: return "eltwise";
    case OnednnPrimitive::layer_norm: return "layer_norm";
    case OnednnPrimitive::softmax: return "softmax";
    case OnednnPrimitive::reorder: return "reorder";
  }
  return "?";
}

bool onednn_supports(OnednnPrimitive kind, DType t) {
  // One row per kind, one column per probed dtype, filled on first use (thread-safe static init).
  static const auto table = [] {
    std::array<std::array<bool, detail::kProbedTypes.size()>, detail::kKinds> rows{};
    for (std::size_t k = 0; k < detail::kKinds; ++k) {
      for (std::size_t d = 0; d < detail::kProbedTypes.size(); ++d) {
        rows[k][d] = detail::probe(kOnednnPrimitives[k], detail::kProbedTypes[d]);
      }
    }
    return rows;
  }();
  for (std::size_t d = 0; d < detail::kProbedTypes.size(); ++d) {
    if (detail::kProbedTypes[d] == t) return table[static_cast<std::size_t>(kind)][d];
  }
  return false;
}

const char* cpu_path(OnednnPrimitive kind, DType t) {
  // Eltwise, layer norm and softmax take oneDNN for f32 and bf16 only: f16 runs on the loops everywhere.
  const bool loops_only = t == DType::f16 && kind != OnednnPrimitive::matmul &&
                          kind != OnednnPrimitive::convolution && kind != OnednnPrimitive::reorder;
  // A same-dtype f16 copy moves its bits as bf16.
  const DType probed = kind == OnednnPrimitive::reorder && t == DType::f16 ? DType::bf16 : t;
  const bool native = !loops_only && onednn_supports(kind, probed);
  switch (kind) {
    case OnednnPrimitive::matmul:
      return native ? "oneDNN" : "oneDNN f32 on blocks converted to f32, rounded once";
    case OnednnPrimitive::convolution:
      return native ? "oneDNN" : "oneDNN f32, operands converted as they change layout, rounded once";
    case OnednnPrimitive::eltwise:
      return native ? "oneDNN, rounded once (relu, exp, pow: loops)" : "loops in f32, rounded once";
    case OnednnPrimitive::layer_norm:
      return native ? "oneDNN, rounded once" : "loops in f32, rounded once";
    case OnednnPrimitive::softmax:
      return native ? "backward on oneDNN, forward on loops" : "loops in f32, rounded once";
    case OnednnPrimitive::reorder:
      return native ? "oneDNN reorder, bit for bit" : "strided loop, bit for bit";
  }
  return "?";
}

OnednnVersion onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return {v->major, v->minor, v->patch};
}

}  // namespace mantissa
