// The training step and the run around it; see mantissa/train/trainer.h.
#include "mantissa/train/trainer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>

#include "mantissa/ops/autocast.h"
#include "mantissa/amp/step.h"
#include "mantissa/autograd/node.h"
#include "mantissa/autograd/watch.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/core/memory.h"
#include "mantissa/core/output_file.h"
#include "mantissa/io/checkpoint.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/train/data_parallel.h"

namespace mantissa::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The peaks on the device the model trains on.
std::map<std::string, std::int64_t> peaks(Device device) {
  const MemoryStats m = memory_stats(device);
  std::map<std::string, std::int64_t> out;
  for (std::size_t i = 0; i < kMemoryCategories; ++i) out[std::string(category_name(static_cast<MemoryCategory>(i)))] = m.peak[i];
  out["total"] = m.peak_total;
  return out;
}

// Writes an inf into the first element of a gradient, in its dtype (on any device).
void inject_inf(const Tensor& g) {
  const Tensor inf = Tensor::full({1}, std::numeric_limits<double>::infinity(), g.dtype());
  copy_bytes(g.storage(), static_cast<std::size_t>(g.offset()) * dtype_size(g.dtype()), inf.storage(), 0, dtype_size(g.dtype()));
}

// The tracer switched on for a step when asked (and left as it was otherwise).
class TraceSwitch {
 public:
  explicit TraceSwitch(bool on) : saved_(trace_nonfinite()), set_(on) {
    if (set_) set_trace_nonfinite(true);
  }
  ~TraceSwitch() {
    if (set_) set_trace_nonfinite(saved_);
  }
  TraceSwitch(const TraceSwitch&) = delete;
  TraceSwitch& operator=(const TraceSwitch&) = delete;

 private:
  bool saved_, set_;
};

// The parameters whose gradients hold inf or NaN, with how many (at most the first 5): on skipped steps.
std::vector<std::pair<std::string, std::int64_t>> nonfinite_gradients(const nn::Module& model) {
  std::vector<std::pair<std::string, std::int64_t>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const std::int64_t n = p.grad().defined() ? detail::count_nonfinite(p.grad()) : 0;
    if (n > 0 && out.size() < 5) out.emplace_back(name, n);
  }
  return out;
}

// The message for a stalled run: the skipped steps, where their non-finite values came from, what to do.
std::string explain_stall(std::int64_t first, std::int64_t last, const std::map<std::string, std::int64_t>& sources,
                          const StepRecord& r, DType compute, bool collapsed) {
  std::vector<std::pair<std::int64_t, std::string>> ranked;
  for (const auto& [name, n] : sources) ranked.emplace_back(-n, name);
  std::sort(ranked.begin(), ranked.end());
  std::string where;
  for (std::size_t i = 0; i < std::min<std::size_t>(ranked.size(), 4); ++i) {
    where += (i > 0 ? ", " : "") + ranked[i].second + " (" + std::to_string(-ranked[i].first) + " steps)";
  }
  if (ranked.size() > 4) where += " and " + std::to_string(ranked.size() - 4) + " more";
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", r.loss_scale);
  std::string s = std::to_string(last - first + 1) + " steps in a row skipped (steps " + std::to_string(first) + "-" +
                  std::to_string(last) + "), loss scale now " + scale + (collapsed ? " (at its floor)" : "") +
                  "; the inf/NaN came from " +
                  (where.empty() ? "(unknown)" : where) + ". ";
  if (r.trace) s += "First report: " + r.trace->str() + ". ";
  s += "To do: keep those layers in f32 (--fp32-layers, Module::keep_in_f32), lower the learning rate or clip the "
       "gradients";
  if (compute == DType::f16) s += ", or train in bf16 (fp32's range)";
  if (!r.trace) s += "; --trace-nonfinite names the op that made the first inf";
  return s;
}

// Every module whose path is one of `paths`, or lies under one, runs in f32.
void keep_layers_in_f32(nn::Module& model, const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  for (const auto& [path, m] : model.named_modules()) {
    for (const std::string& p : paths) {
      if (nn::path_within(path, p)) m->keep_in_f32();
    }
  }
}

// Copies of the parameters that have gradients, before an optimizer step (undefined for the others).
std::vector<Tensor> weights_before_update(nn::Module& model) {
  NoGradGuard no_grad;
  std::vector<Tensor> before;
  for (const Tensor& p : model.parameters()) before.push_back(p.grad().defined() ? contiguous_copy(p) : Tensor());
  return before;
}

