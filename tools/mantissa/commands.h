// The subcommands of the `mantissa` command. Each registers its options on the parser and returns the
// function that runs it (which returns the exit status).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "training.h"

namespace mantissa::cli {

using Run = std::function<int()>;

// Exit status for bad input (an unknown format, a malformed number, a missing flag value).
inline constexpr int kBadInput = 2;
// Exit status for a training run that stopped because it stalled (--stop-on-stall).
inline constexpr int kStalled = 3;

Run add_formats(CLI::App& app);
Run add_cast(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_info(CLI::App& app);
Run add_train(CLI::App& app);
Run add_compare(CLI::App& app);
Run add_paper(CLI::App& app);
Run add_inspect(CLI::App& app);
Run add_export(CLI::App& app);

// The training flags `train`, `compare` and `paper` share (cmd_train.cpp): most bound to the run's options
// directly, the ones read as words here until resolve() hands each to the library's rule for it
// (train::set_run_option) and resolves the precision.
struct TrainArgs {
  RunOptions config;
  std::string precision = "fp32", mode = "autocast", inject;
  std::string fp8_recipe = "delayed", fp8_format = "hybrid", fp8_first_last = "recipe";
  std::string adaptive_dtype = "bf16", adaptive_fp8 = "on";
  std::string master_weights = "on", fp32_ops = "default";
  std::string grad_reduce = "f32", overlap = "on";
  bool nvfp4_no_rht = false, nvfp4_no_sr = false, nvfp4_1d_weights = false;  // nvfp4's ablations
  std::string mx_scale = "rceil";                                               // the microscaled recipes with E8M0 scales
};
void add_train_options(CLI::App& app, TrainArgs& args);
RunOptions resolve(const TrainArgs& args);

}  // namespace mantissa::cli
