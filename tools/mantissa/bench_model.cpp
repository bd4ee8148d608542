// `mantissa bench --model gpt-small|gpt-wide|gpt2-124m|cnn`: whole training steps of train::Trainer
// (forward, backward, loss scaling, AdamW with f32 master weights) timed per precision and master-weight
// mode after warm-up, on the CPU or the GPU (--device), with where the time goes, the model FLOP/s
// against the peak measured in the same run, the bytes per second of the parts without products against
// the copy rate measured in the same run, peak memory by category, and the ratios to fp32. Data
// preparation is timed apart and not counted in a step. (On the GPU, where the time goes is timed on the
// GPU's own clock, over two more steps: the kernels run asynchronously.)
#include "bench_model.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "mantissa/autograd/node.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/core/memory.h"
#include "mantissa/core/storage.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/ops/ops.h"
#include "mantissa/backend/kernel_timer.h"
#include "mantissa/train/builders.h"
#include "mantissa/train/trainer.h"
#include "copy_rate.h"
#include "number_flags.h"
#include "peak_flops.h"
#include "training.h"

namespace mantissa::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// The named shapes, for the sizes no flag set (0: a given size is positive, checked by its flag).
void apply_preset(ModelBenchArgs& a) {
  const auto preset = [](std::int64_t& field, std::int64_t value) {
    if (field == 0) field = value;
  };
  if (a.model == "gpt-small") {
    preset(a.n_layer, 4), preset(a.n_head, 4), preset(a.n_embd, 256), preset(a.block_size, 128);
    preset(a.batch_size, 16);
  } else if (a.model == "gpt-wide") {
    preset(a.n_layer, 4), preset(a.n_head, 12), preset(a.n_embd, 768), preset(a.block_size, 256);
    preset(a.batch_size, 8);
  } else if (a.model == "gpt2-124m") {
    // GPT-2 small as llm.c and the PyTorch figures time it: the vocabulary padded to 50304 (the
    // byte-level data uses its first 256 entries; the classifier costs what GPT-2's does).
    preset(a.n_layer, 12), preset(a.n_head, 12), preset(a.n_embd, 768), preset(a.block_size, 1024);
    preset(a.batch_size, 16), preset(a.vocab, 50304);
  } else if (a.model == "cnn") {
    preset(a.width, 32), preset(a.batch_size, 256);
  } else {
    throw std::invalid_argument("bench --model: '" + a.model + "' is not gpt-small, gpt-wide, gpt2-124m or cnn");
  }
  preset(a.vocab, 256);
  if (a.gelu != "erf" && a.gelu != "tanh") throw std::invalid_argument("bench --gelu: '" + a.gelu + "' is not erf or tanh");
}

std::string precision_name(DType d) { return std::string(train::precision_name(d)); }

struct Variant {
  DType precision;
  bool low_precision_model;
  std::optional<QuantRecipe> fp8 = std::nullopt;  // bf16 with FP8 products by this recipe
  std::string numerics = "off";                 // the tracer ("trace") or telemetry every step ("telemetry")
  std::string fp32_ops = "default";             // --fp32-ops, for the low precisions (fp32 runs none)
  std::string name() const {
    return fp8 ? "fp8-" + std::string(fp8->name()) : precision_name(precision);
  }
  std::string label() const {
    return name() + (precision == DType::f32 ? "" : low_precision_model ? " lpm" : " autocast") +
           (numerics == "off" ? "" : " +" + numerics) + (precision == DType::f32 || fp32_ops == "default" ? "" : " fp32-ops " + fp32_ops);
  }
  bool same_run_as(const Variant& v) const {
    return precision == v.precision && low_precision_model == v.low_precision_model && fp8 == v.fp8;
  }
};