// StepRecord::lost_updates, from the weights before the step and after it (the gradients still there).
// A model with bf16/fp16 parameters reports what they lost (its f32 ones, batch norm's, lose nothing); an
// f32 model what bf16 and fp16 storage would lose.
std::map<std::string, double> lost_updates(nn::Module& model, const std::vector<Tensor>& before) {
  NoGradGuard no_grad;
  std::map<std::string, double> lost;
  double moved = 0;  // weights with a non-zero gradient
  const std::vector<Tensor> params = model.parameters();
  const bool stored_low = std::any_of(params.begin(), params.end(), [](const Tensor& p) {
    return p.dtype() == DType::bf16 || p.dtype() == DType::f16;
  });
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!before[i].defined()) continue;
    const Tensor& p = params[i];
    const Tensor pushed = sub(Tensor::full({}, 1.0, DType::f32, p.device()),
                              equal(cast(p.grad(), DType::f32), Tensor::full({}, 0.0, DType::f32, p.device())));
    moved += sum(pushed).item();
    const auto count = [&](const Tensor& unchanged) { return sum(mul(cast(unchanged, DType::f32), pushed)).item(); };
    if (p.dtype() == DType::bf16 || p.dtype() == DType::f16) {
      lost[std::string(precision_name(p.dtype()))] += count(equal(p, before[i]));
    } else if (!stored_low) {
      const Tensor delta = sub(cast(p, DType::f32), cast(before[i], DType::f32));
      for (const DType low : {DType::bf16, DType::f16}) {
        const Tensor stored = cast(before[i], low);
        lost[std::string(precision_name(low))] += count(equal(cast(add(cast(stored, DType::f32), delta), low), stored));
      }
    }
  }
  for (auto& [format, n] : lost) n = moved > 0 ? n / moved : 0;
  return lost;
}

// An autocast region in the compute dtype, or none for f32.
std::unique_ptr<Autocast> precision_region(const RunPrecision& p) {
  if (p.compute == DType::f32) return nullptr;
  return std::make_unique<Autocast>(p.compute, p.autocast);
}

// The run's precision from its options, all but the plan, which needs the model made ready first
// (Trainer::Trainer resolves it next).
RunPrecision resolve_precision(const TrainerOptions& o) {
  const PrecisionPolicy& p = o.precision;
  return {.compute = p.compute,
          .mode = p.mode,
          .autocast = p.autocast_policy(),
          .f32_layers = p.f32_layers,
          .plan = {},  // resolved next, with the model
          .fixed_plan = o.plan.has_value(),
          .loss_scaling = o.loss_scaling.value_or(LossScalerOptions::for_compute(p.compute)),
          .label = p.label(),
          .fp8 = p.fp8 ? p.fp8->str() : "off"};  // the recipe and its parameters
}

// What the recipe names in a checkpoint mean, written with each: 2 since "nvfp4" became Transformer
// Engine's NVFP4 (issue 53). A checkpoint without it is older; its "nvfp4" is what the table now calls
// "nvfp4-torchao" (the same computation, bit for bit), and its words are read as that.
constexpr std::string_view kRecipeNamesKey = "recipe_names";
constexpr std::string_view kRecipeNames = "2";

std::map<std::string, std::string> in_todays_recipe_names(std::map<std::string, std::string> meta) {
  if (meta.contains(std::string(kRecipeNamesKey))) return meta;
  if (auto it = meta.find("fp8"); it != meta.end() && it->second.starts_with("nvfp4 (")) it->second.insert(5, "-torchao");
  for (const char* key : {"precision_plan", "adaptive_precision"}) {  // JSON: the recipe's word, as nlohmann dumps it
    const auto it = meta.find(key);
    if (it == meta.end()) continue;
    const std::string_view old_word = "\"recipe\":\"nvfp4\"", new_word = "\"recipe\":\"nvfp4-torchao\"";
    for (std::size_t at = it->second.find(old_word); at != std::string::npos; at = it->second.find(old_word, at + new_word.size())) {
      it->second.replace(at, old_word.size(), new_word);
    }
  }
  return meta;
}

const TrainerOptions& checked(const TrainerOptions& o) {
  o.precision.check();
  if (o.steps < 1) throw std::invalid_argument("trainer: steps must be at least 1");
  if (o.grad_accum < 1) throw std::invalid_argument("trainer: grad_accum must be at least 1");
  if (o.eval_every < 1) throw std::invalid_argument("trainer: eval_every must be at least 1");
  if (!(o.clip >= 0)) throw std::invalid_argument("trainer: clip must be at least 0");
  if (!(o.loss_weight > 0) || !std::isfinite(o.loss_weight)) throw std::invalid_argument("trainer: loss_weight must be positive and finite");
  for (const auto* low : {o.adaptive ? &o.adaptive->low : nullptr, o.plan ? &o.plan->low : nullptr}) {
    if (low == nullptr) continue;
    if (o.adaptive && o.plan) throw std::invalid_argument("trainer: adaptive precision and a fixed plan exclude each other");
    if (o.precision.compute != *low || o.precision.low_precision_model() || o.precision.fp8) {
      throw std::invalid_argument("trainer: a per-layer precision plan needs autocast in its 16-bit format (" +
                                  std::string(dtype_name(*low)) + ") and no model-wide fp8");
    }
  }
  if (const auto& dp = o.data_parallel; dp && dp->group && dp->group->size() > 1) {
    if (o.adaptive) throw std::invalid_argument("trainer: adaptive precision does not run data parallel yet (each rank would decide alone)");
    if (dp->checksum_every < 0) throw std::invalid_argument("trainer: checksum_every must be at least 0");
  }
  return o;
}

