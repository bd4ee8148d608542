// `mantissa train`: one training run from the command line, with a progress line, JSON-lines metrics
// (appended to the file and flushed line by line, so a killed run keeps what it measured and a user can
// follow it live; only a regular file is written) and an optional JSON summary on standard output.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "commands.h"
#include "mantissa/core/output_file.h"
#include "output_file.h"
#include "output_flags.h"
#include "mantissa/core/dtype.h"
#include "mantissa/numeric/parse_number.h"
#include "mantissa/numeric/recipes.h"
#include "machine.h"
#include "mantissa/train/builders.h"
#include "records.h"
#include "spelling.h"
#include "training.h"

namespace mantissa::cli {
namespace {

struct TrainRunArgs {
  TrainArgs train;
  std::string metrics, telemetry, plan_out;
  bool json = false;
  bool follow_symlinks = false;
  bool metrics_append = false;
};

// A flag's setting key: --batch-size -> batch_size (the library's name for it, run_options.h).
std::string option_key(const CLI::Option& opt) {
  std::string key = opt.get_name();
  key.erase(0, key.find_first_not_of('-'));
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

// What a skipped step's line says: the tracer's report, or the gradients that held the inf.
std::string skip_reason(const StepRecord& r) {
  if (r.trace) return r.trace->str();
  std::string s = "non-finite gradient";
  for (std::size_t i = 0; i < r.nonfinite_grads.size(); ++i) {
    s += (i == 0 ? " in " : ", ") + r.nonfinite_grads[i].first + " (" + std::to_string(r.nonfinite_grads[i].second) + ")";
  }
  return s;
}

// The metrics or telemetry file: JSON lines appended through the library's writer (a regular file, made
// if missing; a link only with --follow-symlinks), each written at once; a failed write is an error.
class LinesFile {
 public:
  LinesFile(const std::string& path, const char* flag, bool follow_symlinks) {
    if (!path.empty()) file_.emplace(path, flag, follow_symlinks);
  }
  void write(const nlohmann::json& line) { write_line(line.dump()); }
  void write_line(const std::string& line) {
    if (file_) file_->write(line + "\n");
  }

 private:
  std::optional<AppendFile> file_;
};

int run_train(TrainRunArgs& a) {
  RunOptions c = resolve(a.train);
  if (!a.telemetry.empty()) c.telemetry = train::telemetry_policy(c);
  if (!a.plan_out.empty() && !c.adaptive) throw std::invalid_argument("--plan-out needs --precision adaptive");

  // Data parallel: rank 0 reports and writes; the other ranks train in silence.
  const bool writer = process_group()->rank() == 0;
  // A metrics file holds one run unless told: another run's lines after it would read as one run.
  std::error_code ec;
  const bool resumed = c.resume || !c.resume_from.empty();
  if (!a.metrics.empty() && !a.metrics_append && !resumed && std::filesystem::file_size(a.metrics, ec) > 0 && !ec) {
    throw std::invalid_argument("--metrics " + a.metrics + ": holds another run's records; give --metrics-append to add this run's "
                                "(each run starts with its own \"run\" record), or name a new file");
  }
  LinesFile metrics(writer ? a.metrics : "", "--metrics", a.follow_symlinks);
  LinesFile telemetry(writer ? a.telemetry : "", "--telemetry", a.follow_symlinks);
  const bool tty = isatty(fileno(stderr)) != 0;
  std::int64_t every = 0;  // progress lines off a terminal: about 20 a run
  std::int64_t first = -1;
  // A run of skipped steps: its first is reported with its reason, the rest in one line when it ends.
  std::int64_t skip_first = 0, skip_last = 0;
  const auto end_skips = [&] {
    if (skip_last > skip_first) {
      progress("%ssteps %lld-%lld skipped (%lld in a row)\n", tty ? "\n" : "", static_cast<long long>(skip_first),
               static_cast<long long>(skip_last), static_cast<long long>(skip_last - skip_first + 1));
    }
    skip_first = skip_last = 0;
  };
  TrainCallbacks cb;
  cb.on_step = [&](const StepRecord& r, std::int64_t total) {
    if (first < 0) {
      first = r.step;
      every = std::max<std::int64_t>(1, total / 20);
    }
    for (const train::TensorNumerics& n : r.numerics) telemetry.write_line(n.json());
    for (const train::PrecisionChange& ch : r.precision_changes) {
      progress("%sstep %lld: precision: %s\n", tty ? "\n" : "", static_cast<long long>(r.step), ch.str(c.precision.compute).c_str());
      metrics.write({{"step", r.step}, {"precision_change", nlohmann::json::parse(ch.json(c.precision.compute))}, {"wall_time", unix_time()}});
    }
    if (r.skipped) {
      if (skip_first == 0) {
        skip_first = r.step;
        progress("%sstep %lld skipped: %s\n", tty ? "\n" : "", static_cast<long long>(r.step), skip_reason(r).c_str());
      }
      skip_last = r.step;
    } else {
      end_skips();
    }
    if (!r.warning.empty()) std::fprintf(stderr, "%swarning: %s\n", tty ? "\n" : "", r.warning.c_str());
    metrics.write(step_json(r));
    if (tty || r.step % every == 0 || r.step == total) {
      // ETA from the mean step time so far.
      const double eta = r.elapsed_seconds / static_cast<double>(r.step - first + 1) * static_cast<double>(total - r.step);
      const std::string fp8 = r.fp8 ? fmt::format(" fp8 sat {} under {}", r.fp8->saturated, r.fp8->underflowed) : "";
      const char* unit = train::is_text_model(c.model) ? "tokens/s" : "images/s";  // (the model is known good by now)
      const std::string line = fmt::format("step {}/{} loss {:.4f} scale {:g} lr {:.2e} {:.0f} {} ETA {}{}{}", r.step, total, r.loss,
                                           r.loss_scale, r.lr, r.throughput, unit, duration_str(eta), fp8, r.skipped ? " (skipped)" : "");
      progress(tty ? "\r%-78s" : "%s\n", line.c_str());
    }
  };
  cb.on_eval = [&](const EvalRecord& r) {
    metrics.write(eval_json(r));
    progress("%seval step %lld: val_loss %.4f%s\n", tty ? "\n" : "", static_cast<long long>(r.step), r.val_loss,
             r.val_accuracy ? fmt::format(" val_accuracy {:.2f}%", 100 * *r.val_accuracy).c_str() : "");
  };

  TrainResult result = train(c, writer ? cb : TrainCallbacks{}, [&](const std::string& run) { metrics.write_line(run); });
  end_skips();
  if (result.adaptive) {
    std::string shares;
    for (const auto& [level, share] : result.product_shares) shares += fmt::format("{}{} {:.1f}%", shares.empty() ? "" : ", ", level, 100 * share);
    progress("adaptive precision: products by level over the run: %s; final plan: %s\n", shares.c_str(),
             result.plan.str().c_str());
    if (!a.plan_out.empty()) write_output(a.plan_out, result.plan.json() + "\n", "--plan-out");
  }
  const EvalRecord& last = result.evals.back();
  if (a.json) {
    nlohmann::json j = {{"final_val_loss", last.val_loss}, {"wall_seconds", result.wall_seconds},
                        {"steps", std::max<std::int64_t>(0, result.total_steps - result.first_step + 1)}, {"skipped_steps", result.skipped_steps},
                        {"peak_bytes", peak_json(result.peak_bytes)}};
    j["final_val_accuracy"] = last.val_accuracy ? nlohmann::json(*last.val_accuracy) : nlohmann::json(nullptr);
    j["precision_plan"] = nlohmann::json::parse(result.plan.json());
    if (result.adaptive) {
      j["product_shares"] = result.product_shares;
      j["final_plan"] = nlohmann::json::parse(result.plan.json());
    }
    fmt::print("{}\n", j.dump());
  } else {
    const double mib = 1 << 20;
    fmt::print("final: val_loss {:.4f}{}, {} steps ({} skipped) in {:.1f} s, peak memory {:.1f} MiB (+ {:.1f} MiB of data)\n",
               last.val_loss, last.val_accuracy ? fmt::format(", val_accuracy {:.2f}%", 100 * *last.val_accuracy) : "",
               std::max<std::int64_t>(0, result.total_steps - result.first_step + 1), result.skipped_steps, result.wall_seconds,
               static_cast<double>(result.peak_bytes["total"] - result.peak_bytes["data"]) / mib,
               static_cast<double>(result.peak_bytes["data"]) / mib);
  }
  return 0;
}

}  // namespace

RunOptions resolve(const TrainArgs& a) {
  RunOptions c = a.config;
  // The settings the command reads as words, each turned into its field by the library's one rule for it.
  const std::pair<const char*, const std::string*> words[] = {
      {"fp8_recipe", &a.fp8_recipe}, {"fp8_format", &a.fp8_format},     {"mx_scale", &a.mx_scale},
      {"fp8_first_last", &a.fp8_first_last}, {"adaptive_dtype", &a.adaptive_dtype}, {"mode", &a.mode},
      {"grad_reduce", &a.grad_reduce}, {"fp32_ops", &a.fp32_ops},       {"precision", &a.precision}};
  for (const auto& [key, value] : words) train::set_run_option(c, key, *value);
  if (!a.inject.empty()) train::set_run_option(c, "inject_nonfinite", a.inject);
  for (const auto& [key, value] : {std::pair{"adaptive_fp8", &a.adaptive_fp8}, std::pair{"overlap", &a.overlap},
                                   std::pair{"master_weights", &a.master_weights}}) {
    train::set_run_option(c, key, parse_on_off(c.name(key), *value));
  }
  for (const auto& [key, on] : {std::pair{"nvfp4_no_rht", a.nvfp4_no_rht}, std::pair{"nvfp4_no_sr", a.nvfp4_no_sr},
                                std::pair{"nvfp4_1d_weights", a.nvfp4_1d_weights}}) {
    train::set_run_option(c, key, on);
  }
  train::resolve_precision(c);
  return c;
}

// --help in sections, the flags most runs set first (CLI11 prints a section where its first flag was added).
void group_train_options(CLI::App& app) {
  const std::vector<std::pair<const char*, std::vector<const char*>>> sections = {
      {"Start here", {"--model", "--data", "--precision", "--steps", "--batch-size"}},
      {"Precision", {"--mode", "--master-weights", "--fp32-ops", "--fp32-layers", "--precision-plan", "--adaptive-dtype", "--adaptive-fp8",
                     "--adaptive-every", "--adaptive-warmup", "--stochastic-rounding"}},
      {"FP8 and microscaled recipes", {"--fp8-recipe", "--fp8-format", "--amax-history", "--fp8-margin", "--fp8-first-last",
                                       "--fp8-bf16-layers", "--fp8-layers", "--mx-scale", "--nvfp4-no-rht", "--nvfp4-no-sr",
                                       "--nvfp4-1d-weights"}},
      {"Loss scaling", {"--loss-scale", "--init-scale", "--growth-interval", "--growth-factor", "--backoff-factor", "--hysteresis",
                        "--min-scale", "--hold-lr-on-skip", "--skip-patience", "--stop-on-stall", "--plateau-patience"}},
      {"Optimization", {"--optimizer", "--lr", "--weight-decay", "--momentum", "--schedule", "--warmup", "--clip", "--loss-weight",
                        "--epochs", "--grad-accum", "--eval-every", "--eval-batches", "--seed", "--threads", "--device"}},
      {"Data", {"--train-images", "--train-labels", "--test-images", "--test-labels", "--normalize"}},
      {"Model sizes", {"--hidden", "--layers", "--width", "--embd", "--bptt", "--n-layer", "--n-head", "--n-embd", "--block-size", "--gelu"}},
      {"Checkpoints and weights", {"--checkpoint-dir", "--checkpoint-every", "--checkpoint-minutes", "--keep", "--resume", "--resume-from",
                                   "--resume-allow", "--init-from"}},
      {"Debugging numerics", {"--inject-nonfinite", "--inject-rank", "--trace-nonfinite", "--update-stats-every"}},
      {"Data parallel (mpirun)", {"--grad-reduce", "--bucket-mb", "--overlap", "--checksum-every", "--dist-timeout"}},
  };
  for (const auto& [section, flags] : sections) {
    for (const char* flag : flags) {
      if (CLI::Option* o = app.get_option_no_throw(flag)) o->group(section);
    }
  }
}

void add_train_options(CLI::App& app, TrainArgs& a) {
  RunOptions& c = a.config;
  app.add_option("--model", c.model, "mlp, cnn (Fashion-MNIST), segment (Fashion-MNIST per pixel: a loss over every "
                                     "pixel, with small gradients), gpt or lstm (text)")
      ->capture_default_str();
  app.add_option("--data", c.data, "Data: a directory in the MNIST layout (mlp, cnn), or a text file or directory (gpt, lstm). "
                                   "Default: Debian's Fashion-MNIST or fortunes");
  app.add_option("--train-images", c.train_images, "Image models: the training images file (IDX, gzipped or not, or NumPy .npy of uint8), "
                                                   "with --train-labels, --test-images, --test-labels, instead of --data");
  app.add_option("--train-labels", c.train_labels, "The training labels file (IDX or .npy of integers 0..255)");
  app.add_option("--test-images", c.test_images, "The test images file");
  app.add_option("--test-labels", c.test_labels, "The test labels file");
  app.add_option("--normalize", c.normalize, "Image models: auto (by the training set's own pixel mean and std) or MEAN,STD "
                                             "(of pixels on a 0..1 scale, as 0.2860,0.3530)")
      ->capture_default_str();
  app.add_option("--precision", a.precision, "fp32, bf16, fp16, fp8 (bf16 with FP8 products in the linear layers), " +
                                                recipe_names(is_microscaled, ", ") +
                                                " (the same with that microscaled recipe), or "
                                                "adaptive (each layer's precision chosen as it trains)")
      ->capture_default_str();
  app.add_option("--adaptive-dtype", a.adaptive_dtype, "adaptive: the 16-bit format between fp32 and fp8 (bf16 or fp16)")
      ->capture_default_str();
  app.add_option("--adaptive-fp8", a.adaptive_fp8, "adaptive: linear layers may move down to fp8 (on or off)")->capture_default_str();
  app.add_option("--adaptive-every", c.adaptive_options.every, "adaptive: steps between decisions")->capture_default_str();
  app.add_option("--adaptive-warmup", c.adaptive_options.warmup, "adaptive: no layer moves down before this step")
      ->capture_default_str();
  app.add_option("--precision-plan", c.precision_plan, "Run a fixed per-layer plan (JSON, as --plan-out writes it)");
  app.add_option("--fp8-recipe", a.fp8_recipe, "fp8 scaling: delayed (amax history), current (this step's amax), "
                                               "block (power-of-2 scales per 1x128 / 128x128 block), or " +
                                                   recipe_names(is_microscaled) + " (microscaled; as --precision with that name)")
      ->capture_default_str();
  app.add_flag("--nvfp4-no-rht", a.nvfp4_no_rht, "nvfp4 ablation: no Hadamard transform on the weight-gradient operands");
  app.add_flag("--nvfp4-no-sr", a.nvfp4_no_sr, "nvfp4 ablation: gradients rounded to nearest, not stochastically");
  app.add_flag("--nvfp4-1d-weights", a.nvfp4_1d_weights, "nvfp4 ablation: 1x16 weight blocks instead of 16x16");
  app.add_option("--mx-scale", a.mx_scale, recipe_names([](const RecipeInfo& r) { return r.scale_rule_choice(); }) + ": E8M0 scales: rceil (amax / max rounded up: never clips; TE's), "
                                           "floor (OCP MX 1.0's: may clip by up to 1/8) or even (torchao's EVEN)")
      ->capture_default_str();
  app.add_option("--fp8-format", a.fp8_format, "fp8 formats: hybrid (e4m3 forward, e5m2 gradients) or e4m3")
      ->capture_default_str();
  app.add_option("--amax-history", c.fp8_options.amax_history, "fp8 delayed scaling: steps of amax history")
      ->capture_default_str();
  app.add_option("--fp8-margin", c.fp8_options.margin, "fp8: scales divided by 2^margin")->capture_default_str();
  app.add_option("--fp8-first-last", a.fp8_first_last,
                 "fp8 and microscaled: the linear layers kept in bf16: recipe (the recipe's choice: the first and the last; "
                 "nvfp4: the first and those of the last blocks, ~15%, as NVIDIA's NVFP4 recipe), bf16 (the first and the "
                 "last) or fp8 (none)")
      ->capture_default_str();
  app.add_option("--fp8-bf16-layers", c.precision.fp8_layers.bf16_layers, "fp8: module paths (or prefixes) kept in bf16")
      ->delimiter(',');
  app.add_option("--fp8-layers", c.precision.fp8_layers.fp8_layers, "fp8: module paths (or prefixes) run in fp8 whatever else says")
      ->delimiter(',');
  app.add_option("--master-weights", a.master_weights,
                 "on, or off: update the bf16/fp16 parameters in place, losing updates under half an ulp (with "
                 "--mode low-precision-model; an ablation)")
      ->capture_default_str();
  app.add_option("--fp32-ops", a.fp32_ops,
                 "default (softmax, norms, losses, reductions and the LSTM state in fp32), none: all in the "
                 "compute dtype (an ablation), or default with more ops in fp32 (attention, linear_cross_entropy: the "
                 "GPT's head, ...; e.g. default,attention)")
      ->capture_default_str();
  app.add_option("--mode", a.mode, "autocast (f32 parameters) or low-precision-model (bf16/fp16 parameters, f32 master copies)")
      ->capture_default_str();
  app.add_option("--loss-scale", c.loss_scale, "dynamic (PyTorch's GradScaler), deepspeed (DeepSpeed's: window 1000, hysteresis 2, floor 1), static:N or none (default: dynamic for fp16, none otherwise)");
  app.add_option("--init-scale", c.init_scale, "Initial dynamic loss scale")->capture_default_str();
  app.add_option("--growth-interval", c.growth_interval, "Good steps in a row before the scale grows")->capture_default_str();
  app.add_option("--growth-factor", c.growth_factor, "Factor the scale grows by")->capture_default_str();
  app.add_option("--backoff-factor", c.backoff_factor, "Factor the scale shrinks by on overflow")->capture_default_str();
  app.add_option("--hysteresis", c.hysteresis, "DeepSpeed's hysteresis: overflows before the scale backs off (re-armed when it grows)")->capture_default_str();
  app.add_option("--min-scale", c.min_scale, "Floor of the dynamic scale (0: none, as GradScaler)")->capture_default_str();
  app.add_option("--optimizer", c.optimizer, "adamw, adam or sgd")->capture_default_str();
  app.add_option("--lr", c.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "Weight decay (decoupled for adamw)")->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--schedule", c.schedule, "cosine (linear warm-up, then cosine to lr/10) or constant")->capture_default_str();
  app.add_option("--warmup", c.warmup, "Warm-up steps (linear from 0, with either schedule)")->capture_default_str();
  app.add_option("--clip", c.clip, "Clip gradients to this global norm after unscaling (0: off)")->capture_default_str();
  app.add_option("--loss-weight", c.loss_weight, "Multiply the training loss (a task weight; small weights give small "
                                                 "gradients, the case loss scaling exists for)")->capture_default_str();
  app.add_flag("--stochastic-rounding", c.stochastic_rounding, "Write master weights back with stochastic rounding");
  app.add_option("--steps", c.steps, "Optimizer steps")->capture_default_str();
  app.add_option("--epochs", c.epochs, "Passes over the training images instead of --steps (mlp, cnn)");
  app.add_option("--batch-size", c.batch_size, "Examples (sequences for gpt, streams for lstm) per micro-batch")->capture_default_str();
  app.add_option("--grad-accum", c.grad_accum, "Micro-batches per step")->capture_default_str();
  app.add_option("--eval-every", c.eval_every, "Steps between evaluations")->capture_default_str();
  app.add_option("--eval-batches", c.eval_batches, "gpt, lstm: validation batches per evaluation")->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of initialization, data order and sampling")->capture_default_str();
  app.add_option("--threads", c.threads, "Threads (default: all)");
  app.add_option("--device", c.device, "cpu, or cuda: train on the GPU (cuda:0); checkpoints resume on either")->capture_default_str();
  app.add_option("--hidden", c.hidden, "mlp: hidden width; lstm: hidden units")->capture_default_str();
  app.add_option("--layers", c.layers, "mlp: hidden layers; lstm: layers")->capture_default_str();
  app.add_option("--embd", c.embd, "lstm: embedding width")->capture_default_str();
  app.add_option("--bptt", c.bptt, "lstm: tokens per segment (truncated backpropagation through time; the state carries across)")
      ->capture_default_str();
  app.add_option("--width", c.width, "cnn: channels of the first stage; segment: of every layer")->capture_default_str();
  app.add_option("--n-layer", c.n_layer, "gpt: blocks")->capture_default_str();
  app.add_option("--n-head", c.n_head, "gpt: attention heads")->capture_default_str();
  app.add_option("--n-embd", c.n_embd, "gpt: embedding width")->capture_default_str();
  app.add_option("--block-size", c.block_size, "gpt: context length")->capture_default_str();
  app.add_option("--gelu", c.gelu, "gpt: the MLP's GELU, erf (exact) or tanh (GPT-2's form, PyTorch's approximate='tanh')")
      ->capture_default_str();
  add_output_dir(app, "--checkpoint-dir", c.checkpoint_dir, "Write checkpoints (safetensors) to this directory");
  app.add_option("--checkpoint-every", c.checkpoint_every, "Steps between checkpoints (0: by time and at the end)")->capture_default_str();
  app.add_option("--checkpoint-minutes", c.checkpoint_minutes,
                 "Also checkpoint this long after the last save (0: off); Ctrl-C/SIGTERM save one too and exit 130/143")
      ->capture_default_str();
  app.add_option("--keep", c.keep, "Checkpoints kept (the newest)")->capture_default_str();
  app.add_flag("--resume", c.resume, "Continue from the newest checkpoint in --checkpoint-dir that reads whole, exactly");
  app.add_option("--resume-from", c.resume_from, "Continue from this checkpoint file, exactly");
  app.add_option("--init-from", c.init_from,
                 "Start from these weights: a PyTorch state_dict in safetensors, by PyTorch's names (docs/interop.md)");
  app.add_option("--resume-allow", c.resume_allow,
                 "Settings --resume may find changed, on purpose: lr, schedule, warmup, weight-decay, momentum, clip, "
                 "grad-accum, stochastic-rounding, loss-scale")
      ->delimiter(',');
  app.add_option("--inject-nonfinite", a.inject, "STEP[,STEP...]: put an inf into a gradient at these steps");
  app.add_option("--inject-rank", c.inject_rank, "Data parallel: --inject-nonfinite on this rank only (-1: every rank)")
      ->capture_default_str();
  app.add_option("--grad-reduce", a.grad_reduce, "Data parallel (mpirun): the gradients' format on the wire, f32, bf16 or "
                                                 "fp16 (summed in f32 either way)")
      ->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb, "Data parallel: MiB of (f32) gradients per all-reduce bucket")->capture_default_str();
  app.add_option("--overlap", a.overlap, "Data parallel: send gradient buckets while backward runs (on) or after it (off)")
      ->capture_default_str();
  app.add_option("--checksum-every", c.checksum_every, "Data parallel: steps between checks that every rank's weights are "
                                                       "identical (0: never)")
      ->capture_default_str();
  app.add_option("--dist-timeout", c.dist_timeout, "Data parallel: seconds a rank waits for the others before the job stops "
                                                   "(0: forever)")
      ->capture_default_str();
  app.add_option("--fp32-layers", c.precision.f32_layers, "Module paths (or prefixes) whose ops all run in fp32")->delimiter(',');
  app.add_flag("--trace-nonfinite", c.trace_nonfinite,
               "Check every op's output; the first that makes an inf/NaN stops the step (skipped) with a report naming it");
  app.add_option("--update-stats-every", c.update_stats_every,
                 "Every N steps, measure the share of weight updates lost to rounding in bf16/fp16 (--metrics: lost_updates)")
      ->capture_default_str();
  app.add_flag("--hold-lr-on-skip", c.hold_lr_on_skip, "Skipped steps do not advance the learning-rate schedule");
  app.add_option("--plateau-patience", c.plateau_patience,
                 "Text: steps in a row with the loss at the text's byte entropy (the model predicting bytes by their "
                 "frequency alone) before the run says so and what to try (0: never)")
      ->capture_default_str();
  app.add_option("--skip-patience", c.skip_patience, "Skipped steps in a row before the run says why and what to do")
      ->capture_default_str();
  app.add_flag("--stop-on-stall", c.stop_on_stall,
               "Stop (exit status 3) when the run stalls: --skip-patience skips in a row or a collapsed loss scale");
  app.add_flag("--quiet", c.quiet, "No progress lines on standard error, only warnings and errors (scripts, notebooks)");
  // Which flags were given, for the settings that contradict each other or do nothing (training.cpp).
  app.parse_complete_callback([&app, &c] {
    for (const CLI::Option* opt : app.get_options()) {
      if (opt->count() > 0) c.given.insert(option_key(*opt));
    }
  });
  group_train_options(app);
}

Run add_train(CLI::App& app) {
  auto a = std::make_shared<TrainRunArgs>();
  add_train_options(app, a->train);
  add_append_file(app, "--metrics", a->metrics, a->follow_symlinks,
                  "Write JSON lines to PATH (a run record, then one per step and per evaluation; docs/metrics.md), flushed as the run goes");
  app.add_flag("--metrics-append", a->metrics_append, "Add this run to a --metrics file that holds another's (a resumed run adds itself)");
  app.add_flag("--json", a->json, "Print the final summary as one JSON object on standard output");
  add_output_file(app, "--plan-out", a->plan_out, "adaptive: write the final per-layer plan (JSON) here, for --precision-plan");
  add_append_file(app, "--telemetry", a->telemetry, a->follow_symlinks, "Append numerics telemetry (JSON lines, one per tensor per sampled step) "
                                              "to PATH; `mantissa inspect PATH` summarizes it");
  add_telemetry_options(app, a->train.config);
  for (const char* flag : {"--metrics", "--metrics-append", "--json", "--plan-out", "--telemetry", "--telemetry-every",
                           "--telemetry-tensors", "--telemetry-layers", "--follow-symlinks"}) {
    app.get_option(flag)->group("Output");
  }
  return [a] { return run_train(*a); };
}

}  // namespace mantissa::cli
