// One training run as the command describes it: the flags' values, turned into the library's typed
// options, data source and model, and handed to train::Trainer. `mantissa train` runs one; `mantissa
// compare` runs several and puts them side by side.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mantissa/core/dtype.h"
#include "mantissa/base/value_range.h"
#include "mantissa/dist/process_group.h"
#include "mantissa/train/builders.h"
#include "mantissa/train/trainer.h"

namespace mantissa::cli {

struct TrainConfig {
  std::string model = "mlp";  // mlp, cnn, segment, gpt, lstm
  std::string data;           // default: Fashion-MNIST (mlp, cnn) or the fortunes (gpt)
  // --train-images, --train-labels, --test-images, --test-labels: an image set file by file (IDX or .npy)
  std::string train_images, train_labels, test_images, test_labels;
  std::string normalize = "auto";  // images: the training set's own mean and std, or "MEAN,STD"
  // --precision, --mode, --fp8-bf16-layers, --fp8-layers, --fp8-first-last, --fp32-layers, --fp32-ops: the
  // library's one value, handed to the trainer as it is.
  train::PrecisionPolicy precision;
  Fp8Options fp8_options;  // --fp8-recipe, --fp8-format, --amax-history, --fp8-margin, ...: for a precision with FP8
  std::string loss_scale;            // dynamic, deepspeed, static:N, none; default: dynamic for fp16, else none
  double init_scale = 65536, growth_factor = 2, backoff_factor = 0.5, min_scale = 0;  // GradScaler's
  std::int64_t growth_interval = 2000;
  int hysteresis = 1;
  std::string optimizer = "adamw";  // adamw, adam, sgd
  double lr = 1e-3, weight_decay = 0.01, momentum = 0.9, clip = 0;
  double loss_weight = 1;  // multiplies the training loss (and so every gradient)
  std::string schedule = "cosine";  // cosine (with warm-up) or constant
  std::int64_t warmup = 0;
  bool stochastic_rounding = false;  // master-weight write-back
  bool master_weights = true;        // --master-weights off: bf16/fp16 parameters updated in place (needs low-precision-model)
  std::int64_t update_stats_every = 0;  // StepRecord::lost_updates every N steps (0: never)
  std::int64_t steps = 500, batch_size = 128, grad_accum = 1, eval_every = 100, eval_batches = 20;
  std::int64_t epochs = 0;  // > 0: steps = epochs passes over the training images (mlp, cnn)
  std::uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu";  // cpu, or cuda (cuda:0): where the model trains; not part of a checkpoint's settings
  std::vector<std::int64_t> inject_nonfinite;  // steps (1-based) whose gradient gets an inf
  bool trace_nonfinite = false;                // stop a step at the first op that makes an inf/NaN, naming it
  bool hold_lr_on_skip = false;                // skipped steps do not advance the schedule
  int skip_patience = 8;                       // skipped steps in a row before the run explains itself
  std::int64_t plateau_patience = 50;          // text: steps at the byte entropy before the run says so (0: never)
  bool stop_on_stall = false;                  // then stop (exit status 3)
  bool quiet = false;                          // --quiet: no progress lines (warnings and errors still)
  std::optional<train::TelemetryPolicy> telemetry;  // numerics telemetry (train --telemetry)
  bool adaptive = false;                       // --precision adaptive: per-layer levels chosen as it trains
  train::AdaptiveOptions adaptive_options;     // --adaptive-dtype, --adaptive-fp8, --adaptive-every, --adaptive-warmup
  std::string precision_plan;                  // --precision-plan FILE: a fixed per-layer plan
  std::string checkpoint_dir;                  // empty: no checkpoints
  std::int64_t checkpoint_every = 0;           // 0: by time (checkpoint_minutes) and at the end
  double checkpoint_minutes = 10;              // also this long after the last save; 0: off
  int keep = 3;                                // checkpoints kept
  bool resume = false;                         // continue from the newest readable checkpoint in checkpoint_dir
  std::string resume_from;                     // continue from this checkpoint file
  std::string init_from;                       // start from these weights (a PyTorch state_dict in safetensors)
  std::vector<std::string> resume_allow;       // settings that may differ from the checkpoint's ("lr", ...)
  // Model sizes.
  std::int64_t hidden = 256, layers = 2, width = 32;
  std::int64_t n_layer = 4, n_head = 4, n_embd = 256, block_size = 128;
  std::string gelu = "erf";  // gpt: the MLP's GELU, erf (exact) or tanh (GPT-2's form)
  std::int64_t embd = 64, bptt = 64;  // lstm: embedding width, segment length (truncated BPTT); --hidden, --layers
  // Data parallel (under mpirun): the gradients' wire format, buckets, overlap with backward, the weights'
  // checksum interval, the rank --inject-nonfinite applies to (-1: all), the collectives' timeout.
  DType grad_reduce = DType::f32;
  double bucket_mb = 1;
  bool overlap = true;
  std::int64_t checksum_every = 100;
  int inject_rank = -1;
  double dist_timeout = 300;
  // The flags given on the command line (not defaulted), for settings that contradict each other or do
  // nothing (check_agreement).
  std::set<std::string> given;
  // compare: every precision of the comparison this run is one of (a flag for one of them is not idle).
  std::vector<std::string> compared;
};

// What a run reports: the library's records (mantissa/train/trainer.h).
using train::EvalRecord;
using train::StepRecord;
using train::TrainCallbacks;
using train::TrainResult;

// Sets c's precision from a name: fp32, bf16, fp16, fp8 (bf16 with FP8 products) or adaptive (per-layer
// levels over c.adaptive_options.low); throws std::invalid_argument for any other.
void set_precision(TrainConfig& c, const std::string& name);
// The name set_precision() took: "fp32", "bf16", "fp16", "fp8" or "adaptive".
std::string precision_label(const TrainConfig& c);

// Every setting of c in its range and consistent with the rest (a run's first check; compare checks
// each precision's before the first runs): throws UsageError or std::invalid_argument naming the flag.
void check_config(const TrainConfig& c);

// A real-valued flag, the field it sets and its range (mantissa/train/setting_ranges.h); a run's check
// refuses a value outside, in one line naming the flag and the range.
struct RealSetting {
  const char* flag;
  double TrainConfig::*value;
  ValueRange range;
};
const std::vector<RealSetting>& real_settings();

// The images' normalization --normalize says: (mean, std), both kOwnStatistics for "auto"; throws
// std::invalid_argument for anything but auto or two numbers MEAN,STD with STD > 0.
std::pair<double, double> normalization(const TrainConfig& c);

// --grad-reduce's format (f32, bf16 or fp16, by train::parse_precision); throws std::invalid_argument
// naming the flag.
DType grad_reduce_format(const std::string& name);
// --device (train, compare, bench --model): cpu, or cuda (cuda:0); cuda where no GPU is usable is refused
// with the reason (std::runtime_error), a name that is no device with std::invalid_argument.
Device device_option(const std::string& name);

// This process's group: MPI's world under mpirun, else a single process (made once).
std::shared_ptr<dist::ProcessGroup> process_group();

// A run made ready, not yet run: the data, model and trainer of a configuration, built and checked as
// `train` builds them, resumed where it asks. train() is prepare_run() then run(); the Python module keeps
// one to run, read and save.
struct PreparedRun {
  TrainConfig config;            // as given, with --epochs turned into steps
  train::DataShape shape;        // what the model takes from the data
  std::string data_summary;      // "PATH: 60000 training images of 1x28x28, ...", said at the start
  std::string normalization;     // images: {"mean": M, "std": S} as JSON (checkpoints keep it); text: ""
  std::filesystem::path resumed_from;  // empty: a fresh run
  std::unique_ptr<train::DataSource> data;
  std::unique_ptr<train::Model> model;
  std::unique_ptr<train::Trainer> trainer;  // last: it refers to the model and the data
};
// Throws as train() does. `in_memory`: the data set to train on instead of reading config.data (which,
// when empty, becomes its name).
PreparedRun prepare_run(const TrainConfig& config, std::optional<train::Dataset> in_memory = std::nullopt);
// A run of a command that runs several (compare, paper) prepared as far as its first step and dropped,
// saying nothing, before the first of them trains: a refusal comes first, as "`door`: ..." (a usage
// error), not after the runs before it. The progress setting is left as it was. Returns the precision
// plan the run resolved (an adaptive run's first), which its metrics and checkpoints will record.
train::PrecisionPlan check_run_starts(const TrainConfig& config, const std::string& door);
// Runs it to config.steps, with the start lines and `on_run` as train() has them. `catch_signals`: Ctrl-C
// and SIGTERM stop the run at the next step boundary, with a checkpoint, and throw Interrupted (a host with
// its own handlers, as Python, passes false and asks through callbacks.should_stop).
TrainResult run(PreparedRun& run, const TrainCallbacks& callbacks, const std::function<void(const std::string& run_json)>& on_run = {},
                bool catch_signals = true);

// Runs the training; throws std::invalid_argument for a bad configuration, DataError for bad data.
// `on_run`, when given, hears the run's record as its first step begins: one JSON object with what a
// metrics file's reader needs to know the run (docs/metrics.md: "record": "run", the version, the start
// time, the machine, every setting, the data, the precision plan, where it resumed from).
TrainResult train(const TrainConfig& config, const TrainCallbacks& callbacks,
                  const std::function<void(const std::string& run_json)>& on_run = {});

// The run's training loss as (step, exponential moving average) points, so noisy per-step losses read as
// a curve; non-finite losses (skipped or diverged steps) are left out.
std::vector<std::pair<double, double>> loss_curve(const TrainResult& r);

}  // namespace mantissa::cli