// During a data-parallel backward: a gradient's inf put in (when the step injects one) before the reducer
// sends it.
class StepHook final : public GradReadyHook {
 public:
  StepHook(dist::GradReducer* reducer, const TensorImpl* inject_into) : reducer_(reducer), inject_into_(inject_into) {}
  void ready(const Tensor& leaf) override {
    if (leaf.impl() == inject_into_) inject_inf(leaf.grad());
    reducer_->ready(leaf);
  }

 private:
  dist::GradReducer* reducer_;
  const TensorImpl* inject_into_;
};

}  // namespace

Trainer::Trainer(Model& model, DataSource& data, TrainerOptions options)
    : model_(model),
      data_(data),
      options_(checked(options)),
      precision_(resolve_precision(options_)),
      scaler_(precision_.loss_scaling),
      schedule_(options_.schedule.value_or(LrSchedule::constant(options_.optimizer.lr))) {
  if (!(options_.device == Device::cpu())) model_.module().to_device(options_.device);
  if (precision_.low_precision_model()) model_.module().to_dtype(precision_.compute);
  // Which layer runs in what, decided once: the f32 layers' every module kept in f32 (norms too), then
  // the plan of the product layers, from the policy or fixed, or the adaptive controller's to edit. (The
  // last of the resolution: from here on the trainer reads precision_ alone.)
  keep_layers_in_f32(model_.module(), precision_.f32_layers);
  PrecisionPlan& plan = precision_.plan;
  if (options_.adaptive) {
    controller_ = std::make_unique<PrecisionController>(model_.module(), *options_.adaptive, plan);
  } else {
    plan = options_.plan ? *options_.plan : plan_precision(model_.module(), options_.precision);
    // A run asked for quantized products computes in them, or is refused: never bf16 under its name.
    if (options_.precision.fp8 && !plan.quantizes()) {
      const QuantOptions& fp8 = *options_.precision.fp8;
      const std::string recipe(fp8.recipe.name());
      throw std::invalid_argument((fp8.microscaled() ? recipe : "fp8 (" + recipe + " scaling)") +
                                  " puts no layer of this model in it: only linear layers are quantized, and the recipe keeps "
                                  "some in bf16 (--fp8-first-last fp8 or --fp8-layers put them in)");
    }
    apply_precision_plan(model_.module(), plan);
  }
  if (options_.telemetry || controller_) {
    telemetry_ = std::make_unique<Telemetry>(options_.telemetry.value_or(controller_ ? controller_->telemetry() : TelemetryPolicy{}));
  }
  if (const auto& dp = options_.data_parallel; dp && dp->group && dp->group->size() > 1) {
    group_ = dp->group;
    // The ranks run the same thing, or none of them runs (a parameter of another shape would not even
    // fit the broadcast below).
    RunSettings settings = dp->settings;
    settings.insert(settings.end(), {{"precision", precision_.label},
                                     {"optimizer", std::string(optimizer_name(options_.optimizer.kind))},
                                     {"lr", std::to_string(options_.optimizer.lr)},
                                     {"steps", std::to_string(options_.steps)},
                                     {"grad accumulation", std::to_string(options_.grad_accum)},
                                     {"loss scaling", loss_scaling_name(scaler_.options())}});
    for (const auto& [name, p] : model_.module().named_parameters()) settings.emplace_back("parameter " + name, shape_str(p.shape()));
    settings.emplace_back("data", data_.identity());
    check_settings_agree(*group_, settings);
    // Every rank starts from rank 0's weights (before the optimizer copies them into its master weights).
    broadcast_from_rank0(*group_, model_.module().parameters());
    broadcast_from_rank0(*group_, buffers_of(model_.module()));
    reducer_ = std::make_unique<dist::GradReducer>(group_, model_.module().parameters(), dp->reducer);
  }
  optimizer_ = make_optimizer(options_.optimizer, model_.module().parameters());
  // The checkpoint directory takes files now, not after the run (made if absent; rank 0 writes).
  if (!options_.checkpoints.dir.empty() && rank() == 0) check_output_directory(options_.checkpoints.dir, "the checkpoint directory");
}

Batch Trainer::prepare(Batch batch) const {
  if (batch.inputs.defined() && !(batch.inputs.device() == options_.device)) batch.inputs = batch.inputs.to(options_.device);
  const DType dtype = precision_.input_dtype();
  if (batch.inputs.defined() && batch.inputs.dtype() != dtype) batch.inputs = cast(batch.inputs, dtype);
  return batch;
}

