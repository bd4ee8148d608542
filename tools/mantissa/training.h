// One training run as the command describes it: the configuration, the loop, and what it reports.
// `mantissa train` runs one; `mantissa compare` runs several and puts them side by side.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/core/dtype.h"

namespace mantissa::cli {

struct TrainConfig {
  std::string model = "mlp";  // mlp, cnn, gpt
  std::string data;           // default: Fashion-MNIST (mlp, cnn) or the fortunes (gpt)
  DType precision = DType::f32;
  bool low_precision_model = false;  // --mode low-precision-model
  std::string loss_scale;            // dynamic, deepspeed, static:N, none; default: dynamic for fp16, else none
  double init_scale = 65536, growth_factor = 2, backoff_factor = 0.5, min_scale = 0;  // GradScaler's
  std::int64_t growth_interval = 2000;
  int hysteresis = 1;
  std::string optimizer = "adamw";  // adamw, adam, sgd
  double lr = 1e-3, weight_decay = 0.01, momentum = 0.9, clip = 0;
  std::string schedule = "cosine";  // cosine (with warm-up) or constant
  std::int64_t warmup = 0;
  bool stochastic_rounding = false;  // master-weight write-back
  std::int64_t steps = 500, batch_size = 128, grad_accum = 1, eval_every = 100, eval_batches = 20;
  std::int64_t epochs = 0;  // > 0: steps = epochs passes over the training images (mlp, cnn)
  std::uint64_t seed = 0;
  int threads = 0;
  std::vector<std::int64_t> inject_nonfinite;  // steps (1-based) whose gradient gets an inf
  std::string checkpoint_dir;                  // empty: no checkpoints
  std::int64_t checkpoint_every = 0;           // 0: only at the end
  int keep = 3;                                // checkpoints kept
  bool resume = false;                         // continue from the newest checkpoint in checkpoint_dir
  std::vector<std::string> resume_allow;       // settings that may differ from the checkpoint's ("lr", ...)
  // Model sizes.
  std::int64_t hidden = 256, layers = 2, width = 32;
  std::int64_t n_layer = 4, n_head = 4, n_embd = 256, block_size = 128;
};

struct StepRecord {
  std::int64_t step;
  double loss, lr, loss_scale, grad_norm, underflow_fraction, throughput;
  bool skipped;
  std::int64_t nonfinite;
  std::map<std::string, std::int64_t> peak_bytes;  // so far in the run, by memory category and "total"
  double elapsed_seconds;                          // since the run's first step
};

struct EvalRecord {
  std::int64_t step;
  double val_loss;
  std::optional<double> val_accuracy;  // classification only
};

struct TrainResult {
  std::int64_t total_steps = 0;  // the run's last step (from --steps, or --epochs)
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  double wall_seconds = 0;
  std::int64_t skipped_steps = 0;
  std::map<std::string, std::int64_t> peak_bytes;  // of the training steps, by memory category, and "total"
  std::string throughput_unit;                     // "images/s" or "tokens/s"
  std::vector<std::string> warnings;
  std::int64_t first_step = 1;  // after --resume, the step after the checkpoint's
};

struct TrainCallbacks {
  std::function<void(const StepRecord&, std::int64_t total_steps)> on_step;
  std::function<void(const EvalRecord&)> on_eval;
};

// Runs the training; throws std::invalid_argument for a bad configuration, DataError for bad data.
TrainResult train(const TrainConfig& config, const TrainCallbacks& callbacks);

}  // namespace mantissa::cli
