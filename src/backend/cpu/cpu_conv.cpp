// Convolution on oneDNN: forward, backward data and backward weights, f32 and bf16 (accumulating in
// f32), over contiguous NCHW or channels-last activations. On channels-last ones (nhwc: what the ops
// give the convolution chain where oneDNN convolves the dtype) each primitive reads and writes them in
// place; on NCHW ones it runs in the layouts oneDNN picks (blocked, where its direct and AMX kernels
// are), with the operands reordered from and to NCHW around it (a quarter of the CNN's bf16
// convolution time). A dtype that oneDNN 2.6 cannot convolve here (f16 on CPUs without f16 arithmetic,
// bf16 on AVX2-only CPUs) runs on the f32 primitive, converted on the way in and rounded once on the way
// out.
#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <stdexcept>
#include <string>

#include "../../core/channels_last.h"
#include "cpu_kernels.h"
#include "mantissa/numeric/bulk.h"
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
  PrimitiveKey k(kind);
  k.add(static_cast<std::int64_t>(t));
  for (const memory::dims* d : {&s.src, &s.weights, &s.dst, &s.strides, &s.dilates, &s.pad_l, &s.pad_r}) k.add(*d);
  return k.str();
}

// The three passes with every operand in one dtype that oneDNN convolves.
enum class Pass { forward, backward_data, backward_weights };

// A pass's primitive and the layouts it chose for source, weights and destination ("any": oneDNN's
// blocked layouts, in which 2.6 has its fast direct and AMX kernels; on plain NCHW it falls back to
// im2col + gemm, 3-8x slower here).
struct ConvPrimitive {
  dnnl::primitive prim;
  memory::desc src, weights, dst;
};

// Which of source and destination are channels-last (nhwc), to be read and written in place.
struct Layouts {
  bool src = false, dst = false;
};

const ConvPrimitive& conv_primitive(Pass pass, const ConvShapes& s, DType t, bool grouped, Layouts nhwc) {
  static std::mutex mutex;
  static std::unordered_map<std::string, ConvPrimitive> cache;
  const char* names[] = {"conv_fwd", "conv_bwd_data", "conv_bwd_weights"};
  const std::string key = conv_key(names[static_cast<int>(pass)], s, t) + (grouped ? "g" : "") + (nhwc.src ? "s" : "") +
                          (nhwc.dst ? "d" : "");
  std::lock_guard lock(mutex);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  const memory::data_type dt = onednn_type(t);
  const memory::desc src(s.src, dt, nhwc.src ? tag::nhwc : tag::any), weights(s.weights, dt, tag::any),
      dst(s.dst, dt, nhwc.dst ? tag::nhwc : tag::any);
  const auto fwd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src,
                                      weights, dst, s.strides, s.dilates, s.pad_l, s.pad_r),
      onednn_engine());
  ConvPrimitive c;
  switch (pass) {
    case Pass::forward:
      c = {dnnl::convolution_forward(fwd), fwd.src_desc(), fwd.weights_desc(), fwd.dst_desc()};
      break;
    case Pass::backward_data: {
      const auto pd = dnnl::convolution_backward_data::primitive_desc(
          dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src, weights, dst, s.strides,
                                                s.dilates, s.pad_l, s.pad_r),
          onednn_engine(), fwd);
      c = {dnnl::convolution_backward_data(pd), pd.diff_src_desc(), pd.weights_desc(), pd.diff_dst_desc()};
      break;
    }
    case Pass::backward_weights: {
      const auto pd = dnnl::convolution_backward_weights::primitive_desc(
          dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, weights, dst,
                                                   s.strides, s.dilates, s.pad_l, s.pad_r),
          onednn_engine(), fwd);
      c = {dnnl::convolution_backward_weights(pd), pd.src_desc(), pd.diff_weights_desc(), pd.diff_dst_desc()};
      break;
    }
  }
  return cache.emplace(key, std::move(c)).first->second;
}

// Low-precision planes converted into and out of f32 nChw8c (oneDNN's AVX2 layout for activations)
// in one pass, with mantissa's conversion kernels: channel blocks of 8 planes, `kSpan` positions at a
// time through a small f32 buffer. oneDNN 2.6's own converting reorders ran 10x slower here.
class BlockedConversion {
 public:
  static constexpr std::int64_t kSpan = 512;

  // Whether `wanted` is f32 nChw8c for these NCHW dimensions.
  static bool applies(const memory::desc& wanted, const memory::dims& dims) {
    return dims.size() == 4 && wanted == memory::desc(dims, memory::data_type::f32, tag::nChw8c);
  }