Tensor Trainer::loss(const Batch& batch) {
  const auto region = precision_region(precision_);
  const DType dtype = precision_.input_dtype();
  const bool moved = batch.inputs.defined() && (batch.inputs.dtype() != dtype || !(batch.inputs.device() == options_.device));
  if (moved) return model_.loss(prepare(batch));
  return model_.loss(batch);
}

// What a step's forward and backward passes left.
struct Trainer::Pass {
  double loss = 0;  // the micro-batches' mean (unweighted), over every rank
  std::int64_t items = 0;
  std::optional<NonFiniteReport> trace;  // where this rank's tracer stopped the step
  bool skip_everywhere = false;          // some rank's tracer stopped it
  bool stop_everywhere = false;          // some rank was asked to stop after this step (run()'s should_stop)
  dist::ReducerStats comm;
};

// What the update did, and what it saw on the way.
struct Trainer::Update {
  StepReport report;
  std::vector<std::pair<std::string, std::int64_t>> bad_grads;  // skipped steps: where the inf/NaN are
  std::map<std::string, double> lost;                           // StepRecord::lost_updates
};

StepRecord Trainer::step(std::span<const Batch> global_batches) {
  if (global_batches.empty()) throw std::invalid_argument("trainer: a step needs at least one batch");
  const auto t0 = Clock::now();
  if (!start_) start_ = t0;
  const std::int64_t step = next_step_;
  const std::vector<Batch> shards = shard(global_batches);
  const std::span<const Batch> micro_batches = group_ ? std::span<const Batch>(shards) : global_batches;
  Telemetry* telemetry = begin_step(step);
  // What the host reads of the step's values (the losses, the FP8 counts, the loss scaler's check), read
  // together: on a GPU each read waits for the device, and a wait mid-step leaves it idle while the next
  // kernels are queued. Data parallel reads the losses before the ranks agree on them.
  BatchedReads reads(options_.device);
  Pass pass;  // (filled in place: its loss is added up when the reads are read)
  forward_backward(step, micro_batches, telemetry, reads, pass);
  if (group_) reads.read();
  agree_on_pass(pass);
  const Update update = update_weights(step, pass, telemetry, reads);
  reads.read();  // (a step the tracer stopped has no check: its values are read here)
  if (pass.trace) pass.loss = std::numeric_limits<double>::quiet_NaN();
  end_fp8_step();
  check_replicas(step);
  ++next_step_;
  StepRecord record = record_step(step, std::move(pass), update, seconds_since(t0), telemetry);
  adapt_precision(record, update.report.skipped);
  // The scaler's own collapse report is folded into one explanation per run of skips.
  record.warning = follow_skips(record, !update.report.warning.empty());
  if (!record.warning.empty() && options_.stop_on_stall) throw TrainingStalled(record.warning);
  if (record.warning.empty()) record.warning = follow_plateau(record);  // (said, never a reason to stop)
  return record;
}

std::vector<Batch> Trainer::shard(std::span<const Batch> global_batches) {
  std::vector<Batch> shards;
  if (!group_) return shards;
  // Data parallel: this rank's rows of every micro-batch, and rank 0's buffers.
  for (const Batch& b : global_batches) shards.push_back(shard_batch(b, rank(), ranks(), true));
  broadcast_from_rank0(*group_, buffers_of(model_.module()));
  return shards;
}

Telemetry* Trainer::begin_step(std::int64_t step) {
  // Held on skipped steps, the schedule counts only the steps that updated the weights.
  const std::int64_t held = options_.hold_lr_on_skip ? scaler_.state().skipped : 0;
  optimizer_->set_lr(schedule_.at(step - 1 - held));
  if (precision_.plan.quantizes()) {
    reset_fp8_counters();
    nn::reset_fp8_layer_counters(model_.module());
  }
  Telemetry* telemetry = telemetry_ && telemetry_->policy().due(step) ? telemetry_.get() : nullptr;
  if (telemetry) telemetry->begin_step(step, scaler_.scale());
  set_trace_loss_scale(scaler_.scale());
  return telemetry;
}

