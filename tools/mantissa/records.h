// A run's records as JSON, one home for their shape: the lines `mantissa train --metrics` writes and the
// dicts the Python module hands its callbacks are these (docs/metrics.md). And the telemetry flags, which
// `train` and the Python module's Trainer share.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mantissa/train/run_options.h"
#include "mantissa/train/trainer.h"

namespace mantissa::cli {

// {"step", "loss", "lr", "loss_scale", "skipped", "grad_norm", "nonfinite", "underflow_fraction", "throughput",
//  "peak_bytes", "wall_time"}, and where the step has them "fp8", "fp8_layers", "trace", "nonfinite_grads",
// "lost_updates". Telemetry (StepRecord::numerics) is not in it: its lines go to their own file.
nlohmann::json step_json(const train::StepRecord& r);
// {"step", "val_loss", "wall_time"} and "val_accuracy" where the data reports it.
nlohmann::json eval_json(const train::EvalRecord& r);
// Peak bytes by memory category, as an object.
nlohmann::json peak_json(const std::map<std::string, std::int64_t>& peaks);

// --telemetry-every, --telemetry-tensors, --telemetry-layers: which steps, tensors and layers telemetry measures.
// --telemetry-every, --telemetry-tensors, --telemetry-layers, into the run's options (the library makes
// the policy from them: train::telemetry_policy).
void add_telemetry_options(CLI::App& app, train::RunOptions& options);

// A --telemetry file's records, each read by TensorNumerics::parse; std::invalid_argument naming the file
// and line of a bad one, or a file with none.
std::vector<train::TensorNumerics> read_telemetry(const std::string& path);

}  // namespace mantissa::cli
