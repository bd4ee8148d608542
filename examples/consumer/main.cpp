// The smallest program that uses mantissa from outside: round pi to bf16, convert an array in bulk, and
// take mixed-precision training steps (f32 parameters, fp16 autocast, dynamic loss scaling, AdamW).
#include <cstdio>
#include <vector>

#include "mantissa/amp/autocast.h"
#include "mantissa/amp/step.h"
#include "mantissa/numeric/bfloat16.h"
#include "mantissa/numeric/bulk.h"
#include "mantissa/ops/ops.h"
#include "mantissa/optim/optimizer.h"

int main() {
  using namespace mantissa;
  const float pi = 3.14159265f;
  const bf16 b(pi);
  std::printf("bf16(%.9g) = %.9g (0x%04x)\n", static_cast<double>(pi), static_cast<double>(b.to_float()), b.bits);
  std::vector<float> x(1000, pi);
  std::vector<bf16> y(x.size());
  encode_array(Format::bf16(), x.data(), y.data(), x.size());
  std::printf("bulk: %zu values, kernels %s\n", y.size(), isa_name(active_isa()).data());

  Tensor w = Tensor::randn({10, 64}, DType::f32, 3, 0, 0.1).set_requires_grad();
  const Tensor inputs = Tensor::randn({32, 64}, DType::f32, 4);
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  Adam opt({w}, adamw_defaults(), /*decoupled=*/true);
  LossScaler scaler(LossScalerOptions::for_compute(DType::f16));
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    Tensor loss;
    {
      Autocast region(DType::f16);
      loss = cross_entropy(linear(inputs, w), labels);
    }
    (step == 0 ? first : last) = loss.item();
    scaler.scale_loss(loss).backward();
    scaled_step(scaler, opt);
    opt.zero_grad();
  }
  std::printf("mixed precision: loss %.4f -> %.4f, scale %g\n", first, last, scaler.scale());
  return y[999] == b && last < first ? 0 : 1;
}