void Trainer::forward_backward(std::int64_t step, std::span<const Batch> micro_batches, Telemetry* telemetry,
                               BatchedReads& reads, Pass& pass) {
  // Each micro-batch's loss is divided by their number, so the gradients add up to the batch mean's (and
  // multiplied by the loss weight); the reported loss is the unweighted mean.
  const double share = options_.loss_weight / static_cast<double>(micro_batches.size());
  // The micro-batches' losses and the FP8 quantizers' counts go to the step's reads, not read here: a
  // read waits for the device, and on a GPU a wait between forward and backward (or one per quantizer)
  // leaves it idle while the next kernels are launched.
  const double micro = static_cast<double>(micro_batches.size());
  const auto& inject = options_.inject_nonfinite;
  const int inject_rank = group_ ? options_.data_parallel->inject_rank : -1;
  const bool injects = std::find(inject.begin(), inject.end(), step) != inject.end() && (inject_rank < 0 || inject_rank == rank());
  {
    const ActiveBatchedReads batching(reads);
    const TraceSwitch tracing(options_.trace_nonfinite);
    const LayerTapGuard tap(telemetry);
    // Data parallel: the last micro-batch's backward sends each gradient bucket as soon as it is complete.
    StepHook hook(reducer_.get(), injects ? model_.module().parameters().front().impl() : nullptr);
    bool reducing = false;
    try {
      for (std::size_t i = 0; i < micro_batches.size(); ++i) {
        const Batch& b = micro_batches[i];
        pass.items += b.items();
        const Tensor l = this->loss(b);
        reads.value(l, [&pass, micro](double v) { pass.loss += v / micro; });
        const Tensor scaled = scaler_.scale_loss(share == 1 ? l : mul(l, share));
        if (reducer_ && i + 1 == micro_batches.size()) {
          reducer_->begin();
          reducing = true;
          const GradReadyHookGuard guard(&hook);
          scaled.backward();
        } else {
          scaled.backward();
        }
      }
    } catch (const NonFiniteError& e) {
      pass.trace = e.report();
    }
    if (reducer_) {
      // Every rank sends every bucket, even after its tracer stopped the step (then skipped everywhere).
      if (!reducing) reducer_->begin();
      pass.comm = reducer_->finish();
    }
  }
  if (!pass.trace && injects && !reducer_) inject_inf(model_.module().parameters().front().grad());
  pass.skip_everywhere = pass.trace.has_value();
}

void Trainer::agree_on_pass(Pass& pass) const {
  // Whether to stop after this step travels with the pass's values: no collective of its own.
  const bool stop = should_stop_ && should_stop_();
  pass.stop_everywhere = stop;
  if (!group_) return;
  // The ranks' losses and items added up, whether any rank's tracer stopped the step, and whether any
  // rank was asked to stop.
  std::array<double, 4> v{pass.loss, static_cast<double>(pass.items), pass.trace ? 1.0 : 0.0, stop ? 1.0 : 0.0};
  group_->all_reduce(v, dist::ReduceOp::sum);
  pass.loss = v[0] / ranks();
  pass.items = static_cast<std::int64_t>(v[1]);
  pass.skip_everywhere = v[2] > 0;
  pass.stop_everywhere = v[3] > 0;
}

Trainer::Update Trainer::update_weights(std::int64_t step, const Pass& pass, Telemetry* telemetry, BatchedReads& reads) {
  Update u;
  if (pass.skip_everywhere) {
    // The tracer stopped the step (on some rank): skipped, as an overflowing one (the scale backs off).
    u.report = scaler_.record_overflow(pass.trace ? pass.trace->nonfinite : 0);
    scaler_.update();
  } else {
    if (telemetry) telemetry->parameters(model_.module());
    // One read-only pass over the gradients (inf/NaN, norm); unless one overflowed, the optimizer step on
    // the f32 master weights with the unscale and the clipping done inside it; the loss-scale update.
    const std::int64_t every = options_.update_stats_every;
    std::vector<Tensor> before;
    if (every > 0 && (step == 1 || step % every == 0)) before = weights_before_update(model_.module());
    u.report = scaled_step(scaler_, *optimizer_, options_.clip, &reads);
    if (!before.empty() && !u.report.skipped) u.lost = lost_updates(model_.module(), before);
    if (u.report.skipped) u.bad_grads = nonfinite_gradients(model_.module());
  }
  optimizer_->zero_grad();
  return u;
}

void Trainer::end_fp8_step() {
  if (!precision_.plan.quantizes()) return;
  if (group_) {
    // Every rank's amaxes, the largest taken: the same histories and scales on every rank.
    std::vector<double> amax = nn::fp8_step_amaxes(model_.module());
    group_->all_reduce(amax, dist::ReduceOp::max);
    nn::set_fp8_step_amaxes(model_.module(), amax);
  }
  add_fp8_scale_updates(nn::fp8_end_step(model_.module()));
}

void Trainer::check_replicas(std::int64_t step) const {
  if (!group_) return;
  const std::int64_t every = options_.data_parallel->checksum_every;
  if (every > 0 && step % every == 0) check_weights_agree(*group_, model_.module(), step);
}

StepRecord Trainer::record_step(std::int64_t step, Pass pass, const Update& u, double seconds, Telemetry* telemetry) {
  const StepReport& rep = u.report;
  StepRecord record{step, pass.loss, optimizer_->lr(), rep.scale, rep.grad_norm, rep.underflow_fraction,
                    static_cast<double>(pass.items) / seconds, rep.skipped, rep.nonfinite, peaks(options_.device),
                    seconds_since(*start_), rep.warning};
  if (precision_.plan.quantizes()) {
    record.fp8 = fp8_counters();
    record.fp8_layers = nn::fp8_layer_counters(model_.module());
  }
  record.stop_requested = pass.stop_everywhere;
  record.comm_bytes = pass.comm.bytes_sent;
  record.comm_seconds = pass.comm.comm_seconds;
  record.comm_exposed_seconds = pass.comm.exposed_seconds;
  record.comm_buckets = pass.comm.buckets;
  if (telemetry) record.numerics = telemetry->take();
  record.trace = std::move(pass.trace);
  record.nonfinite_grads = u.bad_grads;
  record.lost_updates = u.lost;
  return record;
}

