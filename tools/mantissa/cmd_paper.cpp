// `mantissa paper`: the mixed-precision paper's experiments (Micikevicius et al., ICLR 2018) at small
// scale. Each model trains in each configuration the paper argues about: fp32, bf16, fp16 without loss
// scaling, with a static scale (the paper's 128 and one chosen from the fp32 run's gradient statistics),
// with dynamic scaling, fp16 and bf16 without master weights, and fp16 without the fp32 op list. It
// writes the table (final quality, skipped steps, whether the run diverged; each cell with the `mantissa
// train` command that reproduces it), the share of activation gradients below fp16's range and of
// updates lost to rounding, and the loss curves. Every run is an ordinary `mantissa train`
// configuration, parsed from its own flags.
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
#include "output_file.h"
#include "output_flags.h"
#include "svg_plot.h"

namespace mantissa::cli {
namespace {

struct PaperArgs {
  bool quick = false;
  std::string models = "cnn,gpt,lstm,underflow,sgd";
  std::string out = "paper-results.md";
  std::string plot = "paper";  // PREFIX-<model>.svg
  bool no_plot = false;
  std::string threads;
};

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

std::vector<Column> columns() {
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

struct Cell {
  std::string command;
  TrainResult result;
  std::string stopped;  // the run stopped itself (a collapsed loss scale): why
  double quality = NAN;  // accuracy in %, or validation loss
  bool diverged = false;
  std::vector<std::pair<std::int64_t, double>> below_fp16;  // fp32 run: step, share of activation grads under 2^-24
  double grad_amax = 0;                                     // fp32 run: the largest gradient magnitude seen
  std::map<std::string, double> lost;                       // mean share of updates lost, by format
};

std::string joined(const std::vector<std::string>& flags) {
  std::string s = "mantissa train";
  for (const std::string& f : flags) s += " " + f;
  return s;
}

// The run's configuration, through the same parser `mantissa train` uses.
TrainConfig parse_train(const std::vector<std::string>& flags) {
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

Cell run_cell(const std::vector<std::string>& flags, bool reference) {
  Cell cell;
  cell.command = joined(flags);
  TrainConfig c = parse_train(flags);
  c.eval_every = c.steps;
  c.update_stats_every = std::max<std::int64_t>(1, c.steps / 10);
  if (reference) c.telemetry = train::TelemetryPolicy{.every = c.update_stats_every,
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
  };
  try {
    cell.result = train(c, cb);
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
std::string machine() {
  std::istringstream cpuinfo;
  try {
    cpuinfo.str(InputFile("/proc/cpuinfo", "the CPU's description", std::uint64_t{1} << 20).read_text());
  } catch (const InputFileError&) {  // no /proc: the name is unknown
  }
  std::string cpu = "an unknown CPU";
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return fmt::format("{}, {} threads, {}", cpu, omp_get_max_threads(), date);
}

int run_paper(const PaperArgs& a) {
  std::vector<std::string> models;
  std::stringstream ss(a.models);
  for (std::string m; std::getline(ss, m, ',');) {
    model_flags(m, a.quick);  // a bad name is a usage error before anything runs
    models.push_back(m);
  }
  if (models.empty()) throw std::invalid_argument("--models: no model given");
  // --out and --plot's directory were checked before the command ran (output_flags.h); the pictures too.
  for (const std::string& m : models) {
    if (!a.no_plot) check_output_file(a.plot + "-" + m + ".svg", "--plot");
  }
  const auto started = std::chrono::steady_clock::now();
  const std::vector<Column> cols = columns();
  std::string table = "| model | ", rule = "|---|", details;
  for (const Column& col : cols) {
    table += col.name + " | ";
    rule += "---|";
  }
  table += "\n" + rule + "\n";
  for (const std::string& model : models) {
    std::vector<Cell> cells;
    std::string scale_note;
    for (const Column& col : cols) {
      std::vector<std::string> flags = model_flags(model, a.quick);
      if (!a.threads.empty()) flags.insert(flags.end(), {"--threads", a.threads});
      for (const std::string& f : col.flags) {
        if (f != "{scale}") {
          flags.push_back(f);
          continue;
        }
        const double s = chosen_scale(cells.front().grad_amax);
        flags.push_back(fmt::format("static:{:.0f}", s));
        scale_note = fmt::format("static {:.0f} (the fp32 run's largest gradient {:.3g} times it stays 2^3 below 65504)", s,
                                 cells.front().grad_amax);
      }
      progress("== %s: %s\n", model.c_str(), col.name.c_str());
      cells.push_back(run_cell(flags, cells.empty()));
    }
    const bool accuracy = cells.front().result.evals.back().val_accuracy.has_value();
    table += "| " + model + (accuracy ? " (val accuracy)" : " (val loss)") + " | ";
    details += fmt::format("\n### {}\n\n| configuration | {} | vs fp32 | skipped steps | diverged | lost updates | seconds | command |\n"
                           "|---|---|---|---|---|---|---|---|\n", model, accuracy ? "val accuracy" : "val loss");
    const double ref = cells.front().quality;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const Cell& c = cells[i];
      const std::string q = !c.stopped.empty() ? "stopped" : accuracy ? fmt::format("{:.2f}%", c.quality) : fmt::format("{:.4f}", c.quality);
      const std::string delta = !std::isfinite(c.quality) ? "" : accuracy ? fmt::format("{:+.2f} points", c.quality - ref)
                                                                          : fmt::format("{:+.2f}%", 100 * (c.quality / ref - 1));
      const std::string status = !c.stopped.empty() ? "stalled" : c.diverged ? "yes" : "no";
      table += fmt::format("{}<br>{} skipped{} | ", q, c.result.skipped_steps, status == "no" ? "" : ", " + std::string(status == "yes" ? "diverged" : "stalled"));
      details += fmt::format("| {} | {} | {} | {} | {} | {} | {:.0f} | `{}` |\n", cols[i].name, q, delta, c.result.skipped_steps,
                             status, c.lost.empty() ? "-" : shares_text(c.lost), c.result.wall_seconds, c.command);
    }
    table += "\n";
    details += "\nThe chosen static scale: " + scale_note + ".\n";
    std::string below;
    for (const auto& [step, share] : cells.front().below_fp16) below += fmt::format("{}step {} {}", below.empty() ? "" : ", ", step, percent(share));
    details += "Activation gradients below fp16's smallest subnormal (2^-24; lost without scaling), fp32 run: " +
               (below.empty() ? std::string("none measured") : below) + ".\n";
    if (!cells.front().lost.empty()) {
      details += "Updates that would round away on weights stored in 16 bits (fp32 run, mean of the sampled steps): " +
                 shares_text(cells.front().lost) + ".\n";
    }
    if (!a.no_plot) {
      static const char* colors[] = {"#000000", "#1f77b4", "#d62728", "#ff7f0e", "#bcbd22", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"};
      Panel loss{model + ": training loss (moving average)", "step", "loss", false, {}};
      for (std::size_t i = 0; i < cells.size(); ++i) {
        loss.series.push_back({cols[i].name, colors[i % 9], loss_curve(cells[i].result)});
      }
      const std::string path = a.plot + "-" + model + ".svg";
      write_output(path, svg_chart({loss}), "--plot");
      details += "Loss curves: " + path + ".\n";
    }
  }
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() / 60;
  const std::string text = fmt::format("## The mixed-precision paper's table{}\n\nEach cell: final quality, skipped steps, and "
                                       "whether the run diverged. {}; {:.1f} minutes in all.\n\n{}{}",
                                       a.quick ? " (--quick)" : "", machine(), minutes, table, details);
  write_output(a.out, text, "--out");
  fmt::print("{}", text);
  return 0;
}

}  // namespace

Run add_paper(CLI::App& app) {
  auto a = std::make_shared<PaperArgs>();
  app.add_flag("--quick", a->quick, "Short runs (about 10 minutes on 2 cores instead of an hour)");
  app.add_option("--models", a->models, "Comma-separated: cnn, gpt, lstm, underflow (the MLP with a loss weight of "
                                        "2^-16), sgd (the MLP trained with plain SGD)")->capture_default_str();
  add_output_file(app, "--out", a->out, "Markdown file for the table and the details")->capture_default_str();
  CLI::Option* plot = add_output_prefix(app, "--plot", a->plot, "Loss curves to PREFIX-<model>.svg")->capture_default_str();
  app.add_flag("--no-plot", a->no_plot, "No pictures")->excludes(plot);
  app.add_option("--threads", a->threads, "Threads per run (default: all)");
  return [a] { return run_paper(*a); };
}

}  // namespace mantissa::cli
