// A run's records as JSON (see records.h).
#include "records.h"

#include "machine.h"
#include "mantissa/core/input_file.h"

namespace mantissa::cli {
namespace {

// A step's FP8 counters (runs with FP8 only).
nlohmann::json fp8_json(const Fp8Counters& c) {
  return {{"quantized", c.quantized}, {"saturated", c.saturated}, {"underflowed", c.underflowed},
          {"scale_updates", c.scale_updates}};
}

}  // namespace

nlohmann::json peak_json(const std::map<std::string, std::int64_t>& peaks) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : peaks) j[k] = v;
  return j;
}

nlohmann::json step_json(const train::StepRecord& r) {
  nlohmann::json record = {{"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"loss_scale", r.loss_scale},
                           {"skipped", r.skipped}, {"grad_norm", r.grad_norm}, {"nonfinite", r.nonfinite},
                           {"underflow_fraction", r.underflow_fraction}, {"throughput", r.throughput},
                           {"peak_bytes", peak_json(r.peak_bytes)}, {"wall_time", unix_time()}};
  if (r.fp8) record["fp8"] = fp8_json(*r.fp8);
  for (const auto& [path, counts] : r.fp8_layers) record["fp8_layers"][path] = fp8_json(counts);
  if (r.trace) record["trace"] = r.trace->str();
  if (!r.nonfinite_grads.empty()) record["nonfinite_grads"] = r.nonfinite_grads;
  if (!r.lost_updates.empty()) record["lost_updates"] = r.lost_updates;
  return record;
}

nlohmann::json eval_json(const train::EvalRecord& r) {
  nlohmann::json j = {{"step", r.step}, {"val_loss", r.val_loss}, {"wall_time", unix_time()}};
  if (r.val_accuracy) j["val_accuracy"] = *r.val_accuracy;
  return j;
}

void add_telemetry_options(CLI::App& app, train::RunOptions& o) {
  app.add_option("--telemetry-every", o.telemetry_every, "Steps between telemetry samples (and the first)")->capture_default_str();
  app.add_option("--telemetry-tensors", o.telemetry_tensors, "Which tensors: activations, weights, weight-grads, activation-grads (default: all)")
      ->delimiter(',');
  app.add_option("--telemetry-layers", o.telemetry_layers, "Module paths (or prefixes) measured (default: all)")->delimiter(',');
}

std::vector<train::TensorNumerics> read_telemetry(const std::string& path) {
  // Line by line: a record is about a kilobyte, so a line past a mebibyte is no record.
  InputFile in(path, "a telemetry file", kMaxTelemetryBytes);
  std::vector<train::TensorNumerics> out;
  std::string line;
  for (std::int64_t n = 1; in.read_line(line, std::size_t{1} << 20); ++n) {
    if (line.empty()) continue;
    try {
      out.push_back(train::TensorNumerics::parse(line));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  if (out.empty()) throw std::invalid_argument(path + ": no telemetry records (train with --telemetry " + path + ")");
  return out;
}

}  // namespace mantissa::cli
