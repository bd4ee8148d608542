// The training step, once, in plain sight (as tiny-cuda-nn's trainer keeps it): the forward pass under the
// precision policy, the scaled backward pass of each micro-batch, one read-only inf/NaN check over the
// gradients, the optimizer step on the f32 master weights with the unscale and clipping inside it
// (skipped, with everything left bit-identical, when a gradient overflowed), and the loss-scale update.
// Around it: the learning-rate schedule, evaluation, metrics, and checkpoints that resume bit-identically.
// With FP8 (PrecisionPolicy::fp8), the policy's linear layers run their products in FP8 and the delayed
// recipe's scales are updated after each step; the recipe is written into checkpoints and checked on resume.
// The numerics tools hook in here too (docs/numerics.md): telemetry on sampled steps, the non-finite
// tracer (a traced inf/NaN skips the step), skipped steps named and explained, and adaptive precision
// deciding each layer's level after the step.
// Data parallel (TrainerOptions::data_parallel, mantissa/dist/): every rank draws the same global batch,
// trains on its own rows of it, and the gradients are averaged across ranks while backward runs; every
// rank then takes the same step (docs/distributed.md).
// `mantissa train`, `compare` and `bench --model` are this class with flags.
//
//   train::ModuleModel<nn::Cnn> model(nn::CnnConfig{});
//   train::ClassificationData data(load_mnist_format(dir, true), load_mnist_format(dir, false), 128, 0);
//   train::Trainer trainer(model, data, {.precision = {DType::bf16}, .steps = 500});
//   const train::TrainResult result = trainer.run();
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/base/errors.h"
#include "mantissa/dist/grad_reducer.h"
#include "mantissa/dist/process_group.h"
#include "mantissa/optim/optimizer.h"
#include "mantissa/train/config.h"
#include "mantissa/train/data.h"
#include "mantissa/train/data_parallel.h"
#include "mantissa/train/model.h"
#include "mantissa/train/adaptive.h"
#include "mantissa/train/precision_plan.h"
#include "mantissa/train/telemetry.h"

