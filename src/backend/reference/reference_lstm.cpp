// Reference LSTM cell and its backward: double loops over the batch, straight from the definitions
// (PyTorch's gate order i, f, g, o).
#include <cmath>

#include "reference_access.h"
#include "reference_kernels.h"

namespace mantissa::detail {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Element (k, b, j) of a strided 3-D tensor.
std::int64_t at3(const Tensor& t, std::int64_t k, std::int64_t b, std::int64_t j) {
  return k * t.strides()[0] + b * t.strides()[1] + j * t.strides()[2];
}

}  // namespace

void reference_lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out,
                         const Tensor& acts) {
  const std::int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t j = 0; j < hidden; ++j) {
      const auto gate = [&](int q) { return at(x_gates, b, q * hidden + j) + at(h_gates, b, q * hidden + j); };
      const double i = sigmoid(gate(0)), f = sigmoid(gate(1)), g = std::tanh(gate(2)), o = sigmoid(gate(3));
      const double c = f * at(c_prev, b, j) + i * g;
      const double tc = std::tanh(c);
      store_element(out.dtype(), out.data(), at3(out, 0, b, j), o * tc);
      store_element(out.dtype(), out.data(), at3(out, 1, b, j), c);
      const double kept[5] = {i, f, g, o, tc};
      for (int q = 0; q < 5; ++q) put(acts, b, q * hidden + j, kept[q]);
    }
  }
}

void reference_lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                                  const Tensor& grad_gates, const Tensor& grad_c_prev) {
  const std::int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t j = 0; j < hidden; ++j) {
      const double i = at(acts, b, j), f = at(acts, b, hidden + j), g = at(acts, b, 2 * hidden + j);
      const double o = at(acts, b, 3 * hidden + j), tc = at(acts, b, 4 * hidden + j);
      const double gh = at(grad_h, b, j);
      // dL/dc: the gradient arriving for c, plus the path through h = o tanh(c).
      const double gc = at(grad_c, b, j) + gh * o * (1 - tc * tc);
      put(grad_gates, b, j, gc * g * i * (1 - i));
      put(grad_gates, b, hidden + j, gc * at(c_prev, b, j) * f * (1 - f));
      put(grad_gates, b, 2 * hidden + j, gc * i * (1 - g * g));
      put(grad_gates, b, 3 * hidden + j, gh * tc * o * (1 - o));
      put(grad_c_prev, b, j, gc * f);
    }
  }
}

}  // namespace mantissa::detail