std::vector<Variant> variants(const ModelBenchArgs& a) {
  std::vector<Variant> out;
  std::string fp32_ops;  // in the library's spelling
  try {
    train::PrecisionPolicy policy{DType::bf16};
    train::set_fp32_ops(policy, a.fp32_ops);
    fp32_ops = train::fp32_ops_setting(policy);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("bench --fp32-ops: ") + e.what());
  }
  for (const std::string& p : train::comma_words(a.precision)) {
    DType d = DType::f32;
    std::vector<std::optional<QuantRecipe>> recipes{std::nullopt};
    try {
      // The library's one reading of a precision name: a microscaled recipe's is bf16 with that recipe
      // (bench read them as bf16 and timed no quantized step); fp8 takes its recipes from --fp8-recipe.
      const train::PrecisionPolicy policy = train::parse_precision_policy(p);
      d = policy.compute;
      if (policy.fp8 && policy.fp8->microscaled()) {
        recipes = {policy.fp8->recipe};
      } else if (policy.fp8) {
        recipes.clear();
        for (const std::string& r : train::comma_words(a.fp8_recipe)) recipes.emplace_back(QuantRecipe::parse(r));
        QuantOptions{.format = parse_fp8_format(a.fp8_format), .amax_history = a.amax_history, .margin = a.fp8_margin}.check();
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("bench --precision/--fp8-*: ") + e.what());
    }
    for (const std::string& m : train::comma_words(a.mode)) {
      bool lpm = false;
      try {
        lpm = train::parse_precision_mode(m) == train::PrecisionMode::low_precision_model;
      } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string("bench --mode: ") + e.what());
      }
      if (d == DType::f32 && lpm) continue;  // fp32 has one mode
      for (const auto& r : recipes) {
        for (const std::string& n : train::comma_words(a.numerics)) {
          if (n != "off" && n != "trace" && n != "telemetry") {
            throw std::invalid_argument("bench --numerics: '" + n + "' is not off, trace or telemetry");
          }
          out.push_back({d, lpm, r, n, fp32_ops});
        }
      }
    }
    if (d == DType::f32 && std::none_of(out.begin(), out.end(), [](const Variant& v) { return v.precision == DType::f32; })) {
      out.push_back({d, false});
    }
  }
  if (out.empty()) throw std::invalid_argument("bench: no precision and mode to run");
  return out;
}

// The model kind a bench model is built as (its sizes set apart): "gpt" or "cnn".
std::string_view model_kind(const ModelBenchArgs& a) { return a.model == "cnn" ? "cnn" : "gpt"; }

// The bench's model, as the data shapes it.
std::unique_ptr<train::Model> make_bench_model(const ModelBenchArgs& a, const train::Dataset& data) {
  const std::string_view kind = model_kind(a);
  return train::make_model(kind,
                           {.width = a.width, .n_layer = a.n_layer, .n_head = a.n_head, .n_embd = a.n_embd,
                            .block_size = a.block_size, .vocab = a.vocab, .gelu_tanh = a.gelu == "tanh"},
                           train::data_shape(kind, data), a.seed);
}

// A quantized variant whose plan quantizes no layer of the model would time a bf16 step under another
// name: refused, before anything is timed (the CNN's one linear layer is its head, which stays bf16).
void check_quantizes(const ModelBenchArgs& a, const std::vector<Variant>& vs, const train::Dataset& data) {
  for (const Variant& v : vs) {
    if (!v.fp8) continue;
    const std::unique_ptr<train::Model> model = make_bench_model(a, data);
    const train::PrecisionPolicy policy{DType::bf16, train::PrecisionMode::autocast, QuantOptions{.recipe = *v.fp8}};
    const train::PrecisionPlan plan = train::plan_precision(model->module(), policy);
    if (!plan.quantizes()) {
      throw std::invalid_argument("bench --model " + a.model + ": " + v.name() + " quantizes no layer of this model (only linear "
                                  "layers are, and the first and the last stay bf16), so its step would be bf16's");
    }
  }
}

