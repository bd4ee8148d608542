// `mantissa compare`: the same training in several precisions, side by side: the final validation
// metric and its difference to fp32, throughput, peak memory (data excluded) and their ratios to fp32,
// skipped steps; and an SVG picture of the loss curves and the loss scale over the steps.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "mantissa/train/builders.h"
#include "output_file.h"
#include "output_flags.h"
#include "svg_plot.h"

namespace mantissa::cli {
namespace {

struct CompareArgs {
  TrainArgs train;
  std::string precisions = "fp32,bf16,fp16";
  std::string plot = "mantissa-compare.svg";
  bool no_plot = false;
  bool json = false;
};

struct PrecisionRun {
  std::string name;
  TrainResult result;
};

double median_throughput(const TrainResult& r) {
  std::vector<double> t;
  for (const StepRecord& s : r.steps) t.push_back(s.throughput);
  std::sort(t.begin(), t.end());
  return t.empty() ? 0 : t[t.size() / 2];
}

std::int64_t training_peak(const TrainResult& r) {
  return r.peak_bytes.at("total") - r.peak_bytes.at("data");
}

int run_compare(const CompareArgs& a) {
  const RunOptions base = resolve(a.train);
  std::vector<std::string> names;
  for (const std::string& p : train::comma_words(a.precisions)) {
    try {
      RunOptions probe = base;
      set_precision(probe, p);  // a bad name is a usage error before anything runs
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--precisions: ") + e.what());
    }
    if (std::find(names.begin(), names.end(), p) != names.end()) {
      throw std::invalid_argument("--precisions: '" + p + "' is given twice (each precision runs once, in a directory of its own)");
    }
    names.push_back(p);
  }
  if (names.empty()) throw std::invalid_argument("--precisions: no precision given");
  std::vector<RunOptions> configs;
  for (const std::string& name : names) {
    RunOptions c = base;
    set_precision(c, name);
    c.compared = names;
    if (c.precision.compute == DType::f32) c.precision.mode = train::PrecisionMode::autocast;
    // Each precision's checkpoints in a directory of its own (DIR/fp32, DIR/bf16, ...).
    if (!c.checkpoint_dir.empty()) c.checkpoint_dir = (std::filesystem::path(base.checkpoint_dir) / name).string();
    check_run_options(c);  // every run's settings, before the first one starts
    configs.push_back(std::move(c));
  }
  // Every run resolved as far as its first step (its data, its model, its precision plan: a recipe that
  // would quantize no layer of this model is refused there), before the first one trains: a refusal never
  // comes after other runs, nor names a precision without saying it is compare's.
  RunDataCache data;  // the data, read once for every probe and run
  for (std::size_t i = 0; i < names.size(); ++i) check_run_starts(configs[i], "compare --precisions " + names[i], &data);
  std::vector<PrecisionRun> runs;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    const RunOptions& c = configs[i];
    progress("== %s\n", name.c_str());
    TrainCallbacks cb;
    const std::int64_t every = std::max<std::int64_t>(1, c.steps / 5);
    const auto after_this = static_cast<double>(names.size() - runs.size() - 1);  // runs still to come
    std::int64_t first = -1;
    cb.on_step = [&, after_this](const StepRecord& r, std::int64_t total) {
      if (first < 0) first = r.step;
      const char* unit = train::is_text_model(c.model) ? "tokens/s" : "images/s";  // (the model is known good by now)
      if (r.step % every == 0 || r.skipped) {
        // ETAs from this run's mean step time: the rest of it, and of the whole compare.
        const double per_step = r.elapsed_seconds / static_cast<double>(r.step - first + 1);
        const double left = per_step * static_cast<double>(total - r.step);
        progress("  step %lld/%lld loss %.4f scale %g, %.0f %s, ETA %s (all runs: %s)%s\n", static_cast<long long>(r.step),
                 static_cast<long long>(total), r.loss, r.loss_scale, r.throughput, unit, duration_str(left).c_str(),
                 duration_str(left + after_this * per_step * static_cast<double>(total)).c_str(), r.skipped ? " (skipped)" : "");
      }
    };
    runs.push_back({name, train(c, cb, {}, &data)});
  }