  // plain (low precision, NCHW) -> blocked (f32, nChw8c; channels past C zero).
  static void to_blocked(const memory::dims& d, DType t, const void* plain, float* blocked) {
    walk(d, [&](std::int64_t n, std::int64_t cb, std::int64_t hw0, std::int64_t len, float (&buf)[8][kSpan]) {
      const std::int64_t c = d[1], plane = d[2] * d[3], cb_count = (c + 7) / 8;
      for (std::int64_t c8 = 0; c8 < 8; ++c8) {
        const std::int64_t ch = cb * 8 + c8;
        if (ch < c) {
          decode_array(format_of(t), element(plain, t, (n * c + ch) * plane + hw0), buf[c8], static_cast<std::size_t>(len));
        } else {
          std::fill(buf[c8], buf[c8] + len, 0.0f);
        }
      }
      float* out = blocked + ((n * cb_count + cb) * plane + hw0) * 8;
      for (std::int64_t i = 0; i < len; ++i) {
        for (std::int64_t c8 = 0; c8 < 8; ++c8) out[i * 8 + c8] = buf[c8][i];
      }
    });
  }

  // blocked (f32, nChw8c) -> plain (low precision, NCHW), each value rounded once.
  static void to_plain(const memory::dims& d, DType t, const float* blocked, void* plain) {
    walk(d, [&](std::int64_t n, std::int64_t cb, std::int64_t hw0, std::int64_t len, float (&buf)[8][kSpan]) {
      const std::int64_t c = d[1], plane = d[2] * d[3], cb_count = (c + 7) / 8;
      const float* in = blocked + ((n * cb_count + cb) * plane + hw0) * 8;
      for (std::int64_t i = 0; i < len; ++i) {
        for (std::int64_t c8 = 0; c8 < 8; ++c8) buf[c8][i] = in[i * 8 + c8];
      }
      for (std::int64_t c8 = 0; c8 < 8 && cb * 8 + c8 < c; ++c8) {
        encode_array(format_of(t), buf[c8], element(plain, t, (n * c + cb * 8 + c8) * plane + hw0), static_cast<std::size_t>(len));
      }
    });
  }

 private:
  static void* element(const void* base, DType t, std::int64_t i) {
    return const_cast<char*>(static_cast<const char*>(base)) + i * static_cast<std::int64_t>(dtype_size(t));
  }
  // Calls body(n, channel block, first position, positions, buffer) over every span, in parallel.
  template <class Body>
  static void walk(const memory::dims& d, Body&& body) {
    const std::int64_t plane = d[2] * d[3], spans = (plane + kSpan - 1) / kSpan;
    const std::int64_t units = d[0] * ((d[1] + 7) / 8) * spans;
#pragma omp parallel for schedule(static) if (units * kSpan >= (1 << 15))
    for (std::int64_t u = 0; u < units; ++u) {
      alignas(64) float buf[8][kSpan];
      const std::int64_t span = u % spans, ncb = u / spans, cb_count = (d[1] + 7) / 8;
      const std::int64_t hw0 = span * kSpan;
      body(ncb / cb_count, ncb % cb_count, hw0, std::min(kSpan, plane - hw0), buf);
    }
  }
};

// An operand in the layout the primitive wants: the tensor's own memory when that is the plain layout,
// else a temporary buffer, filled from the plain data (`input`) or copied back to it by finish(): by
// oneDNN's reorder where the primitive computes in the data's dtype and that reorder moves its bits
// untouched (f32 always; bf16 where the CPU has AVX-512). The data may be bf16/f16 for an f32 primitive
// (where oneDNN has none in that dtype): it is then converted on the way in and rounded once on the way
// out. (Until stop 60 a bf16 primitive's operands took that converting path too: each through an f32
// copy and a converting reorder, a third of the CNN's bf16 step.)
class Operand {
 public:
  Operand(const memory::desc& plain, const memory::desc& wanted, void* data, bool input, DType data_type)
      : plain_(plain, onednn_engine(), data), data_type_(data_type),
        moves_bits_(wanted.data_type() == onednn_type(data_type) &&
                    (data_type == DType::f32 || onednn_supports(OnednnPrimitive::reorder, data_type))) {
    if (wanted == plain) {
      mem_ = plain_;
      return;
    }
    buffer_ = Tensor::empty({static_cast<std::int64_t>((wanted.get_size() + 3) / 4)}, DType::f32);
    mem_ = memory(wanted, onednn_engine(), buffer_.data());
    if (!converting()) {
      if (input) reorder(plain_, mem_);
      return;
    }
    dims_ = plain.dims();
    blocked_ = BlockedConversion::applies(wanted, dims_);
    if (blocked_) {
      if (input) BlockedConversion::to_blocked(dims_, data_type_, data, buffer_.data_as<float>());
      return;
    }
    // Another layout (weights): through an f32 copy in the plain layout, then oneDNN's reorder.
    f32_plain_ = Tensor::empty({static_cast<std::int64_t>(plain.get_size() / dtype_size(data_type_))}, DType::f32);
    plain_f32_ = memory(memory::desc(dims_, memory::data_type::f32, dims_.size() == 5 ? tag::abcde : tag::abcd),
                        onednn_engine(), f32_plain_.data());
    if (input) {
      decode_array(format_of(data_type_), data, f32_plain_.data_as<float>(), static_cast<std::size_t>(f32_plain_.numel()));
      reorder(plain_f32_, mem_);
    }
  }
  const memory& mem() const { return mem_; }
  void finish() {
    if (!buffer_.defined()) return;
    if (!converting()) {
      reorder(mem_, plain_);
    } else if (blocked_) {
      BlockedConversion::to_plain(dims_, data_type_, buffer_.data_as<float>(), plain_.get_data_handle());
    } else {
      reorder(mem_, plain_f32_);
      encode_array(format_of(data_type_), f32_plain_.data_as<float>(), plain_.get_data_handle(),
                   static_cast<std::size_t>(f32_plain_.numel()));
    }
  }

