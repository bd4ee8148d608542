// The CPU's f32 products in the layouts its AVX2 path rearranges before oneDNN's gemm (cpu_matmul.cpp,
// avx2_gemm): a weight read along a 4 KiB-aliased stride (reordered into [N, K]) and a transposed a read
// along one (copied a block of rows at a time into a workspace), with a bias, against the reference on
// fresh random inputs. The rearranging runs where oneDNN has no AVX-512: in the "avx2:" copy of this
// test, and on AVX2-only CPUs; elsewhere the same products go straight to oneDNN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../../src/backend/registry.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/ops/ops.h"
#include "test_support.h"

namespace mantissa {
namespace {

std::vector<double> product(CpuBackend backend, const Tensor& a, const Tensor& w, const Tensor& bias) {
  CpuBackendScope scope(backend);
  const Tensor out = Tensor::empty({1, a.size(1), w.size(2)}, DType::f32);
  detail::run_kernel<detail::kernel::Matmul>(Device::cpu(), a, w, bias, out);
  return out.to_doubles();
}

TEST(MatmulLayouts, AliasedStridesGiveTheReferencesProduct) {
  MANTISSA_TRACE_SEED();
  const std::uint64_t seed = testing::test_seed();
  struct Case {
    std::string name;
    std::int64_t m, k, n;
    bool transposed_a;  // a stored [K, M] (else [M, K])
  };
  // M 1024 and 3072 (rows 4 KiB and 12 KiB apart) with N <= 256: the transposed a in workspace blocks;
  // M <= 256 with a row-major w N 1024 wide: the reordered w.
  const Case cases[] = {{"transposed a, M 1024", 1024, 96, 64, true},
                        {"transposed a, M 3072", 3072, 40, 256, true},
                        {"aliased w", 200, 64, 1024, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Tensor a = c.transposed_a ? transpose(Tensor::uniform({1, c.k, c.m}, DType::f32, seed, -2, 2), 1, 2)
                                    : Tensor::uniform({1, c.m, c.k}, DType::f32, seed, -2, 2);
    const Tensor w = Tensor::uniform({1, c.k, c.n}, DType::f32, seed + 1, -2, 2);
    const Tensor bias = Tensor::uniform({c.n}, DType::f32, seed + 2, -1, 1);
    const std::vector<double> want = product(CpuBackend::reference, a, w, bias);
    const std::vector<double> got = product(CpuBackend::onednn, a, w, bias);
    // Each f32 sum of K products and the bias, in any order, is within (K + 1) eps of the sum of the
    // terms' magnitudes of the exact one: the two within twice that of each other.
    const std::vector<double> magnitude = product(CpuBackend::reference, abs(a), abs(w), abs(bias));
    std::int64_t outside = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double bound = 2.0 * static_cast<double>(c.k + 1) * 0x1p-24 * magnitude[i];
      outside += std::abs(got[i] - want[i]) > bound ? 1 : 0;
    }
    EXPECT_EQ(outside, 0);
  }
}

}  // namespace
}  // namespace mantissa
