// Peak measurement kernels. Each function carries its own target attribute and runs only when CPUID
// says the CPU has the instructions. Independent accumulator chains hide the instruction latency (4
// cycles) behind two issue ports, at least 8 of them; the loop body has no loads. AVX-512 has 32
// registers, enough for 20 chains; AVX2 has 16, so it runs 12: with 20 the accumulators spilled to the
// stack, which held a Zen 3 core at 72 of its 101 GFLOP/s.
#include "peak_flops.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "mantissa/numeric/bulk.h"
#include "mantissa/backend/backend_select.h"

namespace mantissa::cli {
namespace {

constexpr long kIterations = 4'000'000;
constexpr int kChains = 20;
constexpr int kChainsAvx2 = 12;  // and the two operands: 14 of the 16 ymm registers
static_assert(kChainsAvx2 + 2 <= 16 && kChainsAvx2 >= 8, "AVX2's chains must fit its 16 registers and cover the latency");
static_assert(kChains + 2 <= 32 && kChains >= 8, "AVX-512's chains must fit its 32 registers and cover the latency");
volatile float observed;  // the kernels' results go here, so the compiler must compute them

__attribute__((target("avx512f"))) float fma_avx512(long iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 20
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx2,fma"))) float fma_avx2(long iters) {
  __m256 acc[kChainsAvx2];
  for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChainsAvx2; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 s = acc[0];
  for (int c = 1; c < kChainsAvx2; ++c) s = _mm256_add_ps(s, acc[c]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) float dpbf16_avx512(long iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 20
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  __m512 s = acc[0];
  for (int c = 1; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0];
}

// AMX: CPUID leaf 7 EDX bits 22 (AMX-BF16) and 24 (AMX-TILE), and the kernel's permission to use tile
// data, which Linux grants per process on request.
bool amx_usable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if ((d & (1U << 22)) == 0 || (d & (1U << 24)) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};

// Four independent 16x16 f32 accumulator tiles, each TDPBF16PS a 16x32 by 32x16 bf16 product.
__attribute__((target("amx-tile,amx-bf16"))) float dpbf16_amx(long iters) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&cfg);
  alignas(64) static thread_local std::uint16_t data[16 * 32];
  for (auto& v : data) v = 0x3c00;  // small bf16 values
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, data, 64);
  _tile_loadd(5, data, 64);
  _tile_loadd(6, data, 64);
  _tile_loadd(7, data, 64);
  for (long i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

// Runs kernel on every thread and returns flops per second (flops_per_iteration per thread per iteration).
template <class Kernel>
double measure(int threads, Kernel kernel, double flops_per_iteration) {
  kernel(kIterations / 20);  // warm up: clocks and the AVX-512 licence
  float sink = 0;  // keeps the results alive
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float r = kernel(kIterations);
#pragma omp critical
      sink += r;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops_per_iteration * static_cast<double>(kIterations) * threads / s);
  }
  observed = sink;
  return best;
}

}  // namespace

Peak f32_peak(int threads) {
  if (active_isa() >= Isa::avx512) {  // MANTISSA_ISA=avx2 measures the AVX2 peak, as oneDNN capped runs
    return {measure(threads, fma_avx512, 2.0 * 16 * kChains) / 1e9, "vfmadd231ps zmm"};
  }
  return {measure(threads, fma_avx2, 2.0 * 8 * kChainsAvx2) / 1e9, "vfmadd231ps ymm"};
}

bool amx_bf16_usable() {
  static const bool usable = amx_usable();
  return usable;
}

std::optional<Peak> amx_bf16_peak(int threads) {
  if (!amx_bf16_usable() || !onednn_supports(OnednnPrimitive::matmul, DType::bf16)) return std::nullopt;
  // Each TDPBF16PS: 16 x 16 outputs x 32 products x 2 flops; four per iteration. Fewer iterations: each
  // instruction does 256 times the work of a vector one.
  return Peak{measure(threads, [](long n) { return dpbf16_amx(n / 64); }, 4.0 * 16 * 16 * 32 * 2 / 64) / 1e9,
              "tdpbf16ps (AMX)"};
}

std::optional<Peak> bf16_peak(int threads) {
  if (active_isa() < Isa::avx512_bf16 || !onednn_supports(OnednnPrimitive::matmul, DType::bf16)) return std::nullopt;
  // vdpbf16ps zmm: 16 lanes x 2 products x (multiply + add) = 64 flops.
  return Peak{measure(threads, dpbf16_avx512, 64.0 * kChains) / 1e9, "vdpbf16ps zmm"};
}

}  // namespace mantissa::cli
