// One training run as the command describes it: the flags' values, turned into the library's typed
// options, data source and model, and handed to train::Trainer. `mantissa train` runs one; `mantissa
// compare` runs several and puts them side by side.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mantissa/core/dtype.h"
#include "mantissa/dist/process_group.h"
#include "mantissa/train/builders.h"
#include "mantissa/train/run_options.h"
#include "mantissa/train/trainer.h"

namespace mantissa::cli {

// The library's options of a run (mantissa/train/run_options.h), which the command's flags fill.
using train::RunOptions;

// What a run reports: the library's records (mantissa/train/trainer.h).
using train::EvalRecord;
using train::StepRecord;
using train::TrainCallbacks;
using train::TrainResult;

// The settings' checks and precision names are the library's (run_options.h).
using train::check_run_options;
using train::normalization;
using train::set_precision;

// --device (train, compare, bench --model): cpu, or cuda (cuda:0); cuda where no GPU is usable is refused
// with the reason (std::runtime_error), a name that is no device with UsageError; `flag` is the door's name for it.
Device device_option(const std::string& name, const std::string& flag = "--device");

// This process's group: MPI's world under mpirun, else a single process (made once).
std::shared_ptr<dist::ProcessGroup> process_group();

// A run made ready, not yet run: the data, model and trainer of a configuration, built and checked as
// `train` builds them, resumed where it asks. train() is prepare_run() then run(); the Python module keeps
// one to run, read and save.
struct PreparedRun {
  RunOptions config;            // as given, with --epochs turned into steps
  train::DataShape shape;        // what the model takes from the data
  std::string data_summary;      // "PATH: 60000 training images of 1x28x28, ...", said at the start
  std::string normalization;     // images: {"mean": M, "std": S} as JSON (checkpoints keep it); text: ""
  std::filesystem::path resumed_from;  // empty: a fresh run
  std::unique_ptr<train::DataSource> data;
  std::unique_ptr<train::Model> model;
  std::unique_ptr<train::Trainer> trainer;  // last: it refers to the model and the data
};
// The data of the runs of a command that runs several (compare's precisions, paper's cells, and the probes
// that check each before the first trains), read once: each run gets a copy of what its options name,
// read (and normalized) the first time a run names it.
class RunDataCache {
 public:
  train::Dataset data(const RunOptions& c);

 private:
  std::map<std::string, train::Dataset> read_;
};

// Throws as train() does. `in_memory`: the data set to train on instead of reading config.data (which,
// when empty, becomes its name). `cache`: where the data config names is read, once for the runs it serves.
PreparedRun prepare_run(const RunOptions& config, std::optional<train::Dataset> in_memory = std::nullopt,
                        RunDataCache* cache = nullptr);
// A run of a command that runs several (compare, paper) prepared as far as its first step and dropped,
// saying nothing, before the first of them trains: a refusal comes first, as "`door`: ..." (a usage
// error), not after the runs before it. The progress setting is left as it was. Returns the precision
// plan the run resolved (an adaptive run's first), which its metrics and checkpoints will record.
train::PrecisionPlan check_run_starts(const RunOptions& config, const std::string& door, RunDataCache* cache = nullptr);
// Runs it to config.steps, with the start lines and `on_run` as train() has them. `catch_signals`: Ctrl-C
// and SIGTERM stop the run at the next step boundary, with a checkpoint, and throw Interrupted (a host with
// its own handlers, as Python, passes false and asks through callbacks.should_stop).
TrainResult run(PreparedRun& run, const TrainCallbacks& callbacks, const std::function<void(const std::string& run_json)>& on_run = {},
                bool catch_signals = true);

// Runs the training; throws std::invalid_argument for a bad configuration, DataError for bad data.
// `on_run`, when given, hears the run's record as its first step begins: one JSON object with what a
// metrics file's reader needs to know the run (docs/metrics.md: "record": "run", the version, the start
// time, the machine, every setting, the data, the precision plan, where it resumed from).
TrainResult train(const RunOptions& config, const TrainCallbacks& callbacks,
                  const std::function<void(const std::string& run_json)>& on_run = {}, RunDataCache* cache = nullptr);

// The run's training loss as (step, exponential moving average) points, so noisy per-step losses read as
// a curve; non-finite losses (skipped or diverged steps) are left out.
std::vector<std::pair<double, double>> loss_curve(const TrainResult& r);

}  // namespace mantissa::cli