  const PrecisionRun& ref = runs.front();
  const auto metric = [](const TrainResult& r) {
    const EvalRecord& e = r.evals.back();
    return e.val_accuracy ? 100 * *e.val_accuracy : e.val_loss;
  };
  const bool accuracy = ref.result.evals.back().val_accuracy.has_value();
  const double ref_tp = median_throughput(ref.result);
  const auto ref_mem = static_cast<double>(training_peak(ref.result));
  nlohmann::json summary = nlohmann::json::array();
  if (!a.json) {
    fmt::print("{:<10} {:>12} {:>9} {:>14} {:>7} {:>11} {:>7} {:>8}\n", "precision", accuracy ? "val acc %" : "val loss",
               "vs " + ref.name, ref.result.throughput_unit, "ratio", "peak MiB", "ratio", "skipped");
  }
  for (const PrecisionRun& r : runs) {
    const double m = metric(r.result);
    const double tp = median_throughput(r.result);
    const auto mem = static_cast<double>(training_peak(r.result));
    summary.push_back({{"precision", r.name}, {accuracy ? "val_accuracy" : "val_loss", accuracy ? m / 100 : m},
                       {"throughput", tp}, {"throughput_ratio", tp / ref_tp}, {"peak_bytes", training_peak(r.result)},
                       {"peak_ratio", mem / ref_mem}, {"skipped_steps", r.result.skipped_steps},
                       {"wall_seconds", r.result.wall_seconds}});
    summary.back()["precision_plan"] = nlohmann::json::parse(r.result.plan.json());
    if (r.result.adaptive) summary.back()["product_shares"] = r.result.product_shares;
    if (!a.json) {
      fmt::print("{:<10} {:>12.4f} {:>+9.4f} {:>14.0f} {:>7.2f} {:>11.1f} {:>7.2f} {:>8}\n", r.name, m, m - metric(ref.result),
                 tp, tp / ref_tp, mem / (1 << 20), mem / ref_mem, r.result.skipped_steps);
    }
  }

  for (const PrecisionRun& r : runs) {
    if (!r.result.adaptive || a.json) continue;
    std::string shares;
    for (const auto& [level, share] : r.result.product_shares) shares += fmt::format("{}{} {:.1f}%", shares.empty() ? "" : ", ", level, 100 * share);
    fmt::print("{}: products by level {}; final plan {}\n", r.name, shares, r.result.plan.str());
  }
  if (!a.no_plot) {
    static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
    Panel loss{"training loss (moving average)", "step", "loss", false, {}};
    Panel scale{"loss scale", "step", "scale (log)", true, {}};
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const char* color = colors[i % 5];
      loss.series.push_back({runs[i].name, color, loss_curve(runs[i].result)});
      Series s{runs[i].name, color, {}};
      for (const StepRecord& st : runs[i].result.steps) s.points.emplace_back(static_cast<double>(st.step), st.loss_scale);
      scale.series.push_back(s);
    }
    write_output(a.plot, svg_chart({loss, scale}), "--plot");
    if (!a.json) fmt::print("picture: {}\n", a.plot);
  }
  if (a.json) fmt::print("{}\n", nlohmann::json{{"runs", summary}}.dump());
  return 0;
}

}  // namespace

Run add_compare(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  add_train_options(app, a->train);
  app.add_option("--precisions", a->precisions, "Comma-separated precisions to run, the first the reference")
      ->capture_default_str();
  CLI::Option* plot = add_output_file(app, "--plot", a->plot, "SVG file for the loss curves and loss scales")->capture_default_str();
  app.add_flag("--no-plot", a->no_plot, "No picture")->excludes(plot);
  app.add_flag("--json", a->json, "Print the table as one JSON object on standard output");
  return [a] { return run_compare(*a); };
}

}  // namespace mantissa::cli
