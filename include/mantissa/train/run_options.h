// The options of one training run, owned by the library: every setting a door can give (the `mantissa
// train` command's flags, the Python Trainer's keywords), under one name each, in one type both fill.
// A setting given as a value (a precision's name, on/off, a list) is turned into its typed field by its
// row of one table (run_option_table(), set_run_option), whichever door gave it; what the library says
// about a setting (a range, a contradiction) names it as the door spells it (RunOptions::name: --batch-size
// for the command, batch_size for Python), so no door rewrites another's wording.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "mantissa/core/dtype.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/train/adaptive.h"
#include "mantissa/train/config.h"
#include "mantissa/train/telemetry.h"

namespace mantissa::train {

// How a door spells a setting's name: the command's flags (--batch-size) or Python's keywords (batch_size).
enum class Spelling : std::uint8_t { flags, keywords };

struct RunOptions {
  std::string model = "mlp";  // mlp, cnn, segment, gpt, lstm
  std::string data;           // default: Fashion-MNIST (mlp, cnn) or the fortunes (gpt)
  // An image set file by file (IDX or .npy), instead of data.
  std::string train_images, train_labels, test_images, test_labels;
  std::string normalize = "auto";  // images: the training set's own mean and std, or "MEAN,STD"
  // The precision as asked ("fp32", "bf16", "fp8", a recipe's name, "adaptive"); resolve_precision()
  // makes `precision`'s compute dtype and FP8 options, and `adaptive`, from it.
  std::string precision_name = "fp32";
  // The library's one value for what the run computes in, handed to the trainer as it is: its mode, f32
  // layers and ops, FP8 layer choices are set directly, its dtype and FP8 options by resolve_precision().
  PrecisionPolicy precision;
  QuantOptions fp8_options;  // the FP8 and microscaled recipes' settings, for a precision with one
  std::string loss_scale;  // dynamic, deepspeed, static:N, none; default: dynamic for fp16, else none
  double init_scale = 65536, growth_factor = 2, backoff_factor = 0.5, min_scale = 0;  // GradScaler's
  std::int64_t growth_interval = 2000;
  int hysteresis = 1;
  std::string optimizer = "adamw";  // adamw, adam, sgd
  double lr = 1e-3, weight_decay = 0.01, momentum = 0.9, clip = 0;
  double loss_weight = 1;             // multiplies the training loss (and so every gradient)
  std::string schedule = "cosine";    // cosine (with warm-up) or constant
  std::int64_t warmup = 0;
  bool stochastic_rounding = false;   // master-weight write-back
  bool master_weights = true;         // off: bf16/fp16 parameters updated in place (needs low-precision-model)
  std::int64_t update_stats_every = 0;  // StepRecord::lost_updates every N steps (0: never)
  std::int64_t steps = 500, batch_size = 128, grad_accum = 1, eval_every = 100, eval_batches = 20;
  std::int64_t epochs = 0;  // > 0: steps = epochs passes over the training images (mlp, cnn)
  std::uint64_t seed = 0;
  int threads = 0;
  std::string device = "cpu";  // cpu, or cuda (cuda:0); not part of a checkpoint's settings
  std::vector<std::int64_t> inject_nonfinite;  // steps (1-based) whose gradient gets an inf
  bool trace_nonfinite = false;                // stop a step at the first op that makes an inf/NaN, naming it
  bool hold_lr_on_skip = false;                // skipped steps do not advance the schedule
  int skip_patience = 8;                       // skipped steps in a row before the run explains itself
  std::int64_t plateau_patience = 50;          // text: steps at the byte entropy before the run says so (0: never)
  bool stop_on_stall = false;                  // then stop (exit status 3)
  bool quiet = false;                          // no progress lines (warnings and errors still)
  // Numerics telemetry: what to sample (telemetry_policy()), and the policy when the run samples.
  std::int64_t telemetry_every = 50;
  std::vector<std::string> telemetry_tensors, telemetry_layers;
  std::optional<TelemetryPolicy> telemetry;
  bool adaptive = false;                       // precision "adaptive": per-layer levels chosen as it trains
  AdaptiveOptions adaptive_options;
  std::string precision_plan;                  // a plan file: a fixed per-layer plan
  std::string checkpoint_dir;                  // empty: no checkpoints
  std::int64_t checkpoint_every = 0;           // 0: by time (checkpoint_minutes) and at the end
  double checkpoint_minutes = 10;              // also this long after the last save; 0: off
  int keep = 3;                                // checkpoints kept
  bool resume = false;                         // continue from the newest readable checkpoint in checkpoint_dir
  std::string resume_from;                     // continue from this checkpoint file
  std::string init_from;                       // start from these weights (a PyTorch state_dict in safetensors)
  std::vector<std::string> resume_allow;       // settings that may differ from the checkpoint's (keys: "lr", ...)
  // Model sizes.
  std::int64_t hidden = 256, layers = 2, width = 32;
  std::int64_t n_layer = 4, n_head = 4, n_embd = 256, block_size = 128;
  std::string gelu = "erf";  // gpt: the MLP's GELU, erf (exact) or tanh (GPT-2's form)
  std::int64_t embd = 64, bptt = 64;  // lstm: embedding width, segment length (truncated BPTT)
  // Data parallel (under mpirun): the gradients' wire format, buckets, overlap with backward, the weights'
  // checksum interval, the rank inject_nonfinite applies to (-1: all), the collectives' timeout.
  DType grad_reduce = DType::f32;
  double bucket_mb = 1;
  bool overlap = true;
  std::int64_t checksum_every = 100;
  int inject_rank = -1;
  double dist_timeout = 300;
  // The settings the door was given (keys, as "batch_size"; not defaulted), for those that contradict each
  // other or do nothing.
  std::set<std::string> given;
  // compare: every precision of the comparison this run is one of (a setting for one of them is not idle).
  std::vector<std::string> compared;
  // How this run's messages name its settings.
  Spelling spelling = Spelling::flags;