namespace mantissa::train {

struct CheckpointOptions {
  std::filesystem::path dir;  // empty: no checkpoints
  std::int64_t every = 0;     // steps between checkpoints; 0: by time and after the last step only
  double every_seconds = 0;   // also at the first step boundary this long after the last save; 0: never
  int keep = 3;               // the newest this many are kept
};

// Data-parallel training over a process group of several ranks. Every rank runs a Trainer with the same
// options and a data source giving the same batches (the same seed); each trains on its share of every
// batch's rows (the batch must split evenly), so the global batch is one process's. Parameters and
// buffers are broadcast from rank 0 at the start; buffers (batch norm's statistics) again before every step,
// as DistributedDataParallel does. Evaluation is split by rows and summed. Rank 0 alone writes checkpoints;
// they hold nothing per rank, so a run resumes on any number of ranks.
struct DataParallelOptions {
  std::shared_ptr<dist::ProcessGroup> group;
  dist::ReducerOptions reducer = {};
  // Every this many steps (0: never), the ranks compare checksums of their weights and stop the run with
  // dist::DistributedError if they differ.
  std::int64_t checksum_every = 100;
  // TrainerOptions::inject_nonfinite on this rank only (-1: every rank).
  int inject_rank = -1;
  // The caller's settings (mantissa train: its flags), compared across ranks before anything else with
  // the trainer's own (options, parameter shapes, the data's identity): check_settings_agree.
  RunSettings settings = {};
};

struct TrainerOptions {
  PrecisionPolicy precision = {};
  OptimizerConfig optimizer = {};
  // Default: the compute dtype's (dynamic for fp16, none otherwise).
  std::optional<LossScalerOptions> loss_scaling = std::nullopt;
  // Default: constant at optimizer.lr.
  std::optional<LrSchedule> schedule = std::nullopt;
  double clip = 0;                // global gradient-norm clipping; 0: none
  // Multiplies the training loss before backward (a task weight, as auxiliary and multi-task losses
  // carry): a small weight makes every gradient as small. Reported losses are unweighted.
  double loss_weight = 1;
  std::int64_t grad_accum = 1;    // micro-batches per step
  std::int64_t steps = 500;       // the run's last step
  std::int64_t eval_every = 100;  // and after the last step, over all the held-out data
  CheckpointOptions checkpoints = {};
  // Written into every checkpoint (the run's settings).
  std::map<std::string, std::string> checkpoint_metadata = {};
  // Steps whose first gradient gets an inf (testing the skip path).
  std::vector<std::int64_t> inject_nonfinite = {};
  // Numerics telemetry on the steps the policy samples (StepRecord::numerics).
  std::optional<TelemetryPolicy> telemetry = std::nullopt;
  // Every this many steps (and the first; 0: never), StepRecord::lost_updates: how many weight updates
  // round away (the mixed-precision paper's case for master weights).
  std::int64_t update_stats_every = 0;
  // The non-finite tracer (mantissa/autograd/watch.h) on during each step: the first op that makes an
  // inf or NaN stops the step, which is skipped as an overflowing one, with its report (StepRecord::trace).
  bool trace_nonfinite = false;
  // Skipped steps do not advance the learning-rate schedule.
  bool hold_lr_on_skip = false;
  // After this many skipped steps in a row (or when the loss scaler reports a collapse), the step's
  // warning explains: which layers overflowed and what to do. Once per run of skips.
  int skip_patience = 8;
  // Then stop: throw TrainingStalled (with that explanation) instead of training on.
  bool stop_on_stall = false;
  // Text: after this many steps in a row whose loss lies within 0.1 of the training text's byte entropy
  // (DataSource::byte_entropy), the step's warning says that the model predicts bytes by their
  // frequency alone and what to try; once a run (0: never).
  std::int64_t plateau_patience = 50;
  // Adaptive precision (mantissa/train/adaptive.h): each layer's level chosen as the run goes, from the
  // telemetry (the controller's, unless `telemetry` is set) and skipped steps. precision.compute must be
  // the options' 16-bit format, in autocast mode, without precision.fp8.
  std::optional<AdaptiveOptions> adaptive = std::nullopt;
  // Or a fixed per-layer plan (a previous adaptive run's), with precision.compute its 16-bit format.
  std::optional<PrecisionPlan> plan = std::nullopt;
  // Data parallel across the group's ranks (a group of one: ignored).
  std::optional<DataParallelOptions> data_parallel = std::nullopt;
  // Where the model trains: its parameters, buffers, optimizer state and every batch go there (the data
  // sources stay on the CPU). Checkpoints are the same on every device: a run may resume on another.
  Device device = Device::cpu();
};

// What a run computes in, resolved once as the trainer is made (resolve_precision, trainer.cpp) from the
// options' precision, plan or adaptive settings and loss scaling, whichever door gave them (flags, a plan
// file, Python keywords; a checkpoint's plan must then equal it). The trainer reads this and nothing else
// about precision; the adaptive controller edits its plan.
struct RunPrecision {
  DType compute = DType::f32;  // f32, or the 16-bit format of the autocast region or low-precision model
  PrecisionMode mode = PrecisionMode::autocast;
  AutocastPolicy autocast = AutocastPolicy::defaults();  // the region's policy (no region for f32)
  std::vector<std::string> f32_layers;  // modules whose every op runs in f32 (norms too)
  PrecisionPlan plan;                   // every product layer's level and recipe
  bool fixed_plan = false;              // given whole (a plan file), not made from the policy
  LossScalerOptions loss_scaling;
  std::string label;  // "bf16 autocast (attention in fp32)": what the start line and the run record say
  std::string fp8;    // the run-wide recipe as checkpoints record it: "off" without one

