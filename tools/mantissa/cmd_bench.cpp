// `mantissa bench matmul`: the matmuls of a linear layer's training step (forward, and the two products
// of its backward pass) timed against the machine's peak measured in the same process.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/ops/ops.h"
#include "peak_flops.h"

namespace mantissa::cli {
namespace {

struct MatmulArgs {
  std::int64_t m = 8192, k = 768, n = 3072;
  std::string dtype = "bf16";
  int threads = 0;
  int repeat = 5;
  bool json = false;
};

// Median milliseconds of `repeat` timed runs after two warm-up runs.
template <class Fn>
double median_ms(int repeat, Fn&& fn) {
  fn();
  fn();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int run_matmul(const MatmulArgs& a) {
  const DType dtype = parse_dtype(a.dtype);
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f16) {
    throw std::invalid_argument("bench matmul: --dtype must be f32, bf16 or f16");
  }
  if (a.m <= 0 || a.k <= 0 || a.n <= 0 || a.repeat <= 0) {
    throw std::invalid_argument("bench matmul: --m, --k, --n and --repeat must be positive");
  }
  const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  omp_set_num_threads(threads);

  // The peak this dtype's matmul can reach: bf16 runs on AMX tiles where the CPU has them (oneDNN picks
  // them), else on vdpbf16ps; f16 (and bf16 without either) is computed in f32. The vector bf16 peak is
  // reported beside the AMX one.
  std::optional<Peak> vector_bf16;
  std::optional<Peak> amx;
  if (dtype == DType::bf16) {
    vector_bf16 = bf16_peak(threads);
    amx = amx_bf16_peak(threads);
  }
  const Peak peak = amx ? *amx : vector_bf16 ? *vector_bf16 : f32_peak(threads);

  NoGradGuard no_grad;
  reset_peak_memory();
  // A linear layer's three products, its weight stored [N, K] as linear() takes it.
  const Tensor x = Tensor::uniform({a.m, a.k}, dtype, 1, -1, 1);
  const Tensor w = Tensor::uniform({a.n, a.k}, dtype, 2, -1, 1);
  const Tensor dy = Tensor::uniform({a.m, a.n}, dtype, 3, -1, 1);
  struct Pass {
    const char* name;
    std::function<Tensor()> run;
  };
  const Pass passes[] = {
      {"forward", [&] { return matmul(x, transpose(w, 0, 1)); }},             // y = x w^T
      {"backward_data", [&] { return matmul(dy, w); }},                       // dx = dy w
      {"backward_weights", [&] { return matmul(transpose(dy, 0, 1), x); }},  // dw = dy^T x
  };
  const double flops = 2.0 * static_cast<double>(a.m) * static_cast<double>(a.k) * static_cast<double>(a.n);
  nlohmann::json out = {{"m", a.m}, {"k", a.k}, {"n", a.n}, {"dtype", a.dtype}, {"threads", threads},
                        {"peak_gflops", peak.gflops}, {"peak_instruction", peak.instruction}};
  if (amx && vector_bf16) out["vector_bf16_peak_gflops"] = vector_bf16->gflops;
  if (!a.json) {
    fmt::print("matmul {}x{}x{} {}, {} threads; peak {:.0f} GFLOP/s ({})\n", a.m, a.k, a.n, a.dtype, threads,
               peak.gflops, peak.instruction);
    if (amx && vector_bf16) fmt::print("(vdpbf16ps peak: {:.0f} GFLOP/s)\n", vector_bf16->gflops);
    fmt::print("{:<18} {:>10} {:>12} {:>10}\n", "pass", "ms", "GFLOP/s", "of peak");
  }
  for (const Pass& p : passes) {
    const double ms = median_ms(a.repeat, p.run);
    const double gflops = flops / ms / 1e6;
    out["passes"][p.name] = {{"ms", ms}, {"gflops", gflops}, {"peak_gflops", peak.gflops},
                             {"fraction_of_peak", gflops / peak.gflops}};
    if (!a.json) fmt::print("{:<18} {:>10.2f} {:>12.1f} {:>9.1f}%\n", p.name, ms, gflops, 100 * gflops / peak.gflops);
  }
  const MemoryStats mem = memory_stats();
  for (std::size_t c = 0; c < kMemoryCategories; ++c) {
    out["peak_bytes"][std::string(category_name(static_cast<MemoryCategory>(c)))] = mem.peak[c];
  }
  out["peak_bytes"]["total"] = mem.peak_total;
  if (a.json) {
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("peak memory {:.1f} MiB\n", static_cast<double>(mem.peak_total) / (1 << 20));
  }
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  app.require_subcommand(1);
  CLI::App* mm = app.add_subcommand("matmul", "Time a training step's matmuls against the measured peak");
  auto args = std::make_shared<MatmulArgs>();
  mm->add_option("--m", args->m, "Rows of the input (batch x tokens)")->capture_default_str();
  mm->add_option("--k", args->k, "Input features")->capture_default_str();
  mm->add_option("--n", args->n, "Output features")->capture_default_str();
  mm->add_option("--dtype", args->dtype, "f32, bf16 or f16")->capture_default_str();
  mm->add_option("--threads", args->threads, "Threads (default: all)");
  mm->add_option("--repeat", args->repeat, "Timed runs per pass; the median is reported")->capture_default_str();
  mm->add_flag("--json", args->json, "One JSON object on standard output");
  return [args] { return run_matmul(*args); };
}

}  // namespace mantissa::cli
