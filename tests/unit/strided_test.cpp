// The CUDA kernels' iteration over views (src/backend/cuda/strided.h, plain C++, so it is tested on every
// machine): the offsets of every element index in each tensor are those of a plain row-major walk over
// the shape, for contiguous, permuted, sliced and broadcast views; dimensions of size 1 go, dimensions
// every tensor steps through as one merge, so tensors contiguous alike are one dimension.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "mantissa/ops/ops.h"
#include "../../src/backend/cuda/strided.h"

namespace mantissa {
namespace {

using detail::cuda::strided;

// Element i's offsets by the definition: i written in the shape's mixed radix, times the strides.
// Both index paths are checked: the 32-bit one these shapes get, and the 64-bit one of shapes of 2^31
// elements or more (too large to allocate here), by clearing the flag.
template <int N>
void expect_plain_walk(const Shape& shape, const Tensor* const (&ts)[N]) {
  const auto it = strided(shape, ts, "test");
  ASSERT_TRUE(it.index32);
  auto it64 = it;
  it64.index32 = false;
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t got[N], got64[N];
    it.offsets(i, got);
    it64.offsets(i, got64);
    for (int t = 0; t < N; ++t) ASSERT_EQ(got64[t], got[t]) << "element " << i << " of tensor " << t << " in 64 bits";
    std::int64_t rest = i;
    std::int64_t want[N] = {};
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      const auto u = static_cast<std::size_t>(d);
      const std::int64_t k = rest % shape[u];
      rest /= shape[u];
      for (int t = 0; t < N; ++t) want[t] += k * ts[t]->strides()[u];
    }
    for (int t = 0; t < N; ++t) ASSERT_EQ(got[t], want[t]) << "element " << i << " of tensor " << t;
  }
}

TEST(Strided, OffsetsAreThoseOfAPlainWalkForEveryKindOfView) {
  std::mt19937 rng(20261202);
  for (int round = 0; round < 300; ++round) {
    const int rank = 1 + static_cast<int>(rng() % 5);
    Shape shape;
    for (int d = 0; d < rank; ++d) shape.push_back(1 + static_cast<std::int64_t>(rng() % 4));
    SCOPED_TRACE("shape " + shape_str(shape));
    const Tensor contiguous_one = Tensor::zeros(shape, DType::f32);
    // The dimensions reversed: a permuted view of a contiguous tensor.
    Shape reversed = shape;
    std::reverse(reversed.begin(), reversed.end());
    std::vector<std::int64_t> order;
    for (int d = rank - 1; d >= 0; --d) order.push_back(d);
    const Tensor permuted = permute(Tensor::zeros(reversed, DType::f32), order);
    // Every other element of a tensor twice as long in its first dimension.
    Shape doubled = shape;
    doubled[0] *= 2;
    const Tensor sliced = slice(Tensor::zeros(doubled, DType::f32), 0, 0, doubled[0], 2);
    // Some dimensions broadcast (stride 0).
    Shape broadcast_strides = contiguous_one.strides();
    for (auto& s : broadcast_strides) {
      if (rng() % 2 == 0) s = 0;
    }
    const Tensor broadcast = make_view(contiguous_one, shape, broadcast_strides, 0);
    const Tensor* four[4] = {&contiguous_one, &permuted, &sliced, &broadcast};
    expect_plain_walk(shape, four);
    const Tensor* two[2] = {&contiguous_one, &sliced};
    expect_plain_walk(shape, two);
  }
}

TEST(Strided, TensorsContiguousAlikeAreOneDimensionAndTransposesAreNot) {
  const Tensor a = Tensor::zeros({3, 1, 4, 5}, DType::f32), b = Tensor::zeros({3, 1, 4, 5}, DType::bf16);
  const Tensor* same[2] = {&a, &b};
  const auto it = strided(a.shape(), same, "test");
  EXPECT_EQ(it.rank, 1);
  EXPECT_EQ(it.shape[0], 60);
  const Tensor t = transpose(Tensor::zeros({5, 4}, DType::f32), 0, 1);
  const Tensor c = Tensor::zeros({4, 5}, DType::f32);
  const Tensor* mixed[2] = {&c, &t};
  EXPECT_EQ(strided(c.shape(), mixed, "test").rank, 2);
  // A bias broadcast over rows stays two dimensions; its rows merge with nothing.
  const Tensor x = Tensor::zeros({6, 7, 5}, DType::f32), bias = Tensor::zeros({5}, DType::f32);
  const Tensor bias_rows = make_view(bias, {6, 7, 5}, {0, 0, 1}, 0);
  const Tensor* with_bias[2] = {&x, &bias_rows};
  EXPECT_EQ(strided(x.shape(), with_bias, "test").rank, 2);
}

TEST(Strided, MoreThanEightDimensionsLeftAfterMergingIsAnError) {
  const Shape nine(9, 2);
  const Tensor flat = Tensor::zeros(nine, DType::f32);
  const Tensor* one[1] = {&flat};
  EXPECT_EQ(strided(nine, one, "test").rank, 1);  // nine contiguous dimensions merge into one
  std::vector<std::int64_t> order{8, 7, 6, 5, 4, 3, 2, 1, 0};
  const Tensor reversed = permute(flat, order);
  const Tensor* both[2] = {&flat, &reversed};  // reversed order: no two neighbours merge for both
  try {
    strided(nine, both, "copy");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "copy: more than 8 dimensions (after merging) on cuda");
  }
}

// The quotient by multiply-high and shift against the division itself: every numerator below 2^16 for
// every divisor below 2^10, then the edges and random numerators for random divisors up to 2^31 - 1.
TEST(FastDivisor, QuotientIsTheIntegerDivisionForEveryNumeratorBelow2To31) {
  using detail::cuda::FastDivisor;
  for (std::uint32_t d = 1; d < 1024; ++d) {
    const FastDivisor div(d);
    for (std::uint32_t n = 0; n < (1U << 16); ++n) ASSERT_EQ(div.quotient(n), n / d) << n << " / " << d;
  }
  std::mt19937 rng(20261202);
  const std::uint32_t top = 0x7fffffffU;
  std::vector<std::uint32_t> divisors{top, top - 1, 1U << 30, (1U << 30) + 1, (1U << 30) - 1, 3, 7, 641, 65537};
  const auto draw = [&rng](std::uint32_t below) { return static_cast<std::uint32_t>(rng() % below); };
  for (int k = 0; k < 2000; ++k) divisors.push_back(1 + draw(top));
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + draw(100000));
  for (std::uint32_t d : divisors) {
    const FastDivisor div(d);
    std::vector<std::uint32_t> ns{0, 1, d - 1, d, top, top - 1, top - d + 1};
    if (d < top / 2) {
      for (std::uint32_t m : {2U, 3U, top / d}) ns.insert(ns.end(), {m * d - 1, m * d, m * d + 1});
    }
    for (int k = 0; k < 500; ++k) ns.push_back(draw(top + 1U));
    for (std::uint32_t n : ns) {
      if (n > top) continue;
      ASSERT_EQ(div.quotient(n), n / d) << n << " / " << d;
    }
  }
  EXPECT_THROW(FastDivisor(0), std::invalid_argument);
  EXPECT_THROW(FastDivisor(0x80000000U), std::invalid_argument);
}

}  // namespace
}  // namespace mantissa
