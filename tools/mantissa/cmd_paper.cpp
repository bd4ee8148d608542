// `mantissa paper`: the mixed-precision paper's experiments (Micikevicius et al., ICLR 2018) at small
// scale. Each model trains in each configuration the paper argues about: fp32, bf16, fp16 without loss
// scaling, with a static scale (the paper's 128 and one chosen from the fp32 run's gradient statistics),
// with dynamic scaling, fp16 and bf16 without master weights, and fp16 without the fp32 op list. It
// writes the table (final quality, skipped steps, whether the run diverged; each cell with the `mantissa
// train` command that reproduces it), the share of activation gradients below fp16's range and of
// updates lost to rounding, and the loss curves. Every run is an ordinary `mantissa train`
// configuration, parsed from its own flags.
//
// A second suite (--suite nvfp4) takes NVIDIA's NVFP4 pretraining recipe apart the same way: bf16, mxfp8,
// the full recipe, and the recipe without each of its parts (the random Hadamard transform, stochastic
// rounding, the 2-D weight blocks), with each recipe's saturated and underflowed shares. --seeds N runs
// every cell N times (seeds 0..N-1) and reports the mean and spread: differences between recipes are
// often smaller than between seeds.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <sstream>

#include <omp.h>

#include "commands.h"
#include "mantissa/core/input_file.h"
#include "mantissa/core/output_file.h"
#include "mantissa/ops/fp8.h"
#include "output_file.h"
#include "output_flags.h"
#include "machine.h"
#include "svg_plot.h"