// One model in one precision, trained by the library's Trainer, and the batch it trains on: drawn from
// the real data set and prepared (cast to the model's input dtype) before the step is timed.
class Bench {
 public:
  // (The real data set, loaded once for every variant before anything is timed or printed, so a bad
  // path is the only thing reported; each variant draws its batches from a copy of it.)
  Bench(const ModelBenchArgs& a, const Variant& v, const train::Dataset& data) : a_(a), v_(v), text_(a.model != "cnn") {
    const std::string_view kind = model_kind(a);
    model_ = make_bench_model(a, data);
    // Data parallel: each rank its batch_size rows of a global batch ranks times as large.
    const auto group = process_group();
    ranks_ = group->size();
    data_ = train::make_source(kind, data,
                               {.batch_size = a.batch_size * ranks_, .window = a.block_size, .eval_batches = 1, .seed = text_ ? 7 : a.seed});
    train::TrainerOptions o;
    o.precision = {v.precision, v.low_precision_model ? train::PrecisionMode::low_precision_model
                                                      : train::PrecisionMode::autocast};
    if (v.precision != DType::f32) train::set_fp32_ops(o.precision, v.fp32_ops);
    if (v.fp8) {
      o.precision.fp8 = QuantOptions{.recipe = *v.fp8, .format = parse_fp8_format(a.fp8_format),
                                   .amax_history = a.amax_history, .margin = a.fp8_margin};
    }
    o.optimizer = {.kind = train::OptimizerKind::adamw, .lr = 1e-3, .weight_decay = 0.01,
                   .master = {true, Rounding::nearest_even, a.seed + 17, false}};
    o.trace_nonfinite = v.numerics == "trace";
    if (v.numerics == "telemetry") o.telemetry = train::TelemetryPolicy{.every = 1};
    o.device = device_option(a.device);
    o.steps = std::numeric_limits<std::int64_t>::max() / 2;
    o.eval_every = o.steps;
    if (ranks_ > 1) {
      train::RunOptions wire_format;  // the format's one rule, as `train --grad-reduce` reads it
      train::set_run_option(wire_format, "grad_reduce", a.grad_reduce);
      const DType wire = wire_format.grad_reduce;
      o.data_parallel = train::DataParallelOptions{.group = group, .reducer = {.wire = wire,
                                                               .bucket_bytes = static_cast<std::int64_t>(a.bucket_mb * (1 << 20)),
                                                               .overlap = a.overlap},
                                                   .checksum_every = 0,
                                                   .inject_rank = -1,
                                                   .settings = {{"bench --model", a.model}}};
    }
    trainer_ = std::make_unique<train::Trainer>(*model_, *data_, o);
  }

  // Draws and prepares the next batch; returns the milliseconds it took.
  double next_batch() {
    const auto t0 = Clock::now();
    batch_ = trainer_->prepare(data_->next());
    return ms_since(t0);
  }

  // The loss of the current batch, without a step (for the first-step check against PyTorch).
  double loss() {
    NoGradGuard no_grad;
    return trainer_->loss(batch_).item();
  }

  // One training step on the current batch.
  train::StepRecord step() { return trainer_->step(std::span<const train::Batch>(&batch_, 1)); }

  double loss_scale() { return trainer_->scaler().scale(); }
  // Of every rank together.
  double items_per_step() const { return static_cast<double>(a_.batch_size * ranks_ * (text_ ? a_.block_size : 1)); }
  int ranks() const { return ranks_; }

  // The model's parameters (f32) and the batch, for bench/pytorch to start from the same point.
  void export_to(const std::filesystem::path& path, double first_loss) const {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [name, p] : model_->module().named_parameters()) tensors.emplace_back(name, cast(p.detach(), DType::f32));
    if (!text_) tensors.emplace_back("input.images", cast(batch_.inputs, DType::f32));
    const nlohmann::json meta_inputs = text_ ? nlohmann::json(batch_.tokens) : nlohmann::json::array();
    write_safetensors(path, tensors,
                      {{"model", a_.model}, {"precision", v_.label()}, {"inputs", meta_inputs.dump()},
                       {"targets", nlohmann::json(batch_.targets).dump()}, {"first_loss", fmt::format("{:.9g}", first_loss)},
                       {"n_layer", std::to_string(a_.n_layer)}, {"n_head", std::to_string(a_.n_head)},
                       {"n_embd", std::to_string(a_.n_embd)}, {"block_size", std::to_string(a_.block_size)},
                       {"gelu", a_.gelu},
                       {"batch_size", std::to_string(a_.batch_size)}, {"width", std::to_string(a_.width)}});
  }

 private:
  const ModelBenchArgs& a_;
  Variant v_;
  bool text_;
  int ranks_ = 1;
  std::unique_ptr<train::Model> model_;
  std::unique_ptr<train::DataSource> data_;
  std::unique_ptr<train::Trainer> trainer_;
  train::Batch batch_;
};

