// `mantissa inspect`: reads a run's numerics telemetry (train --telemetry) and says what it shows: which
// tensors sit closest to underflow and to overflow in the format that matters for them, how that moved
// from the first sampled step to the last, and, as the mixed-precision paper drew it, the histogram of
// the activation gradients' log2 magnitudes with fp16's ranges marked and the share that would be lost
// without loss scaling.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <sstream>

#include "commands.h"
#include "records.h"
#include "mantissa/core/input_file.h"
#include "mantissa/io/json_number.h"
#include "mantissa/numeric/format.h"
#include "mantissa/train/telemetry.h"
#include "output_file.h"
#include "output_flags.h"
#include "svg_plot.h"

namespace mantissa::cli {
namespace {

using train::TensorKind;
using train::TensorNumerics;

struct InspectArgs {
  std::string path, format = "auto", plot;
  std::int64_t step = 0;  // 0: the last sampled step
  int top = 8;
};

std::string percent(double share) { return fmt::format("{:.2f}%", 100 * share); }

// A metrics file (train --metrics: a run record, then step and evaluation records; docs/metrics.md),
// summed up per run; false when `path` is not one (its first record is telemetry's, or not a record).

bool inspect_metrics(const InspectArgs& a) {
  const std::string& path = a.path;
  InputFile in(path, "a metrics or telemetry file", kMaxTelemetryBytes);
  std::string line;
  struct Run {
    nlohmann::json header;
    std::int64_t steps = 0, skipped = 0, first_step = 0, last_step = 0, eval_step = 0;
    double first_loss = 0, last_loss = 0, scale = 0, val_loss = 0, val_accuracy = -1;
    bool evaluated = false;
    // FP8 layers' quantization over the run: values quantized, saturated, underflowed.
    std::map<std::string, std::array<std::int64_t, 3>> fp8;
  };
  // A number the writer may have written as null (a NaN loss): NaN.
  const auto number = [](const nlohmann::json& j, const char* key) {
    return j.contains(key) && j.at(key).is_null() ? std::nan("") : json_number<double>(j, key);
  };
  std::vector<Run> runs;
  for (std::int64_t n = 1; in.read_line(line, std::size_t{1} << 20); ++n) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    const bool metrics = j.is_object() && !j.contains("kind") && (j.contains("record") || j.contains("loss") || j.contains("val_loss") ||
                                                                  j.contains("precision_change"));
    if (runs.empty() && !metrics) return false;  // telemetry (or not JSON lines): read_telemetry says what
    try {
      if (!metrics) throw std::invalid_argument("not a metrics record");
      const bool header = j.contains("record") && j.at("record") == "run";
      if (header || runs.empty()) runs.emplace_back();
      Run& r = runs.back();
      if (header) {
        r.header = j;
      } else if (j.contains("loss")) {
        const auto step = json_number<std::int64_t>(j, "step");
        const double loss = number(j, "loss");
        if (r.steps++ == 0) r.first_step = step, r.first_loss = loss;
        r.last_step = step;
        r.last_loss = loss;
        r.skipped += j.contains("skipped") && j.at("skipped") == true ? 1 : 0;
        if (j.contains("loss_scale")) r.scale = number(j, "loss_scale");
        if (j.contains("fp8_layers")) {
          for (const auto& [layer, c] : j.at("fp8_layers").items()) {
            std::array<std::int64_t, 3>& sum = r.fp8[layer];
            sum[0] += json_number<std::int64_t>(c, "quantized");
            sum[1] += json_number<std::int64_t>(c, "saturated");
            sum[2] += json_number<std::int64_t>(c, "underflowed");
          }
        }
      } else if (j.contains("val_loss")) {
        r.evaluated = true;
        r.eval_step = json_number<std::int64_t>(j, "step");
        r.val_loss = number(j, "val_loss");
        r.val_accuracy = j.contains("val_accuracy") ? number(j, "val_accuracy") : -1;
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ":" + std::to_string(n) + ": " + e.what());
    }
  }
  if (runs.empty()) return false;  // no records at all: read_telemetry says so
  if (a.step > 0 || !a.plot.empty()) throw std::invalid_argument(path + ": a metrics file; --step and --plot read telemetry (train --telemetry)");
  fmt::print("{}: metrics of {} run{}\n", path, runs.size(), runs.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    std::string who = "no run record (written before mantissa 0.1.0 kept one)";
    if (!r.header.is_null()) {
      const nlohmann::json& cfg = r.header.value("config", nlohmann::json::object());
      who = fmt::format("{} {}, started {}{}", cfg.value("model", "?"), r.header.value("precision", "?"), r.header.value("start_time", "?"),
                        r.header.contains("resumed_from") && r.header.at("resumed_from").is_string()
                            ? ", resumed from " + r.header.at("resumed_from").get<std::string>()
                            : "");
    }
    fmt::print("run {}: {}\n", i + 1, who);
    if (r.steps > 0) {
      fmt::print("  steps {}..{} ({} skipped): loss {:.4f} -> {:.4f}, loss scale {:g} at the last\n", r.first_step, r.last_step,
                 r.skipped, r.first_loss, r.last_loss, r.scale);
    }
    if (!r.fp8.empty()) {
      // What each fp8 layer's quantization clipped and lost over the run, of the values it quantized.
      fmt::print("  fp8 layers over the run, saturated / underflowed of the values quantized:\n");
      const auto share = [](std::int64_t part, std::int64_t whole) { return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0; };
      for (const auto& [layer, c] : r.fp8) {
        fmt::print("    {}: {} / {} of {}\n", layer, percent(share(c[1], c[0])), percent(share(c[2], c[0])), c[0]);
      }
    }
    if (r.evaluated) {
      fmt::print("  evaluation at step {}: val_loss {:.4f}{}\n", r.eval_step, r.val_loss,
                 r.val_accuracy >= 0 ? fmt::format(", val_accuracy {:.2f}%", 100 * r.val_accuracy) : "");
    }
  }
  return true;
}

// The format a tensor is judged in: the one asked for, else its own if it is low precision, else fp16
// (the narrowest of the 16-bit formats: what a fp32 run would face).
DType judged_in(const TensorNumerics& t, const std::string& format) {
  if (format != "auto") return parse_dtype(format);
  return t.dtype == DType::f32 || t.dtype == DType::f64 ? DType::f16 : t.dtype;
}


// log2(largest finite / amax): binades left before overflow.
double headroom(const TensorNumerics& t, DType format) {
  return t.amax > 0 ? std::log2(traits(format_of(format)).max_finite / t.amax) : std::numeric_limits<double>::infinity();
}

std::string name_of(const TensorNumerics& t) {
  return fmt::format("{:<16} {}", train::tensor_kind_name(t.kind), (t.layer.empty() ? "(model)" : t.layer) + (t.tensor.empty() ? "" : "." + t.tensor));
}

// Every tensor's first and last record.
struct Trend {
  const TensorNumerics* first = nullptr;
  const TensorNumerics* last = nullptr;
};

Histogram gradient_histogram(const std::vector<const TensorNumerics*>& grads, std::int64_t step, double* lost, double* lost_scaled) {
  std::map<int, std::int64_t> bins;
  std::int64_t nonzero = 0, zeros = 0, count = 0;
  double scale = 1;
  for (const TensorNumerics* t : grads) {
    for (std::size_t i = 0; i < t->log2_counts.size(); ++i) bins[t->log2_lo + static_cast<int>(i)] += t->log2_counts[i];
    nonzero += t->nonzero();
    zeros += t->zeros;
    count += t->count;
    scale = t->loss_scale;
  }
  const FormatTraits f16 = traits(format_of(DType::f16));
  const int sub = static_cast<int>(std::lround(std::log2(f16.min_subnormal)));  // -24
  const int normal = static_cast<int>(std::lround(std::log2(f16.min_normal)));  // -14
  const int top = static_cast<int>(std::floor(std::log2(f16.max_finite)));       // 15
  // Held values are the true ones times the scale: a value is kept when |v| scale >= 2^-24.
  const double kept_from = sub - std::log2(scale);
  std::int64_t below = 0, below_scaled = 0;
  Histogram h{fmt::format("Activation gradients at step {}, all layers: log2 of their magnitudes", step),
              "log2 |gradient| (unscaled)", "share of the non-zero values (%)", {}, {}, {}, {}};
  for (const auto& [e, n] : bins) {
    h.bars.emplace_back(e, 100.0 * static_cast<double>(n) / static_cast<double>(std::max<std::int64_t>(nonzero, 1)));
    if (e < sub) below += n;
    if (e < kept_from) below_scaled += n;
  }
  *lost = static_cast<double>(below) / static_cast<double>(std::max<std::int64_t>(nonzero, 1));
  *lost_scaled = static_cast<double>(below_scaled) / static_cast<double>(std::max<std::int64_t>(nonzero, 1));
  h.bands = {{-200, static_cast<double>(sub), "#d62728", "lost in fp16 (below 2^-24)"},
             {static_cast<double>(sub), static_cast<double>(normal), "#ff7f0e", "fp16 subnormal"},
             {static_cast<double>(normal), static_cast<double>(top + 1), "#2ca02c", "fp16 normal"}};
  h.notes = {fmt::format("{} of the {} values are zero; of the non-zero, {} lie below fp16's smallest subnormal 2^-24: lost "
                         "without loss scaling.",
                         percent(static_cast<double>(zeros) / static_cast<double>(std::max<std::int64_t>(count, 1))), count,
                         percent(*lost))};
  if (scale != 1) {
    h.marks.push_back({kept_from, "#9467bd", fmt::format("kept from here with the run's scale {:g}", scale)});
    h.notes.push_back(fmt::format("With the run's loss scale {:g} (values moved up by log2 {:.3g}), {} are lost.", scale,
                                  std::log2(scale), percent(*lost_scaled)));
  }
  return h;
}

int run_inspect(const InspectArgs& a) {
  if (a.format != "auto") {
    const DType d = parse_dtype(a.format);
    if (d != DType::f16 && d != DType::bf16 && d != DType::e4m3 && d != DType::e5m2) {
      throw std::invalid_argument("--format: '" + a.format + "' is not fp16, bf16, e4m3, e5m2 or auto");
    }
  }
  if (a.step < 0) throw std::invalid_argument("--step must be a sampled step (1 or more; left out: the last sampled)");
  if (a.top < 1 || a.top > 1'000'000) throw std::invalid_argument("--top must be in 1..1000000, got " + std::to_string(a.top));
  if (inspect_metrics(a)) return 0;
  const std::vector<TensorNumerics> all = read_telemetry(a.path);
  std::map<std::string, Trend> trends;
  std::vector<std::int64_t> steps;
  for (const TensorNumerics& t : all) {
    Trend& tr = trends[std::string(train::tensor_kind_name(t.kind)) + "/" + t.layer + "/" + t.tensor];
    if (tr.first == nullptr || t.step < tr.first->step) tr.first = &t;
    if (tr.last == nullptr || t.step >= tr.last->step) tr.last = &t;
    if (std::find(steps.begin(), steps.end(), t.step) == steps.end()) steps.push_back(t.step);
  }
  std::sort(steps.begin(), steps.end());
  if (a.step > 0 && !std::binary_search(steps.begin(), steps.end(), a.step)) {
    throw std::invalid_argument("--step " + std::to_string(a.step) + ": not a sampled step of " + a.path + " (" +
                                std::to_string(steps.size()) + " sampled, " + std::to_string(steps.front()) + ".." +
                                std::to_string(steps.back()) + ")");
  }
  fmt::print("{}: {} records of {} tensors, {} sampled steps ({}..{}), loss scale {:g} at the first, {:g} at the last\n", a.path,
             all.size(), trends.size(), steps.size(), steps.front(), steps.back(), all.front().loss_scale, all.back().loss_scale);

  std::vector<Trend> ranked;
  for (const auto& [key, tr] : trends) ranked.push_back(tr);
  const auto show = static_cast<std::size_t>(a.top);
  // Underflow: the share below the format's smallest subnormal, at the last step.
  std::sort(ranked.begin(), ranked.end(), [&](const Trend& x, const Trend& y) {
    return x.last->shares(judged_in(*x.last, a.format)).below_subnormal > y.last->shares(judged_in(*y.last, a.format)).below_subnormal;
  });
  fmt::print("\nclosest to underflow: share of non-zero values below the format's smallest subnormal (below its smallest "
             "normal), step {} -> {}\n", steps.front(), steps.back());
  for (std::size_t i = 0; i < std::min(show, ranked.size()); ++i) {
    const Trend& t = ranked[i];
    const DType f = judged_in(*t.last, a.format);
    fmt::print("  {:<44} {:<5} {:>8} ({:>8}) -> {:>8} ({:>8})\n", name_of(*t.last), dtype_name(f),
               percent(t.first->shares(f).below_subnormal), percent(t.first->shares(f).below_normal),
               percent(t.last->shares(f).below_subnormal), percent(t.last->shares(f).below_normal));
  }
  // Overflow: the binades left between the largest magnitude and the format's largest finite value.
  std::sort(ranked.begin(), ranked.end(), [&](const Trend& x, const Trend& y) {
    return headroom(*x.last, judged_in(*x.last, a.format)) < headroom(*y.last, judged_in(*y.last, a.format));
  });
  fmt::print("\nclosest to overflow: binades between the largest magnitude and the format's largest value (share "
             "overflowing), step {} -> {}\n", steps.front(), steps.back());
  for (std::size_t i = 0; i < std::min(show, ranked.size()); ++i) {
    const Trend& t = ranked[i];
    const DType f = judged_in(*t.last, a.format);
    fmt::print("  {:<44} {:<5} {:>6.1f} ({:>7}) -> {:>6.1f} ({:>7})   amax {:.3g}\n", name_of(*t.last), dtype_name(f),
               headroom(*t.first, f), percent(t.first->shares(f).overflow), headroom(*t.last, f),
               percent(t.last->shares(f).overflow), t.last->amax);
  }

  const std::int64_t step = a.step > 0 ? a.step : steps.back();
  std::vector<const TensorNumerics*> grads;
  for (const TensorNumerics& t : all) {
    if (t.step == step && t.kind == TensorKind::activation_grad) grads.push_back(&t);
  }
  if (grads.empty()) {
    if (a.step > 0 || !a.plot.empty()) {
      throw std::invalid_argument(a.path + ": no activation gradients at step " + std::to_string(step) +
                                  " (sampled steps: every --telemetry-every; activation-grads in --telemetry-tensors)");
    }
    return 0;
  }
  double lost = 0, lost_scaled = 0;
  const Histogram h = gradient_histogram(grads, step, &lost, &lost_scaled);
  fmt::print("\nactivation gradients at step {} ({} layers): {} of the non-zero values below 2^-24, lost in fp16 without "
             "loss scaling; {} with the run's scale {:g}\n", step, grads.size(), percent(lost), percent(lost_scaled),
             grads.front()->loss_scale);
  if (!a.plot.empty()) {
    write_output(a.plot, svg_histogram(h), "--plot");
    fmt::print("picture: {}\n", a.plot);
  }
  return 0;
}

}  // namespace

Run add_inspect(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  app.add_option("path", a->path, "A telemetry file (mantissa train --telemetry PATH)")->required();
  app.add_option("--format", a->format, "Judge every tensor in fp16, bf16, e4m3 or e5m2 (auto: its own low-precision "
                                         "dtype, else fp16)")->capture_default_str();
  app.add_option("--step", a->step, "The step whose activation gradients are summed and drawn (default: the last sampled)");
  app.add_option("--top", a->top, "Tensors listed per table")->capture_default_str();
  add_output_file(app, "--plot", a->plot, "Draw the activation-gradient histogram (SVG) to this file");
  return [a] { return run_inspect(*a); };
}

}  // namespace mantissa::cli