  // A setting's key ("batch_size", "adaptive_*") as the door spells it: "--batch-size" or "batch_size".
  std::string name(std::string_view key) const;
  bool was_given(std::string_view key) const { return given.count(std::string(key)) > 0; }
};

// The value a door gives a setting: a count, a real number, on/off (or a switch), text, or a list.
using OptionValue = std::variant<std::int64_t, double, bool, std::string, std::vector<std::string>>;
enum class OptionKind : std::uint8_t {
  integer,  // std::int64_t
  real,     // double (an integer is taken too)
  flag,     // bool: a switch, off unless given
  on_off,   // bool: on or off (the command's words on/off)
  text,     // std::string
  list,     // std::vector<std::string> (the command's comma-separated words)
};
struct RunOption {
  const char* key;  // "batch_size": Python's keyword; the command's flag is --batch-size
  OptionKind kind;
};
// Every setting of a run, in the order `mantissa train --help` lists them.
const std::vector<RunOption>& run_option_table();
// The table's row for a key (nullptr for none).
const RunOption* find_run_option(std::string_view key);
// Sets one setting from a door's value, checked against its row's kind and turned into its typed field
// (a name into its enum, a list of step numbers into integers), and records it as given. Throws UsageError
// naming the setting as o.spelling says: an unknown key, a value of another kind, a name it does not take.
void set_run_option(RunOptions& o, std::string_view key, const OptionValue& value);

// Makes the precision from precision_name, fp8_options and adaptive_options: the compute dtype, the FP8
// recipe's options (fp8, a microscaled recipe) or adaptive. Throws UsageError naming the setting.
void resolve_precision(RunOptions& o);
// Sets precision_name and resolves it (compare, paper: each run's precision by name).
void set_precision(RunOptions& o, const std::string& name);
// Every setting in its range and consistent with the rest (a run's first check; compare checks each
// precision's before the first runs): throws UsageError or std::invalid_argument naming the setting. The
// thread count is checked where the run takes its threads.
void check_run_options(const RunOptions& o);

// The images' normalization `normalize` says: (mean, std), both kOwnStatistics for "auto"; throws
// UsageError for anything but auto or two numbers MEAN,STD with STD > 0.
std::pair<double, double> normalization(const RunOptions& o);
// The telemetry the telemetry_* settings say, checked (UsageError naming the setting).
TelemetryPolicy telemetry_policy(const RunOptions& o);
// The dynamic loss scaler's options and the loss scaling loss_scale names (UsageError naming it).
LossScalerOptions loss_scaler_options(const RunOptions& o);
// The optimizer the settings say (UsageError naming `optimizer`).
OptimizerConfig optimizer_options(const RunOptions& o);

}  // namespace mantissa::train