struct Result {
  Variant variant;
  std::vector<double> step_ms;  // sorted
  double data_ms = 0;           // median batch preparation, not in step_ms
  double flops_per_step = 0;
  double peak_gflops = 0;
  std::string peak_instruction;
  std::map<std::string, double> seconds_by_part;  // over all timed steps
  // Over the same steps, by the same parts: the bytes their kernels' tensors hold and their products' FLOPs.
  std::map<std::string, double> bytes_by_part, flops_by_part;
  double timed_seconds = 0;
  std::map<std::string, std::int64_t> peak_bytes;
  double items_per_step = 0, first_loss = 0, last_loss = 0, loss_scale = 0;
  // Data parallel: ranks, and per timed step the bytes this rank sent (mean), the gradient thread's seconds
  // (waiting for the other ranks included) and those backward did not hide (medians).
  int ranks = 1;
  double comm_bytes = 0, comm_seconds = 0, exposed_seconds = 0;
  int buckets = 0;
  // Per timed step (means): copies between host and GPU memory each way, and the times the host waited
  // for the GPU (storage.h's count; the step alone, not the bench's own synchronization after it).
  double to_host = 0, from_host = 0, waits = 0;
  // Per timed step (means, ms): how long those waits took, and the bench's own wait for the step's last
  // kernels (a launch blocked on a full queue is neither: that shows as a step longer than both).
  double wait_ms = 0, tail_ms = 0;
  // Per timed step (mean): the FP8 products that ran on a GPU's fp8 tensor cores (cuda_fp8_products();
  // 0 on the CPU, and where they fell back to bf16 products).
  double fp8_tensor_core_products = 0;

  double median_ms() const { return step_ms[step_ms.size() / 2]; }
};

// The peak of the arithmetic a precision's matmuls run on: AMX or vdpbf16ps for bf16 where the CPU has
// them, f32 FMA otherwise (fp16 is computed in f32 on this CPU).
Peak peak_for(DType precision, int threads) {
  if (precision == DType::bf16) {
    if (auto amx = amx_bf16_peak(threads)) return *amx;
    if (auto vec = bf16_peak(threads)) return *vec;
  }
  return f32_peak(threads);
}

// On the GPU: the rate of mantissa's product kernel itself (cuBLASLt) on an 8192^3 product in the
// precision's dtype (f32 without TF32 unless it is allowed), measured in this run.
Peak gpu_matmul_peak(DType precision) {
  const Device gpu{DeviceType::cuda, 0};
  constexpr std::int64_t n = 8192;
  NoGradGuard no_grad;
  const Tensor a = cast(Tensor::uniform({n, n}, DType::f32, 1, -1, 1).to(gpu), precision);
  const Tensor w = cast(Tensor::uniform({n, n}, DType::f32, 2, -1, 1).to(gpu), precision);
  for (int i = 0; i < 3; ++i) (void)matmul(a, w);
  cuda_synchronize();
  constexpr int kTimes = 10;
  const auto t0 = Clock::now();
  for (int i = 0; i < kTimes; ++i) (void)matmul(a, w);
  cuda_synchronize();
  const double seconds = ms_since(t0) / 1e3;
  return {2.0 * n * n * n * kTimes / seconds / 1e9, fmt::format("cuBLASLt {} {}^3 on the GPU", dtype_name(precision), n)};
}

// On a GPU the host's kernel times count launches: the breakdown is timed on the GPU's own clock instead
// (an event pair around each kernel), over kProfiledSteps steps run after the timed ones (the events
// cost host time), scaled to the timed steps. What the GPU's clock does not cover is "gpu idle": the GPU
// waiting for the host (front-ends, autograd, launches) or for a copy.
constexpr int kProfiledSteps = 2;