void Trainer::adapt_precision(StepRecord& record, bool skipped) {
  if (!controller_) return;
  // Skipped steps blame the layers their inf/NaN came from; sampled good steps are decided on.
  std::vector<PrecisionChange>& changes = record.precision_changes;
  if (record.trace) {
    changes = controller_->blame(record.step, record.trace->layer, record.trace->str());
  } else {
    for (const auto& [name, count] : record.nonfinite_grads) {
      auto c = controller_->blame(record.step, name, std::to_string(count) + " inf/NaN in the gradient of " + name);
      changes.insert(changes.end(), c.begin(), c.end());
    }
  }
  if (!skipped && !record.numerics.empty()) changes = controller_->decide(record.step, record.numerics);
  controller_->count_step(skipped);
}

std::string Trainer::follow_skips(const StepRecord& r, bool collapsed) {
  if (!r.skipped) {
    streak_ = {};
    return "";
  }
  if (streak_.length++ == 0) streak_.first = r.step;
  if (r.trace) {
    ++streak_.layers[r.trace->layer.empty() ? "(the model)" : r.trace->layer];
  } else {
    for (const auto& [name, count] : r.nonfinite_grads) ++streak_.layers[name];
  }
  if (streak_.explained || (streak_.length < options_.skip_patience && !collapsed)) return "";
  streak_.explained = true;
  return explain_stall(streak_.first, r.step, streak_.layers, r, precision_.compute, collapsed);
}

std::string Trainer::follow_plateau(const StepRecord& r) {
  const std::optional<double> entropy = data_.byte_entropy();
  if (!entropy || options_.plateau_patience < 1 || plateau_.explained) return "";
  if (r.skipped || !std::isfinite(r.loss) || std::fabs(r.loss - *entropy) > 0.1) {
    plateau_.length = 0;
    return "";
  }
  if (plateau_.length++ == 0) plateau_.first = r.step;
  if (plateau_.length < options_.plateau_patience) return "";
  plateau_.explained = true;
  char h[32];
  std::snprintf(h, sizeof h, "%.3f", *entropy);
  std::string s = "the loss has stayed within 0.1 of the training text's byte entropy (" + std::string(h) + " nats) for " +
                  std::to_string(plateau_.length) + " steps (steps " + std::to_string(plateau_.first) + "-" +
                  std::to_string(r.step) + "): the model predicts each byte by its frequency alone, nothing of its context "
                  "(the unigram plateau). ";
  // Measured (docs/results.md, scripts/plateau_sweep.py): how long a char GPT stays here depends on the
  // text and the seed in fp32 as much as in bf16, and no op kept in f32 (attention, the head, the
  // blocks' layers) brought bf16 out earlier; a learning-rate warm-up did, in every precision.
  s += "How long a run stays here depends on the text and the seed, in fp32 as much as in " +
       std::string(precision_name(precision_.compute == DType::f32 ? DType::bf16 : precision_.compute)) +
       ": no op's precision decides it (docs/results.md). ";
  if (schedule_.warmup() == 0) {
    return s + "To do: warm the learning rate up (--warmup 20: runs that stayed here to step 80-150 without one left "
               "it by step 20-35), lower it, or try another seed";
  }
  return s + "To do: train on (a model leaves it when it learns to use the context), lower the learning rate, lengthen "
             "the warm-up, or try another seed";
}

StepRecord Trainer::step() {
  std::vector<Batch> batches;
  for (std::int64_t i = 0; i < options_.grad_accum; ++i) batches.push_back(data_.next());
  return step(batches);
}