namespace mantissa::cli {
namespace {

struct PaperArgs {
  bool quick = false;
  std::string suite = "mixed-precision";
  std::string models;  // default: the suite's
  int seeds = 1;
  std::string out = "paper-results.md";
  std::string plot = "paper";  // PREFIX-<model>.svg
  bool no_plot = false;
  std::string threads;
  bool plans_only = false;  // print each cell's precision plan, train nothing
};

// A plan's words without the layers' names: "nvfp4 in 3 of 8 layers; bf16 in 5", for the table.
std::string plan_summary(const train::PrecisionPlan& plan) {
  std::string out;
  std::istringstream levels(plan.str());
  for (std::string level; std::getline(levels, level, ';');) {
    out += (out.empty() ? "" : ";") + level.substr(0, level.find(':'));
  }
  return out;
}

// A model's flags, sized for the whole suite in about an hour on 2 cores (--quick: about 10 minutes).
std::vector<std::string> model_flags(const std::string& model, bool quick) {
  const auto steps = [&](int full, int fast) { return std::to_string(quick ? fast : full); };
  if (model == "cnn") {
    return {"--model", "cnn", "--batch-size", "128", "--lr", "3e-3", "--warmup", "20", "--steps", steps(300, 40)};
  }
  if (model == "gpt") {
    return {"--model", "gpt", "--n-layer", "2", "--n-head", "4", "--n-embd", "128", "--block-size", "64", "--batch-size",
            "32", "--lr", "3e-3", "--warmup", "20", "--clip", "1", "--eval-batches", "10", "--steps", steps(400, 50)};
  }
  if (model == "lstm") {
    return {"--model", "lstm", "--hidden", quick ? "128" : "256", "--layers", "2", "--embd", "64", "--bptt", quick ? "32" : "64",
            "--batch-size", "32", "--lr", "3e-3", "--warmup", "20", "--clip", "1", "--eval-batches", "10",
            "--steps", steps(300, 40)};
  }
  if (model == "underflow") {
    // The MLP with its loss weighted by 2^-16 (a task weight in a multi-task loss): most activation
    // gradients lie below fp16's smallest subnormal, as the paper's SSD detector's did.
    return {"--model", "mlp", "--batch-size", "64", "--lr", "1e-3", "--warmup", "50", "--loss-weight", "1.52587890625e-05",
            "--steps", steps(1000, 300)};
  }
  if (model == "sgd") {
    // The MLP trained with SGD (momentum 0.9), as the paper's networks were: each update is the learning
    // rate times a gradient, far below half an ulp of most weights in bf16 once the schedule decays.
    return {"--model", "mlp", "--batch-size", "64", "--optimizer", "sgd", "--lr", "2e-3", "--momentum", "0.9",
            "--warmup", "50", "--steps", steps(1000, 500)};
  }
  throw std::invalid_argument("--models: '" + model + "' is not cnn, gpt, lstm, underflow or sgd");
}

struct Column {
  std::string name;
  std::vector<std::string> flags;  // "{scale}": the static scale chosen from the fp32 run
};

// A set of configurations run on each model, the first the reference the others are measured against.
struct Suite {
  std::string title;
  std::string models;  // the default --models
  std::vector<Column> columns;
  // mixed-precision: the reference (fp32) run measures the gradients (the chosen static scale, the share
  // below fp16's range) and the updates lost to 16-bit storage. nvfp4: the quantized shares instead.
  bool gradient_study = true;
};

std::vector<Column> mixed_precision_columns() {
  return {{"fp32", {"--precision", "fp32"}},
          {"bf16", {"--precision", "bf16"}},
          {"fp16, no scaling", {"--precision", "fp16", "--loss-scale", "none"}},
          {"fp16, static 128", {"--precision", "fp16", "--loss-scale", "static:128"}},
          {"fp16, static chosen", {"--precision", "fp16", "--loss-scale", "{scale}"}},
          {"fp16, dynamic", {"--precision", "fp16", "--loss-scale", "dynamic"}},
          {"fp16, no master weights", {"--precision", "fp16", "--mode", "low-precision-model", "--master-weights", "off"}},
          {"bf16, no master weights", {"--precision", "bf16", "--mode", "low-precision-model", "--master-weights", "off"}},
          {"fp16, no fp32 ops", {"--precision", "fp16", "--loss-scale", "dynamic", "--fp32-ops", "none"}}};
}

Suite suite(const std::string& name) {
  if (name == "mixed-precision") return {"The mixed-precision paper's table", "cnn,gpt,lstm,underflow,sgd", mixed_precision_columns(), true};
  if (name == "nvfp4") {
    const auto nvfp4 = [](std::initializer_list<const char*> off) {
      std::vector<std::string> f{"--precision", "nvfp4"};
      f.insert(f.end(), off.begin(), off.end());
      return f;
    };
    return {"NVFP4's recipe, part by part",
            "gpt",
            {{"bf16", {"--precision", "bf16"}},
             {"mxfp8", {"--precision", "mxfp8"}},
             {"nvfp4", nvfp4({})},
             {"nvfp4, no RHT", nvfp4({"--nvfp4-no-rht"})},
             {"nvfp4, no SR", nvfp4({"--nvfp4-no-sr"})},
             {"nvfp4, 1-D weights", nvfp4({"--nvfp4-1d-weights"})},
             {"nvfp4, none of the three", nvfp4({"--nvfp4-no-rht", "--nvfp4-no-sr", "--nvfp4-1d-weights"})},
             // nvfp4 keeps NVIDIA's bf16 layers (the first, the last blocks'); mantissa's earlier choice
             // (the first and the last) puts more of them in NVFP4; torchao's rule is nvfp4 before issue 53.
             {"nvfp4, bf16 first and last only", nvfp4({"--fp8-first-last", "bf16"})},
             {"nvfp4-torchao", {"--precision", "nvfp4-torchao"}}},
            false};
  }
  throw std::invalid_argument("--suite: '" + name + "' is not mixed-precision or nvfp4");
}

struct Cell {
  std::string command;
  TrainResult result;
  std::string stopped;  // the run stopped itself (a collapsed loss scale): why
  double quality = NAN;  // accuracy in %, or validation loss
  bool diverged = false;
  std::vector<std::pair<std::int64_t, double>> below_fp16;  // fp32 run: step, share of activation grads under 2^-24
  double grad_amax = 0;                                     // fp32 run: the largest gradient magnitude seen
  std::map<std::string, double> lost;                       // mean share of updates lost, by format
  Fp8Counters quantized;                                    // over the run (the FP8 and block-scaled recipes)
};

std::string joined(const std::vector<std::string>& flags) {
  std::string s = "mantissa train";
  for (const std::string& f : flags) s += " " + f;
  return s;
}

// The run's configuration, through the same parser `mantissa train` uses.
RunOptions parse_train(const std::vector<std::string>& flags) {
  CLI::App app;
  TrainArgs args;
  add_train_options(app, args);
  std::vector<std::string> reversed(flags.rbegin(), flags.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(joined(flags) + ": " + e.what());
  }
  return resolve(args);
}

Cell run_cell(const std::vector<std::string>& flags, bool gradient_study, RunDataCache& data) {
  Cell cell;
  cell.command = joined(flags);
  RunOptions c = parse_train(flags);
  c.eval_every = c.steps;
  c.update_stats_every = std::max<std::int64_t>(1, c.steps / 10);
  if (gradient_study) c.telemetry = train::TelemetryPolicy{.every = c.update_stats_every,
                                                      .kinds = {train::TensorKind::activation_grad, train::TensorKind::weight_grad}};
  std::map<std::string, std::pair<double, int>> lost;
  TrainCallbacks cb;
  cb.on_step = [&](const StepRecord& r, std::int64_t total) {
    if (r.step % std::max<std::int64_t>(1, total / 4) == 0) {
      progress("  step %lld/%lld loss %.4f scale %g\n", static_cast<long long>(r.step), static_cast<long long>(total),
               r.loss, r.loss_scale);
    }
    for (const auto& [format, share] : r.lost_updates) {
      lost[format].first += share;
      ++lost[format].second;
    }
    double below = 0, nonzero = 0;
    for (const train::TensorNumerics& n : r.numerics) {
      cell.grad_amax = std::max(cell.grad_amax, n.amax);
      if (n.kind != train::TensorKind::activation_grad) continue;
      below += n.shares(DType::f16).below_subnormal * static_cast<double>(n.nonzero());
      nonzero += static_cast<double>(n.nonzero());
    }
    if (nonzero > 0) cell.below_fp16.emplace_back(r.step, below / nonzero);
    if (r.fp8) {
      cell.quantized.quantized += r.fp8->quantized;
      cell.quantized.saturated += r.fp8->saturated;
      cell.quantized.underflowed += r.fp8->underflowed;
    }
  };
  try {
    cell.result = train(c, cb, {}, &data);
  } catch (const LossScaleCollapse& e) {
    cell.stopped = e.what();
  }
  for (const auto& [format, sum] : lost) cell.lost[format] = sum.first / sum.second;
  if (cell.stopped.empty()) {
    const EvalRecord& e = cell.result.evals.back();
    cell.quality = e.val_accuracy ? 100 * *e.val_accuracy : e.val_loss;
    const double last_loss = cell.result.steps.empty() ? NAN : cell.result.steps.back().loss;
    cell.diverged = !std::isfinite(e.val_loss) || (!std::isfinite(last_loss) && !cell.result.steps.back().skipped);
  }
  return cell;
}

// The largest power of 2 that keeps the largest gradient seen 2^3 below fp16's largest finite value
// (room for gradients to grow), between 1 and 2^24.
double chosen_scale(double grad_amax) {
  if (!(grad_amax > 0)) return 1;
  const int e = static_cast<int>(std::floor(std::log2(65504.0 / grad_amax))) - 3;
  return std::ldexp(1.0, std::clamp(e, 0, 24));
}

std::string percent(double v) { return fmt::format("{:.1f}%", 100 * v); }

// "bf16 30.4%, fp16 5.4%".
std::string shares_text(const std::map<std::string, double>& shares) {
  std::string s;
  for (const auto& [format, share] : shares) s += (s.empty() ? "" : ", ") + format + " " + percent(share);
  return s;
}

// Where and when the table was made: the CPU's name, the threads, the date (UTC).
std::string machine() { return fmt::format("{}, {} threads, {}", cpu_name(), omp_get_max_threads(), utc_now("%Y-%m-%d %H:%M UTC")); }

// One configuration's runs, one per seed, summed up.
struct Seeded {
  std::vector<Cell> runs;

