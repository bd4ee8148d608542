// The LSTM cell on the CPU: one batch row at a time, the row's gates converted to f32 in a buffer, the
// pointwise math in f32 loops the compiler vectorizes (compiled per ISA), and h, c rounded once into the
// state's dtype. Rows are split across threads. The recurrent and input products are matmuls of their
// own (oneDNN); this kernel is the part between them that PyTorch fuses into _thnn_fused_lstm_cell.
#include <cmath>
#include <vector>

#include "cpu_kernels.h"
#include "rows.h"
#include "unary_math.h"

namespace mantissa::detail {
namespace {

// n values of the cell: gates (4n: i, f, g, o pre-activations, summed), c_prev -> h, c, acts (5n).
MANTISSA_VECTOR_CLONES
void cell_row(const float* gates, const float* c_prev, std::int64_t n, float* h, float* c, float* acts) {
  for (std::int64_t j = 0; j < n; ++j) {
    const float i = sigmoid_of(gates[j]), f = sigmoid_of(gates[n + j]);
    const float g = std::tanh(gates[2 * n + j]), o = sigmoid_of(gates[3 * n + j]);
    const float cj = f * c_prev[j] + i * g;
    const float tc = std::tanh(cj);
    c[j] = cj;
    h[j] = o * tc;
    acts[j] = i;
    acts[n + j] = f;
    acts[2 * n + j] = g;
    acts[3 * n + j] = o;
    acts[4 * n + j] = tc;
  }
}

MANTISSA_VECTOR_CLONES
void cell_backward_row(const float* acts, const float* c_prev, const float* gh, const float* gc_in, std::int64_t n,
                       float* gates, float* gc_prev) {
  for (std::int64_t j = 0; j < n; ++j) {
    const float i = acts[j], f = acts[n + j], g = acts[2 * n + j], o = acts[3 * n + j], tc = acts[4 * n + j];
    const float gc = gc_in[j] + gh[j] * o * (1 - tc * tc);
    gates[j] = gc * g * i * (1 - i);
    gates[n + j] = gc * c_prev[j] * f * (1 - f);
    gates[2 * n + j] = gc * i * (1 - g * g);
    gates[3 * n + j] = gh[j] * tc * o * (1 - o);
    gc_prev[j] = gc * f;
  }
}

// Row b of a strided 2-D tensor as f32 (n values from column `col`), and the reverse.
void load(const Tensor& t, std::int64_t b, std::int64_t col, std::int64_t n, float* v) {
  load_f32(t, b * t.strides()[0] + col * t.strides()[1], t.strides()[1], n, v);
}
void store(const Tensor& t, std::int64_t b, std::int64_t col, std::int64_t n, const float* v) {
  store_f32(t, b * t.strides()[0] + col * t.strides()[1], t.strides()[1], n, v);
}

}  // namespace

void cpu_lstm_cell(const Tensor& x_gates, const Tensor& h_gates, const Tensor& c_prev, const Tensor& out,
                   const Tensor& acts) {
  const std::int64_t batch = c_prev.size(0), n = c_prev.size(1);
  const auto& os = out.strides();
#pragma omp parallel if (batch > 1 && batch * n >= (1 << 12))
  {
    std::vector<float> gates(4 * n), other(4 * n), cp(n), h(n), c(n);
#pragma omp for schedule(static)
    for (std::int64_t b = 0; b < batch; ++b) {
      load(x_gates, b, 0, 4 * n, gates.data());
      load(h_gates, b, 0, 4 * n, other.data());
      for (std::int64_t j = 0; j < 4 * n; ++j) gates[j] += other[j];
      load(c_prev, b, 0, n, cp.data());
      cell_row(gates.data(), cp.data(), n, h.data(), c.data(), acts.data_as<float>() + b * acts.strides()[0]);
      store_f32(out, b * os[1], os[2], n, h.data());
      store_f32(out, os[0] + b * os[1], os[2], n, c.data());
    }
  }
}

void cpu_lstm_cell_backward(const Tensor& acts, const Tensor& c_prev, const Tensor& grad_h, const Tensor& grad_c,
                            const Tensor& grad_gates, const Tensor& grad_c_prev) {
  const std::int64_t batch = c_prev.size(0), n = c_prev.size(1);
#pragma omp parallel if (batch > 1 && batch * n >= (1 << 12))
  {
    std::vector<float> cp(n), gh(n), gc(n), gates(4 * n), gcp(n);
#pragma omp for schedule(static)
    for (std::int64_t b = 0; b < batch; ++b) {
      load(c_prev, b, 0, n, cp.data());
      load(grad_h, b, 0, n, gh.data());
      load(grad_c, b, 0, n, gc.data());
      cell_backward_row(acts.data_as<float>() + b * acts.strides()[0], cp.data(), gh.data(), gc.data(), n, gates.data(),
                        gcp.data());
      store(grad_gates, b, 0, 4 * n, gates.data());
      store(grad_c_prev, b, 0, n, gcp.data());
    }
  }
}

}  // namespace mantissa::detail