  bool low_precision_model() const { return mode == PrecisionMode::low_precision_model; }
  // The dtype a model's inputs are given in: the compute dtype for a low-precision model, else f32.
  DType input_dtype() const { return low_precision_model() ? compute : DType::f32; }
};

// Thrown by a step when stop_on_stall is set and the run has stalled; what() is the explanation.
class TrainingStalled : public Error {
 public:
  using Error::Error;
};

struct StepRecord {
  std::int64_t step;
  double loss, lr, loss_scale, grad_norm, underflow_fraction, throughput;
  bool skipped;
  std::int64_t nonfinite;
  std::map<std::string, std::int64_t> peak_bytes;  // so far in the run, by memory category and "total"
  double elapsed_seconds;                          // since the run's first step
  // Once per run of skipped steps, when it reaches skip_patience or the loss scale collapses: what
  // happened, which layers it came from, what to do; or once a run, a loss held at the text's byte
  // entropy for plateau_patience steps.
  std::string warning;
  std::optional<Fp8Counters> fp8 = std::nullopt;   // this step's FP8 quantization counts, in FP8 runs
  std::vector<std::pair<std::string, Fp8Counters>> fp8_layers = {};  // the same, per FP8 layer
  std::vector<TensorNumerics> numerics = {};       // telemetry, on sampled steps
  std::optional<NonFiniteReport> trace = std::nullopt;  // what stopped the step, with the tracer on
  // On a skipped step: the parameters whose gradients held inf or NaN, and how many (the first few).
  std::vector<std::pair<std::string, std::int64_t>> nonfinite_grads = {};
  std::vector<PrecisionChange> precision_changes = {};  // adaptive precision's decisions after this step
  // On steps update_stats_every samples that updated the weights: of the weights with a non-zero gradient,
  // the share whose update was lost to rounding, by format. A model with bf16/fp16 parameters: those that
  // did not change ("bf16" or "fp16"; with master copies, the master weights still moved). An f32 model:
  // those whose update, applied to the weight stored in bf16 or fp16, would leave it unchanged (both).
  std::map<std::string, double> lost_updates = {};
  // Data parallel: this rank's gradient reduction (bytes sent, the gradient thread's seconds, and those of
  // them backward did not hide).
  std::int64_t comm_bytes = 0;
  double comm_seconds = 0, comm_exposed_seconds = 0;
  int comm_buckets = 0;
  // run()'s should_stop said yes during the step (on any rank): the run ends after it.
  bool stop_requested = false;
};

struct EvalRecord {
  std::int64_t step;
  double val_loss;
  std::optional<double> val_accuracy;  // when the data source reports accuracy
};

struct TrainResult {
  std::int64_t total_steps = 0;  // the run's last step
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  double wall_seconds = 0;
  std::int64_t skipped_steps = 0;
  std::map<std::string, std::int64_t> peak_bytes;  // of the training steps, by memory category, and "total"
  std::string throughput_unit;                     // "images/s" or "tokens/s"
  std::vector<std::string> warnings;
  std::int64_t first_step = 1;  // after a resume, the step after the checkpoint's
  std::int64_t stopped_at = 0;  // the step after which should_stop() ended the run early; 0: it ran to the end
  // Adaptive precision: whether the run was one, and the share of the product layers' multiply-adds run
  // at each level over the run ("fp8", "bf16", "fp32").
  bool adaptive = false;
  // The plan the run computed in, as it ended (an adaptive run's final plan): what each door records, so
  // that a test can hold it against what was asked.
  PrecisionPlan plan;
  std::map<std::string, double> product_shares;
};

struct TrainCallbacks {
  // Once the run has checked what it must (a fresh run's checkpoint directory), before its first step.
  std::function<void()> on_start = {};
  std::function<void(const StepRecord&, std::int64_t total_steps)> on_step = {};
  std::function<void(const EvalRecord&)> on_eval = {};
  // After each checkpoint written (rank 0).
  std::function<void(const std::filesystem::path&, std::int64_t step)> on_save = {};
  // Asked after each step (and during it, once its gradients are in): true ends the run after that
  // step, with a checkpoint where there is a directory and no final evaluation (a signal handler's flag:
  // Ctrl-C). Data parallel: asked only during the step, with the step's other agreements across ranks
  // (no collective of its own), so the ranks stop together after the first step in which any said yes.
  std::function<bool()> should_stop = {};
};

class Trainer {
 public:
  // Converts a low-precision model's parameters to the compute dtype, then builds the optimizer (with f32
  // master weights) over them. Throws std::invalid_argument for options out of range.
  Trainer(Model& model, DataSource& data, TrainerOptions options);

  // The batch with its inputs in the dtype the model takes (the compute dtype for a low-precision model).
  Batch prepare(Batch batch) const;
  // One optimizer step over these micro-batches (prepared ones are not cast again), at the learning rate
  // of step next_step(), which it then advances.
  StepRecord step(std::span<const Batch> micro_batches);
  // Draws options().grad_accum batches from the data source and steps over them.
  StepRecord step();
  // The model's loss on one batch, under the precision policy (with gradients unless inside NoGradGuard).
  Tensor loss(const Batch& batch);
  // The mean cross-entropy (and the accuracy) over the data source's evaluation batches, without
  // gradients: of forward()'s logits where accuracy is reported, else the model's loss_sum(), which
  // the GPT computes without a whole batch's logits.
  EvalRecord evaluate(bool full);

  // Writes a checkpoint of everything a run needs to continue exactly (atomically: the old file or the
  // new one, never a torn one). Data parallel: rank 0 writes; the others return at once.
  void save(const std::filesystem::path& path) const;
  // Restores model, optimizer, loss scaler and data position from a checkpoint; `check` sees the
  // metadata first (and throws to refuse it). Throws CheckpointError naming the file and what is wrong.
  void resume(const std::filesystem::path& path,
              const std::function<void(const std::map<std::string, std::string>&)>& check = {});