  // The mean quality of the runs that finished (NaN when none did), and the sample standard deviation.
  std::pair<double, double> quality() const {
    std::vector<double> q;
    for (const Cell& c : runs) {
      if (std::isfinite(c.quality)) q.push_back(c.quality);
    }
    if (q.empty()) return {NAN, NAN};
    double mean = 0, var = 0;
    for (const double v : q) mean += v / static_cast<double>(q.size());
    for (const double v : q) var += (v - mean) * (v - mean) / std::max<double>(1, static_cast<double>(q.size()) - 1);
    return {mean, std::sqrt(var)};
  }
  std::int64_t skipped() const {
    std::int64_t n = 0;
    for (const Cell& c : runs) n += c.result.skipped_steps;
    return n;
  }
  // "no", "yes" (every run), "stalled", or "2 of 3" (some runs diverged or stalled).
  std::string status() const {
    std::size_t bad = 0, stalled = 0;
    for (const Cell& c : runs) {
      bad += c.diverged || !c.stopped.empty() ? 1 : 0;
      stalled += c.stopped.empty() ? 0 : 1;
    }
    if (bad == 0) return "no";
    if (bad < runs.size()) return fmt::format("{} of {}", bad, runs.size());
    return stalled == runs.size() ? "stalled" : "yes";
  }
  double seconds() const {
    double t = 0;
    for (const Cell& c : runs) t += c.result.wall_seconds / static_cast<double>(runs.size());
    return t;
  }
  // "2.31% / 0.012%": the shares of the quantized values that saturated and that underflowed.
  std::string quantized() const {
    Fp8Counters n;
    for (const Cell& c : runs) {
      n.quantized += c.quantized.quantized;
      n.saturated += c.quantized.saturated;
      n.underflowed += c.quantized.underflowed;
    }
    if (n.quantized == 0) return "-";
    const auto q = static_cast<double>(n.quantized);
    return fmt::format("{:.2f}% / {:.3f}%", 100 * static_cast<double>(n.saturated) / q, 100 * static_cast<double>(n.underflowed) / q);
  }
  // The training loss curve averaged over the seeds, at the steps every run has.
  std::vector<std::pair<double, double>> curve() const {
    std::map<double, std::pair<double, std::size_t>> at;
    for (const Cell& c : runs) {
      for (const auto& [step, loss] : loss_curve(c.result)) {
        at[step].first += loss;
        ++at[step].second;
      }
    }
    std::vector<std::pair<double, double>> out;
    for (const auto& [step, sum] : at) {
      if (sum.second == runs.size()) out.emplace_back(step, sum.first / static_cast<double>(sum.second));
    }
    return out;
  }
};

int run_paper(const PaperArgs& a) {
  const Suite s = suite(a.suite);
  if (a.seeds < 1 || a.seeds > 100) throw std::invalid_argument("--seeds: give 1 to 100, not " + std::to_string(a.seeds));
  std::vector<std::string> models;
  for (const std::string& m : train::comma_words(a.models.empty() ? s.models : a.models)) {
    model_flags(m, a.quick);  // a bad name is a usage error before anything runs
    models.push_back(m);
  }
  if (models.empty()) throw std::invalid_argument("--models: no model given");
  // --out and --plot's directory were checked before the command ran (output_flags.h); the pictures too.
  for (const std::string& m : models) {
    if (!a.no_plot) check_output_file(a.plot + "-" + m + ".svg", "--plot");
  }
  const std::vector<Column>& cols = s.columns;
  // Every cell resolved as far as its first step (its data, its model, its precision plan) before the
  // first one trains: a cell the command would refuse is refused now, naming the suite's cell, not after
  // the hour the cells before it take; each cell's plan goes into its row. (A chosen static scale, known
  // only after the fp32 run, is probed as static:1: the scale changes nothing that is refused.)
  std::map<std::string, std::vector<train::PrecisionPlan>> plans;  // by model, a plan per column
  RunDataCache data;  // each data set read once for every probe and cell
  for (const std::string& model : models) {
    for (const Column& col : cols) {
      std::vector<std::string> flags = model_flags(model, a.quick);
      if (!a.threads.empty()) flags.insert(flags.end(), {"--threads", a.threads});
      for (const std::string& f : col.flags) flags.push_back(f == "{scale}" ? "static:1" : f);
      plans[model].push_back(check_run_starts(parse_train(flags), "paper --suite " + a.suite + ", " + model + " " + col.name, &data));
      if (a.plans_only) fmt::print("{}, {}: {}\n", model, col.name, plans[model].back().str());
    }
  }
  if (a.plans_only) return 0;
  const auto started = std::chrono::steady_clock::now();
  const std::string ref_name = cols.front().name;
  std::string table = "| model | ", rule = "|---|", details;
  for (const Column& col : cols) {
    table += col.name + " | ";
    rule += "---|";
  }
  table += "\n" + rule + "\n";
  for (const std::string& model : models) {
    std::vector<Seeded> cells;
    std::string scale_note;
    for (const Column& col : cols) {
      Seeded cell;
      for (int seed = 0; seed < a.seeds; ++seed) {
        std::vector<std::string> flags = model_flags(model, a.quick);
        if (seed > 0) flags.insert(flags.end(), {"--seed", std::to_string(seed)});
        if (!a.threads.empty()) flags.insert(flags.end(), {"--threads", a.threads});
        for (const std::string& f : col.flags) {
          if (f != "{scale}") {
            flags.push_back(f);
            continue;
          }
          const double grad_amax = cells.front().runs[static_cast<std::size_t>(seed)].grad_amax;
          const double scale = chosen_scale(grad_amax);
          flags.push_back(fmt::format("static:{:.0f}", scale));
          if (seed == 0) {
            scale_note = fmt::format("static {:.0f} (the fp32 run's largest gradient {:.3g} times it stays 2^3 below 65504)",
                                     scale, grad_amax);
          }
        }
        progress("== %s: %s%s\n", model.c_str(), col.name.c_str(), a.seeds > 1 ? fmt::format(", seed {}", seed).c_str() : "");
        cell.runs.push_back(run_cell(flags, s.gradient_study && cells.empty(), data));
      }
      cells.push_back(std::move(cell));
    }
    const Cell& ref = cells.front().runs.front();
    const bool accuracy = ref.result.evals.back().val_accuracy.has_value();
    table += "| " + model + (accuracy ? " (val accuracy)" : " (val loss)") + " | ";
    details += fmt::format("\n### {}\n\n| configuration | {} | vs {} | skipped steps | diverged | {} | seconds | command | "
                           "layers |\n|---|---|---|---|---|---|---|---|---|\n",
                           model, accuracy ? "val accuracy" : "val loss", ref_name,
                           s.gradient_study ? "lost updates" : "saturated / underflowed");
    const double ref_quality = cells.front().quality().first;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const Seeded& c = cells[i];
      const auto [mean, sd] = c.quality();
      const std::string spread = a.seeds == 1 || !std::isfinite(sd) ? ""
                                 : accuracy                         ? fmt::format(" ± {:.2f}", sd)
                                                                    : fmt::format(" ± {:.4f}", sd);
      const std::string status = c.status();
      const std::string q = !std::isfinite(mean) ? status
                            : accuracy           ? fmt::format("{:.2f}%{}", mean, spread)
                                                 : fmt::format("{:.4f}{}", mean, spread);
      const std::string delta = !std::isfinite(mean) ? "" : accuracy ? fmt::format("{:+.2f} points", mean - ref_quality)
                                                                     : fmt::format("{:+.2f}%", 100 * (mean / ref_quality - 1));
      table += fmt::format("{}<br>{} skipped{} | ", q, c.skipped(), status == "no" ? "" : ", " + (status == "yes" ? "diverged" : status));
      details += fmt::format("| {} | {} | {} | {} | {} | {} | {:.0f} | `{}` | {} |\n", cols[i].name, q, delta, c.skipped(), status,
                             s.gradient_study ? (c.runs.front().lost.empty() ? "-" : shares_text(c.runs.front().lost)) : c.quantized(),
                             c.seconds(), c.runs.front().command, plan_summary(plans[model][i]));
    }
    table += "\n";
    if (s.gradient_study) {
      details += "\nThe chosen static scale: " + scale_note + ".\n";
      std::string below;
      for (const auto& [step, share] : ref.below_fp16) below += fmt::format("{}step {} {}", below.empty() ? "" : ", ", step, percent(share));
      details += "Activation gradients below fp16's smallest subnormal (2^-24; lost without scaling), fp32 run: " +
                 (below.empty() ? std::string("none measured") : below) + ".\n";
      if (!ref.lost.empty()) {
        details += "Updates that would round away on weights stored in 16 bits (fp32 run, mean of the sampled steps): " +
                   shares_text(ref.lost) + ".\n";
      }
    } else {
      details += "\n";
    }
    if (!a.no_plot) {
      static const char* colors[] = {"#000000", "#1f77b4", "#d62728", "#ff7f0e", "#bcbd22", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"};
      Panel loss{model + ": training loss (moving average" + (a.seeds > 1 ? fmt::format(", mean of {} seeds", a.seeds) : "") + ")",
                 "step", "loss", false, {}};
      for (std::size_t i = 0; i < cells.size(); ++i) loss.series.push_back({cols[i].name, colors[i % 9], cells[i].curve()});
      const std::string path = a.plot + "-" + model + ".svg";
      write_output(path, svg_chart({loss}), "--plot");
      details += "Loss curves: " + path + ".\n";
    }
  }
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 60;
  const std::string seeds =
      a.seeds == 1 ? ""
                   : fmt::format(" Each cell is the mean of {} seeds (0 to {}), ± their standard deviation; the command is seed 0's "
                                 "(add --seed S for the others).",
                                 a.seeds, a.seeds - 1);
  const std::string text = fmt::format("## {}{}\n\nEach cell: final quality, skipped steps, and whether the run diverged.{} "
                                       "{}; {:.1f} minutes in all.\n\n{}{}",
                                       s.title, a.quick ? " (--quick)" : "", seeds, machine(), minutes, table, details);
  write_output(a.out, text, "--out");
  fmt::print("{}", text);
  return 0;
}

}  // namespace

Run add_paper(CLI::App& app) {
  auto a = std::make_shared<PaperArgs>();
  app.add_flag("--quick", a->quick, "Short runs (about 10 minutes on 2 cores instead of an hour)");
  app.add_option("--suite", a->suite, "mixed-precision (the paper's configurations) or nvfp4 (bf16, mxfp8 and NVFP4 "
                                      "without each part of its recipe)")->capture_default_str();
  app.add_option("--models", a->models, "Comma-separated: cnn, gpt, lstm, underflow (the MLP with a loss weight of "
                                        "2^-16), sgd (the MLP trained with plain SGD); default: cnn,gpt,lstm,underflow,sgd "
                                        "(mixed-precision), gpt (nvfp4)");
  app.add_option("--seeds", a->seeds, "Runs per cell (seeds 0..N-1), reported as mean and spread")->capture_default_str();
  add_output_file(app, "--out", a->out, "Markdown file for the table and the details")->capture_default_str();
  CLI::Option* plot = add_output_prefix(app, "--plot", a->plot, "Loss curves to PREFIX-<model>.svg")->capture_default_str();
  app.add_flag("--no-plot", a->no_plot, "No pictures")->excludes(plot);
  app.add_option("--threads", a->threads, "Threads per run (default: all)");
  app.add_flag("--plans-only", a->plans_only,
               "Resolve every cell as far as its first step and print its precision plan (which layers run in what); train nothing");
  return [a] { return run_paper(*a); };
}

}  // namespace mantissa::cli