 private:
  bool converting() const { return !moves_bits_; }
  static void reorder(const memory& from, const memory& to) {
    // Keyed by both descriptors' bytes: equal layouts give equal bytes (oneDNN zero-fills them).
    PrimitiveKey key("conv_reorder");
    key.add(from.get_desc()).add(to.get_desc());
    const dnnl::primitive prim = cached_primitive(key.str(), [&] { return dnnl::reorder(from, to); });
    execute_timed(prim, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  }
  memory plain_, mem_, plain_f32_;
  DType data_type_;
  bool moves_bits_;
  memory::dims dims_;
  bool blocked_ = false;
  Tensor buffer_, f32_plain_;
};

// One pass with the primitive computing in `t` and the operands' memory in `data`: the same, or
// bf16/f16 data for an f32 primitive, converted by the operands on the way in and out.
void run(Pass pass, const ConvShapes& s, DType t, DType data, bool grouped, Layouts nhwc, void* src, void* weights,
         void* dst) {
  const ConvPrimitive& c = conv_primitive(pass, s, t, grouped, nhwc);
  const memory::data_type dt = onednn_type(data);
  const memory::desc plain_src(s.src, dt, nhwc.src ? tag::nhwc : tag::nchw),
      plain_w(s.weights, dt, grouped ? tag::goihw : tag::oihw), plain_dst(s.dst, dt, nhwc.dst ? tag::nhwc : tag::nchw);
  Operand x(plain_src, c.src, src, pass != Pass::backward_data, data);
  Operand w(plain_w, c.weights, weights, pass != Pass::backward_weights, data);
  Operand y(plain_dst, c.dst, dst, pass != Pass::forward, data);
  switch (pass) {
    case Pass::forward:
      execute_timed(c.prim, {{DNNL_ARG_SRC, x.mem()}, {DNNL_ARG_WEIGHTS, w.mem()}, {DNNL_ARG_DST, y.mem()}});
      y.finish();
      break;
    case Pass::backward_data:
      execute_timed(c.prim, {{DNNL_ARG_DIFF_DST, y.mem()}, {DNNL_ARG_WEIGHTS, w.mem()}, {DNNL_ARG_DIFF_SRC, x.mem()}});
      x.finish();
      break;
    case Pass::backward_weights:
      execute_timed(c.prim, {{DNNL_ARG_SRC, x.mem()}, {DNNL_ARG_DIFF_DST, y.mem()}, {DNNL_ARG_DIFF_WEIGHTS, w.mem()}});
      w.finish();
      break;
  }
}

// Runs a pass in the operands' dtype; where oneDNN lacks it (f16 on CPUs without f16 arithmetic, bf16
// on AVX2-only ones), the f32 primitive with the operands converted as they enter and leave oneDNN's
// layouts (Operand). (oneDNN 2.6's own converting reorders ran 10x slower on AVX2 and flush subnormals.)
void conv_pass(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  const ConvShapes s = conv_shapes(x.shape(), w.shape(), y.shape(), p);
  const DType t = x.dtype();
  const DType compute = onednn_supports(OnednnPrimitive::convolution, t) ? t : DType::f32;
  // Channels-last activations are read and written in place (a [N, 1, H, W] one is both layouts: nhwc
  // beside a channels-last other side). They come only where oneDNN convolves their dtype: the
  // converting path's layouts are NCHW's.
  const bool x_cl = is_channels_last(x) && !x.is_contiguous(), y_cl = is_channels_last(y) && !y.is_contiguous();
  const Layouts nhwc{x_cl || (y_cl && is_channels_last(x)), y_cl || (x_cl && is_channels_last(y))};
  if ((nhwc.src || nhwc.dst) && compute != t) {
    throw std::logic_error("conv2d: channels-last " + std::string(dtype_name(t)) + " activations on a CPU that converts them");
  }
  run(pass, s, compute, t, p.groups > 1, nhwc, x.data(), w.data(), y.data());
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
