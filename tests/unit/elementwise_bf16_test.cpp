// The CPU's elementwise loops read and write contiguous bf16 where it is (rows.h: f32_of, store_as)
// and go through f32 row buffers and the bulk conversion otherwise; relu on dense bf16 and f16 works on
// the bits: every way must give the same bits. Every 16-bit pattern (NaN of either kind, infinities,
// subnormals, both zeros) through every unary op, its backward, and every binary op, contiguous (in
// place) against a strided view of the same values (the buffers).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "../../src/backend/cpu/cpu_kernels.h"
#include "mantissa/core/op_types.h"
#include "mantissa/ops/ops.h"

namespace mantissa::detail {
namespace {

constexpr std::int64_t kPatterns = 1 << 16;

// Pattern i (times a multiplier that walks every pattern in another order), contiguous, and the same
// values as every other element of a twice-as-long tensor (a view with stride 2).
struct Operand {
  Tensor dense, strided;
};
Operand patterns(std::uint32_t multiplier, DType dtype = DType::bf16) {
  Operand o{Tensor::empty({kPatterns}, dtype), Tensor()};
  const Tensor wide = Tensor::zeros({2 * kPatterns}, dtype);
  auto* d = o.dense.data_as<std::uint16_t>();
  auto* w = wide.data_as<std::uint16_t>();
  for (std::uint32_t i = 0; i < kPatterns; ++i) d[i] = w[2 * i] = static_cast<std::uint16_t>(i * multiplier);
  o.strided = make_view(wide, {kPatterns}, {2}, wide.offset());
  return o;
}

Operand empty_pair(DType dtype = DType::bf16) {
  const Tensor wide = Tensor::zeros({2 * kPatterns}, dtype);
  return {Tensor::empty({kPatterns}, dtype), make_view(wide, {kPatterns}, {2}, wide.offset())};
}

void expect_same_bits(const Operand& out, const std::string& what) {
  const auto* a = out.dense.data_as<std::uint16_t>();
  const auto* b = static_cast<const std::uint16_t*>(out.strided.data());
  int differing = 0;
  for (std::int64_t i = 0; i < kPatterns; ++i) {
    if (a[i] != b[2 * i] && differing++ < 3) {
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " in place, " << b[2 * i];
    }
  }
  EXPECT_EQ(differing, 0) << what;
}

constexpr UnaryOp kUnaryOps[] = {UnaryOp::neg,  UnaryOp::abs,  UnaryOp::add_scalar, UnaryOp::mul_scalar, UnaryOp::pow_scalar,
                                 UnaryOp::exp,  UnaryOp::log,  UnaryOp::sqrt,       UnaryOp::relu,       UnaryOp::gelu,
                                 UnaryOp::silu, UnaryOp::tanh, UnaryOp::sigmoid,    UnaryOp::gelu_tanh};

TEST(ElementwiseBf16, InPlaceGivesTheBitsOfTheF32Buffers) {
  const Operand x = patterns(1), g = patterns(40503);  // 40503 is odd: g walks every pattern too
  for (const UnaryOp op : kUnaryOps) {
    const double alpha = op == UnaryOp::pow_scalar ? 3.0 : 0.75;
    const std::string name = "unary op " + std::to_string(static_cast<int>(op));
    Operand y = empty_pair();
    cpu_unary(op, alpha, x.dense, y.dense);
    cpu_unary(op, alpha, x.strided, y.strided);
    expect_same_bits(y, name);
    Operand gx = empty_pair();
    cpu_unary_backward(op, alpha, x.dense, g.dense, gx.dense);
    cpu_unary_backward(op, alpha, x.strided, g.strided, gx.strided);
    expect_same_bits(gx, name + " backward");
  }
  for (const BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::eq}) {
    Operand y = empty_pair();
    cpu_binary(op, x.dense, g.dense, y.dense);
    cpu_binary(op, x.strided, g.strided, y.strided);
    expect_same_bits(y, "binary op " + std::to_string(static_cast<int>(op)));
  }
}

// f16 has no in-place loops, but relu's bits path takes dense f16 too.
TEST(ElementwiseBf16, ReluOnF16BitsGivesTheBitsOfTheF32Buffers) {
  const Operand x = patterns(1, DType::f16), g = patterns(40503, DType::f16);
  Operand y = empty_pair(DType::f16), gx = empty_pair(DType::f16);
  cpu_unary(UnaryOp::relu, 0.0, x.dense, y.dense);
  cpu_unary(UnaryOp::relu, 0.0, x.strided, y.strided);
  expect_same_bits(y, "f16 relu");
  cpu_unary_backward(UnaryOp::relu, 0.0, x.dense, g.dense, gx.dense);
  cpu_unary_backward(UnaryOp::relu, 0.0, x.strided, g.strided, gx.strided);
  expect_same_bits(gx, "f16 relu backward");
}

}  // namespace
}  // namespace mantissa::detail