EvalRecord Trainer::evaluate(bool full) {
  NoGradGuard no_grad;
  nn::Module& m = model_.module();
  if (group_) {
    broadcast_from_rank0(*group_, buffers_of(m));  // rank 0's batch-norm statistics, as every step starts with
  }
  m.eval();
  double loss_sum = 0;
  std::int64_t count = 0, right = 0;
  data_.for_each_eval_batch(full, [&](const Batch& global) {
    // Data parallel: this rank's rows (the totals are added up below).
    const Batch raw = group_ ? shard_batch(global, rank(), ranks(), false) : global;
    if (raw.targets.empty()) return;
    const Batch b = prepare(raw);
    const auto region = precision_region(precision_);
    count += static_cast<std::int64_t>(b.targets.size());
    if (!data_.reports_accuracy()) {
      // The model's own loss: the GPT's never makes a whole batch's logits (1.6 GB for GPT-2 on a GPU).
      loss_sum += model_.loss_sum(b).item();
      return;
    }
    const Tensor logits = cast(model_.forward(b), DType::f32);
    loss_sum += cross_entropy(logits, b.targets, Reduction::sum).item();
    const std::vector<double> l = logits.to_doubles();
    const std::int64_t classes = logits.size(1);
    for (std::size_t i = 0; i < b.targets.size(); ++i) {
      const auto row = l.begin() + static_cast<std::ptrdiff_t>(i) * classes;
      right += (std::max_element(row, row + classes) - row) == b.targets[i] ? 1 : 0;
    }
  });
  m.train();
  if (group_) {
    std::array<double, 3> v{loss_sum, static_cast<double>(count), static_cast<double>(right)};
    group_->all_reduce(v, dist::ReduceOp::sum);
    loss_sum = v[0];
    count = static_cast<std::int64_t>(v[1]);
    right = static_cast<std::int64_t>(v[2]);
  }
  EvalRecord r{next_step_ - 1, count > 0 ? loss_sum / static_cast<double>(count) : 0, std::nullopt};
  if (data_.reports_accuracy() && count > 0) r.val_accuracy = static_cast<double>(right) / static_cast<double>(count);
  return r;
}

void Trainer::save(const std::filesystem::path& path) const {
  if (rank() != 0) return;  // data parallel: the ranks hold the same state; rank 0 writes it
  CheckpointState st{next_step_ - 1, scaler_.state(), options_.checkpoint_metadata};
  st.extra["fp8"] = precision_.fp8;
  st.extra[std::string(kRecipeNamesKey)] = kRecipeNames;
  if (controller_) st.extra["adaptive_precision"] = controller_->state_json();
  if (!controller_) st.extra["precision_plan"] = precision_.plan.json();  // (the controller's state holds it)
  for (const auto& [k, v] : data_.position()) st.extra[k] = v;
  save_checkpoint(path, model_.module(), *optimizer_, st);
}

void Trainer::resume(const std::filesystem::path& path,
                     const std::function<void(const std::map<std::string, std::string>&)>& check) {
  // The FP8 recipe first: a history kept for other scales, or none, is not this run's state.
  const auto check_all = [&](const std::map<std::string, std::string>& as_written) {
    const std::map<std::string, std::string> meta = in_todays_recipe_names(as_written);
    const auto it = meta.find("fp8");
    const std::string theirs = it == meta.end() ? "off" : it->second;
    const std::string& ours = precision_.fp8;
    if (theirs != ours) {
      throw CheckpointError(path.string() + ": written by a run with fp8 " + theirs + " (this run: " + ours + ")");
    }
    // Adaptive precision: the plan and the controller as they were (applied before the tensors load).
    const auto adaptive = meta.find("adaptive_precision");
    if ((adaptive != meta.end()) != (controller_ != nullptr)) {
      throw CheckpointError(path.string() + ": written by a run " + (controller_ ? "without" : "with") +
                            " adaptive precision (this run: " + (controller_ ? "with" : "without") + ")");
    }
    if (controller_) {
      try {
        controller_->load_state_json(adaptive->second);
      } catch (const std::invalid_argument& e) {
        throw CheckpointError(path.string() + ": " + e.what());
      }
    }
    // The layers' levels and recipes as they were. (A checkpoint from before every run saved its plan has
    // none: its flags were checked; a fixed plan's run needs the same plan. One from before plans named
    // their recipes has the levels alone: the recipe was the flags' (checked above), or current scaling
    // for a fixed plan.)
    const auto plan = meta.find("precision_plan");
    // (Compared as read, so that a plan saved in an older spelling, "fp8" for any quantized layer, is the same plan.)
    const auto same_plan = [&](const std::string& saved) {
      const bool old_fixed_recipe = !precision_.fixed_plan || (precision_.plan.recipes.empty() && precision_.plan.fp8 == QuantOptions{.recipe = QuantRecipe::current});
      PrecisionPlan saved_plan;
      try {
        saved_plan = PrecisionPlan::parse(saved);
      } catch (const std::invalid_argument&) {
        return false;
      }
      const bool levels_only = !PrecisionPlan::names_recipe(saved);
      return saved_plan.json() == precision_.plan.json() ||
             (levels_only && saved_plan.low == precision_.plan.low && saved_plan.layers == precision_.plan.layers && old_fixed_recipe);
    };
    if (!controller_ && (plan != meta.end() ? !same_plan(plan->second) : precision_.fixed_plan)) {
      throw CheckpointError(path.string() + ": written with another precision plan (" +
                            (plan == meta.end() ? std::string("none") : plan->second) + "; this run: " + precision_.plan.json() + ")");
    }
    if (check) check(meta);
  };
  const CheckpointState st = load_checkpoint(path, model_.module(), *optimizer_, check_all);
  try {
    nn::validate_fp8_state(model_.module());
    scaler_.load_state(st.scaler);
    data_.seek(st.extra);
  } catch (const std::invalid_argument& e) {  // bad data in the file, not a bad setting: named with the file
    throw CheckpointError(path.string() + ": " + e.what());
  }
  // The counters tell one story: the scaler saw every step, the optimizer every step it did not skip.
  if (st.scaler.steps != st.step || optimizer_->steps() != st.step - st.scaler.skipped) {
    throw CheckpointError(path.string() + ": its counters disagree: step " + std::to_string(st.step) + ", the loss scaler's " +
                          std::to_string(st.scaler.steps) + " steps with " + std::to_string(st.scaler.skipped) +
                          " skipped, the optimizer's " + std::to_string(optimizer_->steps()) + " steps");
  }
  next_step_ = st.step + 1;
}