void gpu_breakdown(Bench& bench, int timed_steps, Result& r) {
  reset_kernel_times();
  for (int i = 0; i < kProfiledSteps; ++i) {
    set_device_kernel_timing(true);
    bench.step();
    set_device_kernel_timing(false);
    bench.next_batch();  // not part of a step, as in the timed ones
  }
  const double scale = static_cast<double>(timed_steps) / kProfiledSteps;
  double on_gpu = 0;
  for (const auto& [part, s] : device_kernel_seconds()) {
    r.seconds_by_part[part] = s * scale;
    on_gpu += s * scale;
  }
  r.seconds_by_part["gpu idle"] = std::max(0.0, r.timed_seconds - on_gpu);
  const KernelTimes kt = kernel_times();
  for (const auto& [part, b] : kt.backend_bytes) r.bytes_by_part[part] = b * scale;
  for (const auto& [part, f] : kt.backend_flops) r.flops_by_part[part] = f * scale;
}

Result run_variant(const ModelBenchArgs& a, const Variant& v, const train::Dataset& data, bool several, int threads) {
  Result r;
  r.variant = v;
  const Device device = device_option(a.device);
  const bool gpu = device.type == DeviceType::cuda;
  const Peak peak = gpu ? gpu_matmul_peak(v.precision) : peak_for(v.precision, threads);
  r.peak_gflops = peak.gflops;
  r.peak_instruction = peak.instruction;
  reset_peak_memory(device);
  Bench bench(a, v, data);
  r.items_per_step = bench.items_per_step();
  bench.next_batch();
  r.first_loss = bench.loss();
  if (!a.export_path.empty()) {
    std::filesystem::path p = a.export_path;
    if (several) {  // one file per variant: name-f32.safetensors, name-bf16-lpm.safetensors, ...
      p.replace_filename(p.stem().string() + "-" + (v.fp8 ? v.name() : std::string(dtype_name(v.precision))) +
                         (v.low_precision_model ? "-lpm" : "") + p.extension().string());
    }
    bench.export_to(p, r.first_loss);
  }
  r.ranks = bench.ranks();
  for (int i = 0; i < a.warmup; ++i) {
    bench.step();
    bench.next_batch();
  }
  reset_kernel_times();
  std::vector<double> data_ms, comm_s, exposed_s;
  for (int i = 0; i < a.steps; ++i) {
    const auto t0 = Clock::now();
    const HostDeviceTraffic before = host_device_traffic();
    const std::int64_t fp8_before = cuda_fp8_products();
    const train::StepRecord rec = bench.step();
    const HostDeviceTraffic after = host_device_traffic();
    r.fp8_tensor_core_products += static_cast<double>(cuda_fp8_products() - fp8_before) / a.steps;
    const auto tail = Clock::now();
    if (gpu) cuda_synchronize();  // the step's last kernels may still be running
    r.tail_ms += ms_since(tail) / a.steps;
    r.step_ms.push_back(ms_since(t0));
    r.last_loss = rec.loss;
    r.comm_bytes += static_cast<double>(rec.comm_bytes) / a.steps;
    comm_s.push_back(rec.comm_seconds);
    exposed_s.push_back(rec.comm_exposed_seconds);
    r.buckets = rec.comm_buckets;
    r.to_host += static_cast<double>(after.to_host - before.to_host) / a.steps;
    r.from_host += static_cast<double>(after.from_host - before.from_host) / a.steps;
    r.waits += static_cast<double>(after.waits - before.waits) / a.steps;
    r.wait_ms += (after.wait_seconds - before.wait_seconds) * 1e3 / a.steps;
    data_ms.push_back(bench.next_batch());
  }
  const KernelTimes kt = kernel_times();
  const MemoryStats mem = memory_stats(device);
  for (std::size_t c = 0; c < kMemoryCategories; ++c) {
    r.peak_bytes[std::string(category_name(static_cast<MemoryCategory>(c)))] = mem.peak[c];
  }
  r.peak_bytes["total"] = mem.peak_total;
  r.timed_seconds = std::accumulate(r.step_ms.begin(), r.step_ms.end(), 0.0) / 1e3;
  r.flops_per_step = kt.matmul_flops / a.steps;
  if (gpu) {
    gpu_breakdown(bench, a.steps, r);
  } else {
    r.bytes_by_part = kt.backend_bytes;
    r.flops_by_part = kt.backend_flops;
    double in_kernels = 0;
    for (const auto& [part, s] : kt.backend_seconds) {
      r.seconds_by_part[part] = s;
      in_kernels += s;
    }
    r.seconds_by_part["outside kernels"] = std::max(0.0, r.timed_seconds - in_kernels);
  }
  r.loss_scale = bench.loss_scale();
  std::sort(r.step_ms.begin(), r.step_ms.end());
  std::sort(data_ms.begin(), data_ms.end());
  r.data_ms = data_ms[data_ms.size() / 2];
  std::sort(comm_s.begin(), comm_s.end());
  std::sort(exposed_s.begin(), exposed_s.end());
  r.comm_seconds = comm_s[comm_s.size() / 2];
  r.exposed_seconds = exposed_s[exposed_s.size() / 2];
  return r;
}

