// Reference max and average pooling (NCHW) and their backward, from the definitions.
#include <cmath>
#include <limits>
#include <vector>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {

void reference_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor* grad_out,
                      const Tensor* grad_x) {
  const View4 X(x), O(out.defined() ? out : *grad_out);
  std::vector<double> gx(grad_x ? static_cast<std::size_t>(grad_x->numel()) : 0, 0.0);
  const Shape& os = (out.defined() ? out : *grad_out).shape();
  for (std::int64_t n = 0; n < os[0]; ++n) {
    for (std::int64_t c = 0; c < os[1]; ++c) {
      for (std::int64_t oh = 0; oh < os[2]; ++oh) {
        for (std::int64_t ow = 0; ow < os[3]; ++ow) {
          double best = -std::numeric_limits<double>::infinity();
          std::int64_t best_at = -1;
          double total = 0;
          for (std::int64_t kh = 0; kh < p.kernel_h; ++kh) {
            for (std::int64_t kw = 0; kw < p.kernel_w; ++kw) {
              const std::int64_t ih = oh * p.stride_h - p.pad_h + kh;
              const std::int64_t iw = ow * p.stride_w - p.pad_w + kw;
              if (ih < 0 || ih >= x.size(2) || iw < 0 || iw >= x.size(3)) continue;
              const double v = X.get(n, c, ih, iw);
              total += v;
              // A NaN wins (the first one), else the first maximum.
              if (best_at < 0 || (best == best && (v > best || v != v))) {
                best = v;
                best_at = X.index(n, c, ih, iw);
              }
              if (grad_x && !p.max) {
                gx[static_cast<std::size_t>(X.index(n, c, ih, iw))] +=
                    O.get(n, c, oh, ow) / static_cast<double>(p.kernel_h * p.kernel_w);
              }
            }
          }
          if (grad_x) {
            if (p.max && best_at >= 0) gx[static_cast<std::size_t>(best_at)] += O.get(n, c, oh, ow);
          } else {
            O.set(n, c, oh, ow, p.max ? best : total / static_cast<double>(p.kernel_h * p.kernel_w));
          }
        }
      }
    }
  }
  if (grad_x) {
    for (std::int64_t i = 0; i < grad_x->numel(); ++i) store_element(grad_x->dtype(), grad_x->data(), i, gx[static_cast<std::size_t>(i)]);
  }
}

}  // namespace mantissa::detail
