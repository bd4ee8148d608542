// The smallest program that uses mantissa from outside: round pi to bf16, convert an array in bulk, and
// train a classifier with the library's Trainer (f32 parameters, fp16 autocast, dynamic loss scaling,
// AdamW).
#include <algorithm>
#include <cstdio>
#include <vector>

#include "mantissa/nn/layers.h"
#include "mantissa/numeric/bfloat16.h"
#include "mantissa/numeric/bulk.h"
#include "mantissa/ops/ops.h"
#include "mantissa/train/trainer.h"

int main() {
  using namespace mantissa;
  const float pi = 3.14159265f;
  const bf16 b(pi);
  std::printf("bf16(%.9g) = %.9g (0x%04x)\n", static_cast<double>(pi), static_cast<double>(b.to_float()), b.bits);
  std::vector<float> x(1000, pi);
  std::vector<bf16> y(x.size());
  encode_array(Format::bf16(), x.data(), y.data(), x.size());
  std::printf("bulk: %zu values, kernels %s\n", y.size(), isa_name(active_isa()).data());

  // A linear classifier of random points labelled by a random teacher, trained by train::Trainer in fp16
  // autocast with dynamic loss scaling and AdamW.
  const Tensor points = Tensor::randn({512, 64}, DType::f32, 4);
  const std::vector<double> teacher = matmul(points, Tensor::randn({64, 10}, DType::f32, 5)).to_doubles();
  std::vector<std::int64_t> labels;
  for (std::size_t i = 0; i < 512; ++i) {
    labels.push_back(std::max_element(teacher.begin() + 10 * i, teacher.begin() + 10 * (i + 1)) - (teacher.begin() + 10 * i));
  }
  const ImageDataset set{points, labels, 10};
  train::ClassificationData data(set, set, 32, 0);
  train::ModuleModel<nn::Linear> model(64, 10, /*seed=*/3);
  train::Trainer trainer(model, data, {.precision = {DType::f16}, .optimizer = {.lr = 1e-2}, .steps = 40, .eval_every = 40});
  const train::TrainResult r = trainer.run();
  const double first = r.steps.front().loss, last = r.steps.back().loss;
  std::printf("mixed precision: loss %.4f -> %.4f, scale %g\n", first, last, r.steps.back().loss_scale);
  return y[999] == b && last < first ? 0 : 1;
}