// The parts of a step that run no products, with the bytes per second their kernels moved: what is
// compared with the copy rate.
std::map<std::string, double> bandwidth_by_part(const Result& r) {
  std::map<std::string, double> out;
  for (const auto& [part, bytes] : r.bytes_by_part) {
    const auto s = r.seconds_by_part.find(part);
    const auto f = r.flops_by_part.find(part);
    if (bytes > 0 && s != r.seconds_by_part.end() && s->second > 0 && (f == r.flops_by_part.end() || f->second == 0)) {
      out[part] = bytes / s->second;
    }
  }
  return out;
}

nlohmann::json to_json(const Result& r, const Result* fp32) {
  const double ms = r.median_ms();
  const double gflops = r.flops_per_step / ms / 1e6;
  nlohmann::json j = {{"precision", r.variant.name()},
                      {"mode", r.variant.low_precision_model ? "low-precision-model" : "autocast"},
                      {"ms_per_step", ms},
                      {"ms_min", r.step_ms.front()},
                      {"ms_max", r.step_ms.back()},
                      {"spread", (r.step_ms.back() - r.step_ms.front()) / ms},
                      {"items_per_second", r.items_per_step / ms * 1e3},
                      {"data_ms_per_batch", r.data_ms},
                      {"model_gflops", gflops},
                      {"flops_per_step", r.flops_per_step},
                      {"peak_gflops", r.peak_gflops},
                      {"peak_instruction", r.peak_instruction},
                      {"fraction_of_peak", gflops / r.peak_gflops},
                      {"peak_bytes", r.peak_bytes},
                      {"first_loss", r.first_loss},
                      {"last_loss", r.last_loss},
                      {"loss_scale", r.loss_scale}};
  for (const auto& [part, s] : r.seconds_by_part) j["time_fraction"][part] = s / r.timed_seconds;
  for (const auto& [part, b] : r.bytes_by_part) j["bytes_per_step"][part] = b / static_cast<double>(r.step_ms.size());
  for (const auto& [part, rate] : bandwidth_by_part(r)) j["gbps"][part] = rate / 1e9;
  if (r.ranks > 1) {
    j["ranks"] = r.ranks;
    j["comm_bytes_per_step"] = r.comm_bytes;
    j["comm_ms_per_step"] = r.comm_seconds * 1e3;
    j["comm_exposed_ms_per_step"] = r.exposed_seconds * 1e3;
    j["comm_buckets"] = r.buckets;
    j["comm_hidden_fraction"] = r.comm_seconds > 0 ? 1 - r.exposed_seconds / r.comm_seconds : 0.0;
  }
  j["host_device_per_step"] = {{"to_host", r.to_host}, {"from_host", r.from_host}, {"waits", r.waits},
                               {"wait_ms", r.wait_ms}, {"tail_ms", r.tail_ms}};
  j["fp8_tensor_core_products_per_step"] = r.fp8_tensor_core_products;
  j["numerics"] = r.variant.numerics;
  if (fp32 != nullptr) {
    j["speedup_vs_fp32"] = fp32->median_ms() / ms;
    j["peak_memory_vs_fp32"] = static_cast<double>(r.peak_bytes.at("total")) / static_cast<double>(fp32->peak_bytes.at("total"));
  }
  return j;
}

std::string mib(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1 << 20)); }

