// `mantissa bench matmul`: the matmuls of a linear layer's training step (forward, and the two products
// of its backward pass) timed against the machine's peak measured in the same process.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench_model.h"
#include "commands.h"
#include "number_flags.h"
#include "spelling.h"
#include "mantissa/autograd/node.h"
#include "mantissa/core/memory.h"
#include "mantissa/backend/kernel_timer.h"
#include "mantissa/ops/ops.h"
#include "output_flags.h"
#include "peak_flops.h"

namespace mantissa::cli {
namespace {

// --dtype: fp32, bf16 or fp16, in any spelling the precision flags take (f16, float16, ...).
DType dtype_option(const std::string& name) {
  try {
    return train::parse_precision(name);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--dtype: ") + e.what());
  }
}

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
  const DType dtype = dtype_option(a.dtype);
  if (a.m <= 0 || a.k <= 0 || a.n <= 0 || a.repeat <= 0) {
    throw std::invalid_argument("bench matmul: --m, --k, --n and --repeat must be positive");
  }
  const int threads = use_threads(a.threads);

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

struct MlpArgs {
  int layers = 4;
  std::int64_t width = 1024, batch = 256;
  std::string dtype = "f32";
  int steps = 10;
  int threads = 0;
  bool json = false;
};

// Forward and backward of an MLP (linear + ReLU layers, cross-entropy over `width` classes), with
// every parameter and activation in one dtype, and where the time goes: oneDNN's primitives, the other
// kernels by family, and what is left (front-ends, autograd, allocation).
int run_mlp(const MlpArgs& a) {
  const DType dtype = dtype_option(a.dtype);
  if (a.layers <= 0 || a.width <= 0 || a.batch <= 0 || a.steps <= 0) {
    throw std::invalid_argument("bench mlp: --layers, --width, --batch and --steps must be positive");
  }
  const int threads = use_threads(a.threads);
  std::vector<Tensor> weights, biases;
  {
    MemoryCategoryScope params(MemoryCategory::parameters);
    const double scale = 1.0 / std::sqrt(static_cast<double>(a.width));
    for (int i = 0; i < a.layers; ++i) {
      weights.push_back(Tensor::uniform({a.width, a.width}, dtype, 10 + i, -scale, scale).set_requires_grad());
      biases.push_back(Tensor::zeros({a.width}, dtype).set_requires_grad());
    }
  }
  const Tensor x = Tensor::uniform({a.batch, a.width}, dtype, 1, -1, 1);
  std::vector<std::int64_t> targets(static_cast<std::size_t>(a.batch));
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int64_t>((i * 7919) % a.width);

  const auto step = [&] {
    Tensor h = x;
    for (int i = 0; i < a.layers; ++i) {
      h = linear(h, weights[i], biases[i]);
      if (i + 1 < a.layers) h = relu(h);
    }
    cross_entropy(h, targets).backward();
    for (int i = 0; i < a.layers; ++i) {
      weights[i].zero_grad();
      biases[i].zero_grad();
    }
  };
  step();  // warm-up: primitives created, memory touched
  step();
  reset_kernel_times();
  reset_peak_memory();
  std::vector<double> ms;
  for (int s = 0; s < a.steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double total_s = std::accumulate(ms.begin(), ms.end(), 0.0) / 1e3;
  std::sort(ms.begin(), ms.end());
  const KernelTimes kt = kernel_times();
  double backend_s = 0;
  for (const auto& [family, sec] : kt.backend_seconds) backend_s += sec;
  nlohmann::json out = {{"layers", a.layers}, {"width", a.width}, {"batch", a.batch}, {"dtype", a.dtype},
                        {"threads", threads}, {"ms_per_step", ms[ms.size() / 2]},
                        {"onednn_fraction", kt.onednn_seconds / total_s},
                        {"outside_onednn_fraction", 1 - kt.onednn_seconds / total_s},
                        {"outside_kernels_fraction", 1 - backend_s / total_s}};
  for (const auto& [family, sec] : kt.backend_seconds) out["kernel_fraction"][family] = sec / total_s;
  const MemoryStats mem = memory_stats();
  for (std::size_t c = 0; c < kMemoryCategories; ++c) {
    out["peak_bytes"][std::string(category_name(static_cast<MemoryCategory>(c)))] = mem.peak[c];
  }
  if (a.json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("MLP {} x {} wide, batch {}, {}, {} threads: {:.2f} ms per step (median of {})\n", a.layers, a.width,
             a.batch, a.dtype, threads, ms[ms.size() / 2], a.steps);
  fmt::print("  inside oneDNN primitives  {:5.1f}%\n", 100 * kt.onednn_seconds / total_s);
  for (const auto& [family, sec] : kt.backend_seconds) fmt::print("  kernels: {:<16} {:5.1f}%\n", family, 100 * sec / total_s);
  fmt::print("  outside kernels           {:5.1f}%  (front-ends, autograd, allocation)\n", 100 * (1 - backend_s / total_s));
  return 0;
}

}  // namespace

Run add_bench(CLI::App& app) {
  app.require_subcommand(0, 1);
  auto model = std::make_shared<ModelBenchArgs>();
  app.add_option("--model", model->model, "Time training steps of gpt-small, gpt-wide, gpt2-124m or cnn");
  app.add_option("--precisions", model->precision, "fp32, bf16, fp16, fp8, or several, comma-separated")->capture_default_str();
  add_old_spelling(app, "--precision", "--precisions", model->precision);
  app.add_option("--fp8-recipe", model->fp8_recipe, "For fp8: delayed, current, block, or several, comma-separated")
      ->capture_default_str();
  app.add_option("--fp8-format", model->fp8_format, "For fp8: hybrid or e4m3")->capture_default_str();
  app.add_option("--amax-history", model->amax_history, "For fp8 delayed: steps of amax history")->capture_default_str();
  app.add_option("--fp8-margin", model->fp8_margin, "For fp8: scales divided by 2^margin")->capture_default_str();
  app.add_option("--numerics", model->numerics, "off, trace (the non-finite tracer), telemetry (every step), or several, "
                                               "comma-separated: their cost against off")->capture_default_str();
  app.add_option("--mode", model->mode, "autocast, low-precision-model, or both, comma-separated")->capture_default_str();
  app.add_option("--fp32-ops", model->fp32_ops, "As train's: default, none, or default with more ops in fp32 (default,attention)")
      ->capture_default_str();
  app.add_option("--threads", model->threads, "Threads (default: all)");
  app.add_option("--device", model->device, "cpu, or cuda: time the steps on the GPU")->capture_default_str();
  app.add_flag("--tf32", model->tf32, "On the GPU: fp32 products on TF32 tensor cores (10-bit mantissa inputs)");
  app.add_option("--steps", model->steps, "Timed steps; the median is reported")->capture_default_str();
  app.add_option("--warmup", model->warmup, "Untimed steps first")->capture_default_str();
  app.add_flag("--json", model->json, "One JSON object on standard output");
  app.add_option("--data", model->data, "Data directory or file (default: the fortunes, or Fashion-MNIST)");
  add_output_file(app, "--export", model->export_path,
                 "Write the initial weights, the first batch and its loss here (safetensors, for bench/pytorch)");
  app.add_option("--seed", model->seed, "Initialisation seed")->capture_default_str();
  app.add_option("--n-layer", model->n_layer, "GPT blocks (default: the model's)")->check(CLI::PositiveNumber);
  app.add_option("--n-head", model->n_head, "GPT attention heads")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", model->n_embd, "GPT embedding width")->check(CLI::PositiveNumber);
  app.add_option("--block-size", model->block_size, "GPT tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--gelu", model->gelu, "GPT: the MLP's GELU, erf or tanh (GPT-2's form)")->capture_default_str();
  app.add_option("--batch-size", model->batch_size, "Sequences or images per step")->check(CLI::PositiveNumber);
  app.add_option("--width", model->width, "CNN channels of the first stage")->check(CLI::PositiveNumber);
  app.add_option("--grad-reduce", model->grad_reduce, "Under mpirun: the gradients' wire format, f32, bf16 or fp16 (each rank "
                                                      "trains on --batch-size rows)")
      ->capture_default_str();
  app.add_option("--bucket-mb", model->bucket_mb, "Under mpirun: MiB of (f32) gradients per all-reduce bucket")
      ->capture_default_str();
  add_on_off_option(app, "--overlap", model->overlap, "Under mpirun: send gradient buckets while backward runs (on) or after (off)");
  CLI::App* mm = app.add_subcommand("matmul", "Time a training step's matmuls against the measured peak");
  auto args = std::make_shared<MatmulArgs>();
  mm->add_option("--m", args->m, "Rows of the input (batch x tokens)")->capture_default_str();
  mm->add_option("--k", args->k, "Input features")->capture_default_str();
  mm->add_option("--n", args->n, "Output features")->capture_default_str();
  mm->add_option("--dtype", args->dtype, "fp32, bf16 or fp16")->capture_default_str();
  mm->add_option("--threads", args->threads, "Threads (default: all)");
  mm->add_option("--repeat", args->repeat, "Timed runs per pass; the median is reported")->capture_default_str();
  mm->add_flag("--json", args->json, "One JSON object on standard output");
  CLI::App* mlp = app.add_subcommand("mlp", "Time an MLP's forward and backward, and where the time goes");
  auto margs = std::make_shared<MlpArgs>();
  mlp->add_option("--layers", margs->layers, "Linear layers")->capture_default_str();
  mlp->add_option("--width", margs->width, "Features of every layer (and classes)")->capture_default_str();
  mlp->add_option("--batch", margs->batch, "Batch size")->capture_default_str();
  mlp->add_option("--dtype", margs->dtype, "fp32, bf16 or fp16 (parameters and activations)")->capture_default_str();
  mlp->add_option("--steps", margs->steps, "Timed steps; the median is reported")->capture_default_str();
  mlp->add_option("--threads", margs->threads, "Threads (default: all)");
  mlp->add_flag("--json", margs->json, "One JSON object on standard output");
  // The parent's run: whichever subcommand was given.
  return [args, margs, model, mm, mlp] {
    if (mm->parsed()) return run_matmul(*args);
    if (mlp->parsed()) return run_mlp(*margs);
    if (model->model.empty()) throw std::invalid_argument("bench: give --model gpt-small|gpt-wide|cnn, or matmul, or mlp");
    return run_model_bench(*model);
  };
}

}  // namespace mantissa::cli