TrainResult Trainer::run(const TrainCallbacks& cb) {
  // The steps ask should_stop while they agree on their values (agree_on_pass); only while run() runs.
  struct Asking {
    std::function<bool()>& slot;
    ~Asking() { slot = nullptr; }
  } asking{should_stop_};
  should_stop_ = cb.should_stop;
  TrainResult result;
  result.total_steps = options_.steps;
  result.first_step = next_step_;
  result.throughput_unit = data_.item_unit() + "/s";
  const CheckpointOptions& ck = options_.checkpoints;
  // A fresh run never writes among another run's checkpoints (pruning would delete them).
  if (!ck.dir.empty() && next_step_ == 1 && rank() == 0) {
    if (const std::vector<std::filesystem::path> theirs = list_checkpoints(ck.dir); !theirs.empty()) {
      throw std::invalid_argument("the checkpoint directory " + ck.dir.string() + " holds another run's checkpoints (" +
                                  theirs.back().filename().string() + (theirs.size() > 1 ? " and more" : "") +
                                  "): resume that run (--resume) or name an empty directory");
    }
  }
  if (cb.on_start) cb.on_start();
  reset_peak_memory(options_.device);
  const auto start = Clock::now();
  start_ = start;
  auto last_save = start;
  while (next_step_ <= options_.steps) {
    const StepRecord rec = step();
    const std::int64_t s = rec.step;
    result.skipped_steps += rec.skipped ? 1 : 0;
    if (!rec.warning.empty()) result.warnings.push_back(rec.warning);
    result.steps.push_back(rec);
    if (cb.on_step) cb.on_step(rec, options_.steps);
    // Asked in the step (agreed over the ranks with its values: no collective of its own), and alone
    // asked again after it, so that a request made after the step's agreement, in a callback, say,
    // stops the run right here; ranks stop at the next step's agreement together.
    const bool stop = rec.stop_requested || (!group_ && cb.should_stop && cb.should_stop());
    // (Only rank 0 writes, so the ranks need not agree on the clock.)
    const bool due = (ck.every > 0 && s % ck.every == 0) || s == options_.steps || stop ||
                     (ck.every_seconds > 0 && seconds_since(last_save) >= ck.every_seconds);
    if (!ck.dir.empty() && due) {
      if (rank() == 0) {
        const std::filesystem::path path = checkpoint_path(ck.dir, s);
        save(path);
        prune_checkpoints(ck.dir, ck.keep, path);
        if (cb.on_save) cb.on_save(path, s);
      }
      last_save = Clock::now();
    }
    // The run's peak is the training steps' (evaluation batches have their own, not reported).
    for (const auto& [category, bytes] : rec.peak_bytes) {
      result.peak_bytes[category] = std::max(result.peak_bytes[category], bytes);
    }
    if (stop) {
      result.stopped_at = s;
      break;
    }
    if (s % options_.eval_every == 0 || s == options_.steps) {
      result.evals.push_back(evaluate(s == options_.steps));
      if (cb.on_eval) cb.on_eval(result.evals.back());
      reset_peak_memory(options_.device);
    }
  }
  // The weights compared once more at the end, so that a run shorter than the interval is checked too.
  if (group_ && options_.data_parallel->checksum_every > 0 && !result.steps.empty() &&
      result.steps.back().step % options_.data_parallel->checksum_every != 0) {
    check_weights_agree(*group_, model_.module(), result.steps.back().step);
  }
  if (result.evals.empty() && result.stopped_at == 0) {  // resumed at or past the last step: evaluate what was loaded
    result.evals.push_back(evaluate(true));
    result.evals.back().step = options_.steps;
  }
  result.plan = precision_.plan;
  if (controller_) {
    result.adaptive = true;
    for (const auto& [p, share] : controller_->product_shares()) {
      result.product_shares[layer_precision_name(p, precision_.plan.low)] = share;
    }
  }
  result.wall_seconds = seconds_since(start);
  if (result.peak_bytes.empty()) result.peak_bytes = peaks(options_.device);  // resumed past the last step
  return result;
}

}  // namespace mantissa::train
