// Autograd semantics: where gradients go, in which dtype, and the errors for misuse.
#include <gtest/gtest.h>

#include <stdexcept>

#include "mantissa/autograd/node.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"

namespace mantissa {
namespace {

TEST(Autograd, ScalarBackwardFillsLeafGradients) {
  Tensor x = Tensor::from_values({1, 2, 3}, {3}, DType::f64).set_requires_grad();
  Tensor w = Tensor::from_values({4, 5, 6}, {3}, DType::f64).set_requires_grad();
  sum(mul(x, w)).backward();
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(w.grad().to_doubles(), (std::vector<double>{1, 2, 3}));
}

TEST(Autograd, GradientsOfReusedTensorsAdd) {
  Tensor x = Tensor::from_values({3}, {1}, DType::f64).set_requires_grad();
  sum(add(mul(x, x), x)).backward();  // d/dx (x^2 + x) = 2x + 1
  EXPECT_EQ(x.grad().item(), 7);
}

TEST(Autograd, SecondBackwardAccumulatesIntoGrad) {
  Tensor x = Tensor::from_values({1, 2}, {2}, DType::f64).set_requires_grad();
  const Tensor y = sum(mul(x, 3.0));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{6, 6}));
}

TEST(Autograd, BackwardThroughAFreedGraphIsAnError) {
  Tensor x = Tensor::from_values({1, 2}, {2}, DType::f64).set_requires_grad();
  const Tensor y = sum(mul(x, x));
  y.backward();
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Autograd, LeavesAreReusableAcrossGraphs) {
  Tensor w = Tensor::from_values({2}, {1}, DType::f64).set_requires_grad();
  for (int step = 0; step < 3; ++step) {
    w.zero_grad();
    sum(mul(w, w)).backward();
    EXPECT_EQ(w.grad().item(), 4);
  }
}

TEST(Autograd, NonScalarNeedsAGradientOfItsShapeAndDtype) {
  Tensor x = Tensor::from_values({1, 2}, {2}, DType::f64).set_requires_grad();
  const Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.backward(), std::invalid_argument);
  EXPECT_THROW(y.backward(Tensor::full({3}, 1, DType::f64)), std::invalid_argument);
  EXPECT_THROW(y.backward(Tensor::full({2}, 1, DType::f32)), std::invalid_argument);
  y.backward(Tensor::from_values({1, 10}, {2}, DType::f64));
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{2, 20}));
}

TEST(Autograd, TheGradientIsNeverTheCallersTensor) {
  // The seed given to backward() reaches the leaf unchanged; .grad must not alias it.
  Tensor x = Tensor::from_values({1, 2}, {2}, DType::f64).set_requires_grad();
  const Tensor seed = Tensor::from_values({5, 6}, {2}, DType::f64);
  x.backward(seed);
  EXPECT_NE(x.grad().storage(), seed.storage());
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{5, 6}));
}

TEST(Autograd, NoGradScopeAndDetachRecordNothing) {
  Tensor x = Tensor::from_values({1}, {1}, DType::f64).set_requires_grad();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(mul(x, x).requires_grad());
  }
  EXPECT_FALSE(mul(x.detach(), 2.0).requires_grad());
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
  EXPECT_THROW(sum(x.detach()).backward(), std::logic_error);
  EXPECT_THROW(mul(x, 2.0).set_requires_grad(), std::logic_error);
}

TEST(Autograd, LeafGradientHasTheLeafsDtype) {
  CpuBackendScope reference(CpuBackend::reference);
  Tensor w = Tensor::from_values({1.5, -2}, {2}, DType::bf16).set_requires_grad();
  const Tensor y = sum(mul(cast(w, DType::f32), Tensor::from_values({0.1, 3}, {2}, DType::f32)));
  EXPECT_EQ(y.dtype(), DType::f32);
  y.backward();
  EXPECT_EQ(w.grad().dtype(), DType::bf16);
  EXPECT_EQ(w.grad().to_doubles(), (std::vector<double>{0.10009765625, 3}));  // 0.1 rounded to bf16
}

TEST(Ops, StorageFormatsNeedAnExplicitCast) {
  const Tensor a = Tensor::from_values({1, 2}, {2}, DType::e4m3);
  try {
    add(a, a);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cast()"), std::string::npos);
  }
  EXPECT_EQ(add(cast(a, DType::f32), 1.0).to_doubles(), (std::vector<double>{2, 3}));
}

TEST(Ops, ShapeErrorsNameTheOpAndShapes) {
  const Tensor a = Tensor::zeros({2, 3}, DType::f32);
  const Tensor b = Tensor::zeros({4}, DType::f32);
  try {
    add(a, b);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "add: shapes [2, 3] and [4] do not broadcast");
  }
  EXPECT_THROW(matmul(a, a), std::invalid_argument);
  EXPECT_THROW(reshape(a, {4, 2}), std::invalid_argument);
}

TEST(Views, ShareStorageAndSeeWrites) {
  const Tensor x = Tensor::from_values({0, 1, 2, 3, 4, 5}, {2, 3}, DType::f32);
  const Tensor t = transpose(x, 0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.to_doubles(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.storage(), x.storage());
  EXPECT_EQ(slice(x, 1, 0, 3, 2).to_doubles(), (std::vector<double>{0, 2, 3, 5}));
  EXPECT_EQ(reshape(x, {3, -1}).storage(), x.storage());
  x.data_as<float>()[0] = 9;
  EXPECT_EQ(t.to_doubles()[0], 9);
}

}  // namespace
}  // namespace mantissa
