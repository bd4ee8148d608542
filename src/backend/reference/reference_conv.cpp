// Reference convolution: direct loops in double over contiguous NCHW tensors, written from the
// definition, for the forward and both backward products.
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

// Calls fn(n, o, oh, ow, c, kh, kw, ih, iw) for every in-bounds term of the convolution sum.
template <class Fn>
void for_each_term(const Shape& xs, const Shape& ws, const Shape& os, const Conv2dParams& p, Fn&& fn) {
  const std::int64_t o_per_group = ws[0] / p.groups;
  const std::int64_t c_per_group = ws[1];
  for (std::int64_t n = 0; n < os[0]; ++n) {
    for (std::int64_t o = 0; o < os[1]; ++o) {
      const std::int64_t g = o / o_per_group;
      for (std::int64_t oh = 0; oh < os[2]; ++oh) {
        for (std::int64_t ow = 0; ow < os[3]; ++ow) {
          for (std::int64_t c = 0; c < c_per_group; ++c) {
            for (std::int64_t kh = 0; kh < ws[2]; ++kh) {
              const std::int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
              if (ih < 0 || ih >= xs[2]) continue;
              for (std::int64_t kw = 0; kw < ws[3]; ++kw) {
                const std::int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (iw < 0 || iw >= xs[3]) continue;
                fn(n, o, oh, ow, g * c_per_group + c, c, kh, kw, ih, iw);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

void reference_conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& out) {
  const View4 X(x), W(w), O(out);
  std::vector<double> acc(static_cast<std::size_t>(out.numel()), 0.0);
  for_each_term(x.shape(), w.shape(), out.shape(), p,
                [&](auto n, auto o, auto oh, auto ow, auto ci, auto c, auto kh, auto kw, auto ih, auto iw) {
                  acc[static_cast<std::size_t>(O.index(n, o, oh, ow))] += X.get(n, ci, ih, iw) * W.get(o, c, kh, kw);
                });
  for (std::int64_t i = 0; i < out.numel(); ++i) store_element(out.dtype(), out.data(), i, acc[static_cast<std::size_t>(i)]);
}

void reference_conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Conv2dParams& p, const Tensor& grad_x) {
  const View4 G(grad_out), W(w), X(grad_x);
  std::vector<double> acc(static_cast<std::size_t>(grad_x.numel()), 0.0);
  for_each_term(grad_x.shape(), w.shape(), grad_out.shape(), p,
                [&](auto n, auto o, auto oh, auto ow, auto ci, auto c, auto kh, auto kw, auto ih, auto iw) {
                  acc[static_cast<std::size_t>(X.index(n, ci, ih, iw))] += G.get(n, o, oh, ow) * W.get(o, c, kh, kw);
                });
  for (std::int64_t i = 0; i < grad_x.numel(); ++i) store_element(grad_x.dtype(), grad_x.data(), i, acc[static_cast<std::size_t>(i)]);
}

void reference_conv2d_backward_weights(const Tensor& x, const Tensor& grad_out, const Conv2dParams& p, const Tensor& grad_w) {
  const View4 X(x), G(grad_out), W(grad_w);
  std::vector<double> acc(static_cast<std::size_t>(grad_w.numel()), 0.0);
  for_each_term(x.shape(), grad_w.shape(), grad_out.shape(), p,
                [&](auto n, auto o, auto oh, auto ow, auto ci, auto c, auto kh, auto kw, auto ih, auto iw) {
                  acc[static_cast<std::size_t>(W.index(o, c, kh, kw))] += X.get(n, ci, ih, iw) * G.get(n, o, oh, ow);
                });
  for (std::int64_t i = 0; i < grad_w.numel(); ++i) store_element(grad_w.dtype(), grad_w.data(), i, acc[static_cast<std::size_t>(i)]);
}

}  // namespace mantissa::detail
