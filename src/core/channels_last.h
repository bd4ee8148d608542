// Channels-last: a 4-D [N, C, H, W] tensor whose memory is [N, H, W, C] (PyTorch's channels_last,
// oneDNN's nhwc), the layout in which the CPU backend's convolutions read and write activations with no
// reorder. The convolution chain (convolution, batch norm, the elementwise ops, max pooling) keeps it
// from one layer to the next (src/ops/op_support.h says where).
#pragma once

#include <array>
#include <cstdint>

#include "mantissa/core/tensor.h"

namespace mantissa::detail {

// Whether t is a 4-D tensor laid out channels-last with no gaps; a dimension of size 1 may have any
// stride (a [N, 1, H, W] tensor is both NCHW and channels-last).
inline bool is_channels_last(const Tensor& t) {
  if (t.dim() != 4) return false;
  const Shape& s = t.shape();
  const Shape& st = t.strides();
  // Memory order C (innermost), W, H, N.
  const std::array<std::size_t, 4> order{1, 3, 2, 0};
  std::int64_t expect = 1;
  for (const std::size_t d : order) {
    if (s[d] != 1 && st[d] != expect) return false;
    expect *= s[d];
  }
  return true;
}

// A new [N, C, H, W] tensor laid out channels-last.
inline Tensor empty_channels_last(const Shape& nchw, DType dtype, Device device) {
  const Tensor nhwc = Tensor::empty({nchw[0], nchw[2], nchw[3], nchw[1]}, dtype, device);
  return make_view(nhwc, nchw, {nchw[1] * nchw[2] * nchw[3], 1, nchw[3] * nchw[1], nchw[1]}, 0);
}

// A new tensor for an op's output that follows its input's layout: channels-last like `like` (where
// `like` has the shape and is channels-last, not also contiguous), else contiguous.
inline Tensor empty_like_layout(const Tensor& like, const Shape& shape, DType dtype) {
  if (shape == like.shape() && is_channels_last(like) && !like.is_contiguous()) {
    return empty_channels_last(shape, dtype, like.device());
  }
  return Tensor::empty(shape, dtype, like.device());
}

}  // namespace mantissa::detail