void print_table(const ModelBenchArgs& a, const std::vector<Result>& results, const Result* fp32, int threads, double copy_rate) {
  const bool text = a.model != "cnn";
  fmt::print("{}: ", a.model);
  if (text) {
    fmt::print("GPT n_layer {} n_head {} n_embd {} block {} batch {}", a.n_layer, a.n_head, a.n_embd, a.block_size, a.batch_size);
  } else {
    fmt::print("CNN width {} batch {}", a.width, a.batch_size);
  }
  fmt::print(", {} threads, median of {} steps after {} warm-up\n", threads, a.steps, a.warmup);
  if (results.front().ranks > 1) {
    fmt::print("data parallel: {} ranks x batch {} (global {}), gradients as {} on the wire, overlap {}\n", results.front().ranks,
               a.batch_size, a.batch_size * results.front().ranks, a.grad_reduce, a.overlap ? "on" : "off");
    for (const Result& r : results) {
      fmt::print("  {}: {:.2f} MiB sent per step by each rank in {} buckets of {} MiB, gradient thread {:.1f} ms, of it {:.1f} ms after backward "
                 "({:.0f}% hidden)\n",
                 r.variant.label(), r.comm_bytes / (1 << 20), r.buckets, a.bucket_mb, r.comm_seconds * 1e3, r.exposed_seconds * 1e3,
                 r.comm_seconds > 0 ? 100 * (1 - r.exposed_seconds / r.comm_seconds) : 0.0);
    }
  }
  fmt::print("\n");
  fmt::print("{:<14} {:>9} {:>7} {:>11} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7}\n", "precision", "ms/step",
             "spread", text ? "tokens/s" : "images/s", "GFLOP/s", "of pk", "params", "grads", "activ", "optim",
             "peak MiB", "x fp32");
  for (const Result& r : results) {
    const double ms = r.median_ms();
    const double gflops = r.flops_per_step / ms / 1e6;
    fmt::print("{:<14} {:>9.2f} {:>6.0f}% {:>11.0f} {:>9.1f} {:>6.1f}% {:>8} {:>8} {:>8} {:>8} {:>8} {:>7}\n",
               r.variant.label(), ms, 100 * (r.step_ms.back() - r.step_ms.front()) / ms, r.items_per_step / ms * 1e3,
               gflops, 100 * gflops / r.peak_gflops, mib(r.peak_bytes.at("parameters")), mib(r.peak_bytes.at("gradients")),
               mib(r.peak_bytes.at("activations")), mib(r.peak_bytes.at("optimizer_state")), mib(r.peak_bytes.at("total")),
               fp32 != nullptr ? fmt::format("{:.2f}", fp32->median_ms() / ms) : std::string("-"));
  }
  fmt::print("\n(spread = (slowest - fastest) / median; memory columns are peaks in MiB; x fp32 = speed-up)\n");
  fmt::print("peaks: ");
  for (const Result& r : results) fmt::print("{} {:.0f} GFLOP/s ({}); ", r.variant.label(), r.peak_gflops, r.peak_instruction);
  for (const Result& r : results) {
    if (r.variant.numerics == "off") continue;
    for (const Result& plain : results) {
      if (plain.variant.numerics != "off" || !plain.variant.same_run_as(r.variant)) continue;
      const double extra = r.median_ms() / plain.median_ms() - 1;
      fmt::print("\n{}: {:+.1f}% of the step", r.variant.label(), 100 * extra);
      if (r.variant.numerics == "telemetry") {
        const train::TelemetryPolicy defaults;
        fmt::print(" when sampled; {:+.2f}% at the default interval of {} steps", 100 * extra / static_cast<double>(defaults.every),
                   defaults.every);
      }
    }
  }
  if (device_option(a.device).type == DeviceType::cuda) {
    fmt::print("\nhost and GPU, per step (target: 1 wait, the loss):");
    for (const Result& r : results) {
      fmt::print(" {} {:.1f} waits, {:.1f} copies to the host, {:.1f} from it;", r.variant.label(), r.waits, r.to_host, r.from_host);
    }
    fmt::print("\n");
  }
  fmt::print("\ndata preparation, not in a step: {:.2f} ms per batch\n\nwhere a step's time goes (%):\n",
             results.front().data_ms);
  std::map<std::string, double> order;  // parts by their share in the first run, largest first
  for (const Result& r : results) {
    for (const auto& [part, s] : r.seconds_by_part) order[part] = std::max(order[part], s / r.timed_seconds);
  }
  std::vector<std::pair<double, std::string>> parts;
  for (const auto& [part, f] : order) parts.emplace_back(-f, part);
  std::sort(parts.begin(), parts.end());
  fmt::print("{:<16}", "");
  for (const Result& r : results) fmt::print(" {:>14}", r.variant.label());
  fmt::print("\n");
  for (const auto& [neg, part] : parts) {
    fmt::print("{:<16}", part);
    for (const Result& r : results) {
      const auto it = r.seconds_by_part.find(part);
      fmt::print(" {:>14.1f}", it == r.seconds_by_part.end() ? 0.0 : 100 * it->second / r.timed_seconds);
    }
    fmt::print("\n");
  }
  fmt::print("\nthe parts without products, GB/s moved (their tensors' bytes over their time) and % of a {:.1f} GB/s copy:\n",
             copy_rate / 1e9);
  std::vector<std::map<std::string, double>> rates;
  for (const Result& r : results) rates.push_back(bandwidth_by_part(r));
  for (const auto& [neg, part] : parts) {
    if (std::none_of(rates.begin(), rates.end(), [&](const auto& m) { return m.count(part) > 0; })) continue;
    fmt::print("{:<16}", part);
    for (const auto& m : rates) {
      const auto it = m.find(part);
      fmt::print(" {:>14}", it == m.end() ? std::string("-") : fmt::format("{:.1f} ({:.0f}%)", it->second / 1e9, 100 * it->second / copy_rate));
    }
    fmt::print("\n");
  }
}

}  // namespace

