// The LSTM cell on the GPU and its backward (PyTorch's gate order i, f, g, o), one thread per (batch
// row, hidden unit), in f32 from any input dtype, with the reference's formulas: gates = x_gates +
// h_gates; c = f c_prev + i g; h = o tanh(c); acts keeps i, f, g, o and tanh(c) for the backward.
#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

// A 2-D tensor passed by value: dtype, base and strides.
struct Mat {
  ElementType t;
  void* p;
  std::int64_t row, col;
  __device__ float get(std::int64_t b, std::int64_t j) const { return load(t, p, b * row + j * col); }
  __device__ void set(std::int64_t b, std::int64_t j, float v) const { store(t, p, b * row + j * col, v); }
};
Mat mat(const Tensor& x) { return {element_type(x.dtype()), x.data(), x.strides()[0], x.strides()[1]}; }

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void lstm_cell_kernel(std::int64_t batch, std::int64_t hidden, Mat xg, Mat hg, Mat c_prev, ElementType to,
                                 void* out, std::int64_t o0, std::int64_t o1, std::int64_t o2, Mat acts) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < batch * hidden;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = k / hidden, j = k % hidden;
    const auto gate = [&](int q) { return xg.get(b, q * hidden + j) + hg.get(b, q * hidden + j); };
    const float i = sigmoid(gate(0)), f = sigmoid(gate(1)), g = tanhf(gate(2)), o = sigmoid(gate(3));
    const float c = f * c_prev.get(b, j) + i * g;
    const float tc = tanhf(c);
    store(to, out, b * o1 + j * o2, o * tc);
    store(to, out, o0 + b * o1 + j * o2, c);
    const float kept[5] = {i, f, g, o, tc};
    for (int q = 0; q < 5; ++q) acts.set(b, q * hidden + j, kept[q]);
  }
}

__global__ void lstm_cell_backward_kernel(std::int64_t batch, std::int64_t hidden, Mat acts, Mat c_prev, Mat grad_h,
                                          Mat grad_c, Mat grad_gates, Mat grad_c_prev) {
  for (std::int64_t k = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; k < batch * hidden;
       k += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = k / hidden, j = k % hidden;
    const float i = acts.get(b, j), f = acts.get(b, hidden + j), g = acts.get(b, 2 * hidden + j);
    const float o = acts.get(b, 3 * hidden + j), tc = acts.get(b, 4 * hidden + j);
    const float gh = grad_h.get(b, j);
    // dL/dc: the gradient arriving for c, plus the path through h = o tanh(c).
    const float gc = grad_c.get(b, j) + gh * o * (1 - tc * tc);
    grad_gates.set(b, j, gc * g * i * (1 - i));
    grad_gates.set(b, hidden + j, gc * c_prev.get(b, j) * f * (1 - f));
    grad_gates.set(b, 2 * hidden + j, gc * i * (1 - g * g));
    grad_gates.set(b, 3 * hidden + j, gh * tc * o * (1 - o));
    grad_c_prev.set(b, j, gc * f);
  }
}

}  // namespace

void lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out, const Tensor& acts) {
  for (const Tensor* t : {&x_gates, &h_gates, &c_prev, &out, &acts}) refuse_f64("lstm_cell", *t);
  const std::int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  if (batch * hidden == 0) return;
  lstm_cell_kernel<<<blocks_for(batch * hidden), kThreads, 0, stream()>>>(
      batch, hidden, mat(x_gates), mat(h_gates), mat(c_prev), element_type(out.dtype()), out.data(), out.strides()[0],
      out.strides()[1], out.strides()[2], mat(acts));
  check_launch("lstm_cell");
}

void lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                        const Tensor& grad_gates, const Tensor& grad_c_prev) {
  for (const Tensor* t : {&acts, &c_prev, &grad_h, &grad_c, &grad_gates, &grad_c_prev}) refuse_f64("lstm_cell_backward", *t);
  const std::int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  if (batch * hidden == 0) return;
  lstm_cell_backward_kernel<<<blocks_for(batch * hidden), kThreads, 0, stream()>>>(
      batch, hidden, mat(acts), mat(c_prev), mat(grad_h), mat(grad_c), mat(grad_gates), mat(grad_c_prev));
  check_launch("lstm_cell_backward");
}

}  // namespace mantissa::detail::cuda
