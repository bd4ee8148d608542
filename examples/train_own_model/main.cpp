// Training your own model with mantissa: a module of your own, Fashion-MNIST, bf16 autocast with f32
// master weights, AdamW, evaluation. The whole mixed-precision step is train::Trainer's.
//   train_own_model [STEPS]
#include <cstdio>
#include <cstdlib>

#include "mantissa/nn/layers.h"
#include "mantissa/train/trainer.h"

using namespace mantissa;

// 784 -> 128 -> 10 with a ReLU between: any nn::Module with forward(const Tensor&) will do.
class SmallNet : public nn::Module {
 public:
  SmallNet()
      : fc1_(register_module("fc1", std::make_shared<nn::Linear>(784, 128, /*seed=*/1))),
        fc2_(register_module("fc2", std::make_shared<nn::Linear>(128, 10, /*seed=*/2))) {}
  Tensor forward(const Tensor& x) const { return fc2_->forward(relu(fc1_->forward(reshape(x, {x.size(0), 784})))); }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

int main(int argc, char** argv) {
  const std::int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  train::ModuleModel<SmallNet> model;
  train::ClassificationData data(load_mnist_format(kFashionMnistDir, true), load_mnist_format(kFashionMnistDir, false),
                                 /*batch_size=*/128, /*seed=*/0);
  train::Trainer trainer(model, data,
                         {.precision = {DType::bf16}, .optimizer = {.lr = 2e-3}, .steps = steps, .eval_every = steps});
  const train::TrainResult r = trainer.run({.on_eval = [](const train::EvalRecord& e) {
    std::printf("step %lld: validation loss %.4f, accuracy %.2f%%\n", static_cast<long long>(e.step), e.val_loss,
                100 * e.val_accuracy.value_or(0));
  }});
  return r.evals.back().val_accuracy.value_or(0) > 0.5 ? 0 : 1;
}
