// CUDA kernels of the optimizer family: the CPU's element rules (cpu/optimizer_math.h, compiled for the
// GPU) in f32, one thread per element, the gradient unscaled as it is read (the loss scaler's fused
// unscale); the f32 master weights written back into bf16/f16 parameters by the CPU's rounding rule,
// stochastic rounding drawing the same bits from (seed, element index) as the CPU does.
#include <cmath>

#include "../cpu/optimizer_math.h"
#include "cuda_kernels.h"
#include "cuda_support.cuh"

namespace mantissa::detail::cuda {
namespace {

__global__ void sgd_kernel(std::int64_t n, float* param, ElementType tg, const void* grad, ElementType tb, void* buffer,
                           SgdStep s, float grad_scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float b = buffer != nullptr ? load(tb, buffer, i) : 0.0f;
    param[i] = sgd_element(param[i], load(tg, grad, i) * grad_scale, b, s);
    if (buffer != nullptr) store(tb, buffer, i, b);
  }
}

__global__ void adam_kernel(std::int64_t n, float* param, ElementType tg, const void* grad, ElementType tm, void* m,
                            ElementType tv, void* v, AdamStep s, float grad_scale, float bias1, float bias2_sqrt) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float mi = load(tm, m, i);
    float vi = load(tv, v, i);
    param[i] = adam_element(param[i], load(tg, grad, i) * grad_scale, mi, vi, s, bias1, bias2_sqrt);
    store(tm, m, i, mi);
    store(tv, v, i, vi);
  }
}

__global__ void round_into_kernel(std::int64_t n, const float* src, ElementType to, EncodeParams rule, std::uint64_t seed,
                                  void* dst) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::uint32_t random = 0;
    if (rule.rounding == Rounding::stochastic) {
      random = random_bits(stochastic_key(seed, static_cast<std::uint32_t>(static_cast<std::uint64_t>(i) >> 32)),
                           static_cast<std::uint32_t>(i));
    }
    const std::uint32_t bits = encode_value(rule, src[i], random);
    if (dtype_size(to.dtype) == 2) {
      static_cast<std::uint16_t*>(dst)[i] = static_cast<std::uint16_t>(bits);
    } else {
      static_cast<std::uint8_t*>(dst)[i] = static_cast<std::uint8_t>(bits);
    }
  }
}

void check_update(const char* what, const Tensor& param, std::initializer_list<const Tensor*> others) {
  if (param.dtype() != DType::f32) throw std::invalid_argument(std::string(what) + ": cuda updates f32 parameters (master weights)");
  for (const Tensor* t : others) {
    refuse_f64(what, *t);
    if (t->defined() && !t->is_contiguous()) throw std::invalid_argument(std::string(what) + ": tensors must be contiguous");
  }
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s) {
  check_update("sgd_update", param, {&param, &grad, &momentum_buffer});
  const std::int64_t n = param.numel();
  if (n == 0) return;
  const bool has_buffer = momentum_buffer.defined();
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
      n, param.data_as<float>(), element_type(grad.dtype()), grad.data(),
      element_type(has_buffer ? momentum_buffer.dtype() : DType::f32), has_buffer ? momentum_buffer.data() : nullptr, s,
      static_cast<float>(s.grad_scale));
  check_launch("sgd_update");
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const AdamStep& s) {
  check_update("adam_update", param, {&param, &grad, &m, &v});
  const std::int64_t n = param.numel();
  if (n == 0) return;
  // The bias corrections as the CPU computes them: in double, then f32.
  const auto bias1 = static_cast<float>(1 - std::pow(s.beta1, static_cast<double>(s.step)));
  const auto bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(s.beta2, static_cast<double>(s.step))));
  adam_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(n, param.data_as<float>(), element_type(grad.dtype()), grad.data(),
                                                        element_type(m.dtype()), m.data(), element_type(v.dtype()), v.data(),
                                                        s, static_cast<float>(s.grad_scale), bias1, bias2_sqrt);
  check_launch("adam_update");
}

void round_into(const Tensor& src, const Tensor& dst, Rounding rounding, std::uint64_t seed) {
  if (src.dtype() != DType::f32 || !src.is_contiguous() || !dst.is_contiguous()) {
    throw std::invalid_argument("round_into: an f32 source and a destination, both contiguous");
  }
  refuse_f64("round_into", dst);
  const std::int64_t n = src.numel();
  if (n == 0) return;
  if (dst.dtype() == DType::f32) {
    check(cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, stream()),
          "round_into");
    return;
  }
  const EncodeParams rule = make_encode_params(format_of(dst.dtype()), CastOptions{rounding, false, seed});
  round_into_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(n, src.data_as<float>(), element_type(dst.dtype()), rule,
                                                              seed, dst.data());
  check_launch("round_into");
}

}  // namespace mantissa::detail::cuda