  // Steps from next_step() to options().steps, evaluating every eval_every steps and after the last,
  // checkpointing as asked (every `every` steps, `every_seconds` after the last save, after the last
  // step, and when should_stop() ends the run).
  TrainResult run(const TrainCallbacks& callbacks = {});

  // The weights this run trains, by PyTorch's names (the model's parameters and buffers, not the FP8
  // state), as f32 copies: a parameter's master copy where it has one, so nothing is lost to its bf16/f16.
  std::vector<std::pair<std::string, Tensor>> weights() const;
  // Sets every one of them (checked as load_weights() checks, `where` naming them in errors), the master
  // copies too; the optimizer's moments and the step count stay.
  void set_weights(const std::vector<std::pair<std::string, Tensor>>& weights, const std::string& where);

  std::int64_t next_step() const { return next_step_; }
  Optimizer& optimizer() { return *optimizer_; }
  LossScaler& scaler() { return scaler_; }
  const TrainerOptions& options() const { return options_; }
  // What the run computes in, resolved once from the options.
  const RunPrecision& precision() const { return precision_; }
  // Which layer runs in what: the plan the trainer made of its policy (or was given), which the adaptive
  // controller edits as the run goes.
  const PrecisionPlan& precision_plan() const { return precision_.plan; }
  // The adaptive precision controller (null without adaptive precision).
  const PrecisionController* controller() const { return controller_.get(); }
  // This process's rank and the number of ranks (0 and 1 without data parallel).
  int rank() const { return group_ ? group_->rank() : 0; }
  int ranks() const { return group_ ? group_->size() : 1; }

 private:
  Model& model_;
  DataSource& data_;
  TrainerOptions options_;
  RunPrecision precision_;  // (the adaptive controller holds a reference to its plan)
  std::unique_ptr<Optimizer> optimizer_;
  LossScaler scaler_;
  LrSchedule schedule_;
  std::unique_ptr<Telemetry> telemetry_;
  std::unique_ptr<PrecisionController> controller_;
  std::shared_ptr<dist::ProcessGroup> group_;   // data parallel over more than one rank, else null
  std::unique_ptr<dist::GradReducer> reducer_;
  // The current run of skipped steps: its length, and which layers its non-finite values came from.
  struct SkipStreak {
    std::int64_t first = 0, length = 0;
    std::map<std::string, std::int64_t> layers;
    bool explained = false;
  } streak_;
  // Notes the step's outcome in streak_; returns the explanation when the run has stalled, else "".
  std::string follow_skips(const StepRecord& record, bool collapsed);
  // Steps in a row at the text's byte entropy (the unigram plateau), and whether the run has said so.
  struct Plateau {
    std::int64_t first = 0, length = 0;
    bool explained = false;
  } plateau_;
  // Notes the step's loss in plateau_; returns the explanation when it has stayed there, else "".
  std::string follow_plateau(const StepRecord& record);
  // A step's phases, in the order step() runs them (trainer.cpp).
  struct Pass;
  struct Update;
  std::vector<Batch> shard(std::span<const Batch> global_batches);  // data parallel: this rank's rows
  Telemetry* begin_step(std::int64_t step);  // the learning rate, counters; the telemetry if due
  // Into `pass`; the losses (and FP8 counts) go to `reads`, read with the loss scaler's check: one wait
  // a step (pass.loss is complete once they are read).
  void forward_backward(std::int64_t step, std::span<const Batch> micro_batches, Telemetry* telemetry, BatchedReads& reads,
                        Pass& pass);
  void agree_on_pass(Pass& pass) const;  // loss, items, whether to skip and to stop, of all ranks
  Update update_weights(std::int64_t step, const Pass& pass, Telemetry* telemetry, BatchedReads& reads);  // or skip
  void end_fp8_step();  // delayed scaling's histories and scales (amaxes agreed over the ranks)
  void check_replicas(std::int64_t step) const;  // data parallel: the weights' checksums, when due
  StepRecord record_step(std::int64_t step, Pass pass, const Update& update, double seconds, Telemetry* telemetry);
  void adapt_precision(StepRecord& record, bool skipped);  // the adaptive controller's decisions
  std::int64_t next_step_ = 1;
  std::optional<std::chrono::steady_clock::time_point> start_;
  std::function<bool()> should_stop_;  // run()'s TrainCallbacks::should_stop, while it runs
};

}  // namespace mantissa::train