int run_model_bench(ModelBenchArgs a) {
  apply_preset(a);
  if (a.steps <= 0 || a.warmup < 0) throw std::invalid_argument("bench: --steps must be positive, --warmup not negative");
  const std::vector<Variant> vs = variants(a);
  train::Dataset data = train::load_dataset(model_kind(a), a.data);
  // Nothing is evaluated: the test images are the training images (shared), not 30 MiB more in the peak.
  if (data.train) data.test = data.train;
  const Device device = device_option(a.device);
  if (a.tf32 && device.type != DeviceType::cuda) throw std::invalid_argument("bench --tf32: only with --device cuda");
  set_cuda_allow_tf32(a.tf32);
  const int threads = use_threads(a.threads);
  check_quantizes(a, vs, data);
  std::vector<Result> results;
  for (const Variant& v : vs) {
    if (!a.json) fmt::print(stderr, "timing {} ...\n", v.label());
    results.push_back(run_variant(a, v, data, vs.size() > 1, threads));
  }
  const double copy_rate = copy_bytes_per_second(device, threads);
  const Result* fp32 = nullptr;
  for (const Result& r : results) {
    if (r.variant.precision == DType::f32 && !r.variant.fp8 && r.variant.numerics == "off") fp32 = &r;
  }
  if (a.json) {
    nlohmann::json out = {{"model", a.model}, {"threads", threads}, {"steps", a.steps}, {"warmup", a.warmup},
                          {"batch_size", a.batch_size}, {"device", a.device}, {"tf32", a.tf32}, {"vocab", a.vocab},
                          {"copy_gbps", copy_rate / 1e9}};
    if (a.model == "cnn") {
      out["width"] = a.width;
    } else {
      out.update({{"n_layer", a.n_layer}, {"n_head", a.n_head}, {"n_embd", a.n_embd}, {"block_size", a.block_size}});
    }
    if (results.size() == 1) {
      out.update(to_json(results.front(), nullptr));
    } else {
      for (const Result& r : results) out["runs"].push_back(to_json(r, &r == fp32 ? nullptr : fp32));
    }
    fmt::print("{}\n", out.dump());
  } else {
    print_table(a, results, fp32, threads, copy_rate);
  }
  return 0;
}

}  // namespace mantissa::cli
