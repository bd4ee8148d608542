// Settings that contradict each other or would do nothing (settings_agreement.h): each rule is a row,
// checked against the settings the door was given, once the run's length and data are known.
#include "settings_agreement.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/base/errors.h"
#include "mantissa/numeric/recipes.h"
#include "mantissa/train/builders.h"

namespace mantissa::cli {
namespace {

std::string n(std::int64_t v) { return std::to_string(v); }

// A setting that does something only under a condition the run does not meet: (keys, condition holds,
// what it needs, what this run has).
struct AppliesOnly {
  std::vector<const char*> keys;
  bool holds;
  std::string needs, instead;
};

}  // namespace

std::vector<std::string> check_agreement(const RunOptions& c, const RunFacts& run) {
  const auto given = [&](const char* key) { return c.was_given(key); };
  const auto f = [&](const char* key) { return c.name(key); };
  const auto refuse = [](const std::string& what) { throw UsageError(what); };
  if (given("epochs") && given("steps")) refuse(f("epochs") + " and " + f("steps") + " both say how long to train: give one of them");

  // Intervals past the run's end: harmless (a run trained in parts may mean the whole), so named.
  std::vector<std::string> notes;
  const std::string last = " is past the run's last step (" + n(c.steps) + ")";
  if (given("eval_every") && c.eval_every > c.steps) {
    notes.push_back(f("eval_every") + " " + n(c.eval_every) + last + ": this run evaluates only after its last step");
  }
  if (given("checkpoint_every") && c.checkpoint_every > c.steps) {
    notes.push_back(f("checkpoint_every") + " " + n(c.checkpoint_every) + last + ": this run saves only after its last step");
  }
  if (given("update_stats_every") && c.update_stats_every > c.steps) {
    notes.push_back(f("update_stats_every") + " " + n(c.update_stats_every) + last + ": this run never measures lost updates");
  }
  // A warm-up longer than the run (the schedule cannot be drawn), an injection that would never happen
  // (a test that cannot fail): refused.
  if (c.warmup > c.steps) refuse(f("warmup") + " " + n(c.warmup) + " is longer than the run (" + n(c.steps) + " steps)");
  for (const std::int64_t s : c.inject_nonfinite) {
    if (s > c.steps) refuse(f("inject_nonfinite") + " " + n(s) + last + ": it would never happen");
  }

  // Data the settings do not fit.
  if (run.train_images > 0 && c.batch_size > run.train_images) {
    refuse(f("batch_size") + " " + n(c.batch_size) + " is more than the " + n(run.train_images) + " training images in " + run.data);
  }
  if (run.labels_single_class) {
    refuse(run.data + ": every training label is the same class: a classifier needs at least two (give the data's labels)");
  }

  // A floor above the start: the scale would start below its own floor.
  if (run.dynamic_scaling && c.min_scale > c.init_scale) {
    refuse(f("min_scale") + " " + std::to_string(c.min_scale) + " is above " + f("init_scale") + " " + std::to_string(c.init_scale));
  }

  // Settings for something this run does not do (for a precision's settings: nor any run of its compare).
  const auto any_run = [&](const auto& holds) {
    if (holds(c)) return true;
    for (const std::string& name : c.compared) {
      RunOptions other = c;
      set_precision(other, name);
      if (holds(other)) return true;
    }
    return false;
  };
  const bool adaptive = any_run([](const RunOptions& o) { return o.adaptive; });
  const bool fp8 = any_run([](const RunOptions& o) { return o.precision.fp8 || (o.adaptive && o.adaptive_options.fp8); });
  // A recipe's own settings, for the recipes whose row of the table has what they set.
  constexpr auto has_scale_rule = [](const RecipeInfo& r) { return r.scale_rule_choice(); };
  constexpr auto has_nvfp4_parts = [](const RecipeInfo& r) { return r.nvfp4_parts; };
  const auto recipe_run = [&](bool (*has)(const RecipeInfo&)) {
    return any_run([has](const RunOptions& o) { return o.precision.fp8 && has(o.precision.fp8->recipe.info()); });
  };
  const std::string model = f("model") + " ";
  const std::vector<AppliesOnly> rows = {
      {{"adaptive_dtype", "adaptive_fp8", "adaptive_every", "adaptive_warmup"}, adaptive, f("precision") + " adaptive", ""},
      {{"fp8_recipe", "fp8_format", "amax_history", "fp8_margin", "fp8_first_last", "fp8_bf16_layers", "fp8_layers"},
       fp8, f("precision") + " fp8 (or adaptive)", ""},
      {{"nvfp4_no_rht", "nvfp4_no_sr", "nvfp4_1d_weights"}, recipe_run(has_nvfp4_parts),
       f("precision") + " " + recipe_names(has_nvfp4_parts), ""},
      {{"mx_scale"}, recipe_run(has_scale_rule), f("precision") + " " + recipe_names(has_scale_rule), ""},
      {{"init_scale", "growth_interval", "growth_factor", "backoff_factor", "hysteresis", "min_scale"},
       run.dynamic_scaling, f("loss_scale") + " dynamic (fp16's default)",
       c.loss_scale.empty() ? "no loss scaling" : f("loss_scale") + " " + c.loss_scale},
      {{"momentum"}, c.optimizer == "sgd", f("optimizer") + " sgd", c.optimizer},
      {{"stochastic_rounding"}, c.precision.low_precision_model(), f("mode") + " low-precision-model (bf16/fp16 parameters written from f32 masters)",
       "autocast, whose f32 parameters are not rounded"},
      {{"checkpoint_every", "checkpoint_minutes", "keep"}, !c.checkpoint_dir.empty(), f("checkpoint_dir"), ""},
      {{"resume_allow"}, c.resume || !c.resume_from.empty(), f("resume") + " or " + f("resume_from"), ""},
      {{"hidden", "layers"}, c.model == "mlp" || c.model == "lstm", model + "mlp or lstm", c.model},
      {{"width"}, c.model == "cnn" || c.model == "segment", model + "cnn or segment", c.model},
      {{"n_layer", "n_head", "n_embd", "block_size", "gelu"}, c.model == "gpt", model + "gpt", c.model},
      {{"embd", "bptt"}, c.model == "lstm", model + "lstm", c.model},
      {{"normalize"}, !train::is_text_model(c.model), "an image model (mlp, cnn, segment)", c.model},
      {{"metrics_append"}, given("metrics"), f("metrics") + " PATH", ""},
      {{"telemetry_every", "telemetry_tensors", "telemetry_layers"}, c.telemetry.has_value(),
       f("telemetry") + (c.spelling == train::Spelling::keywords ? "=True" : " PATH"), ""},
      {{"grad_reduce", "bucket_mb", "overlap", "checksum_every", "dist_timeout", "inject_rank"}, run.ranks > 1,
       "data parallel training (mpirun with 2 or more ranks)", "1 rank"},
  };
  for (const AppliesOnly& row : rows) {
    if (row.holds) continue;
    for (const char* key : row.keys) {
      if (given(key)) refuse(f(key) + " applies only with " + row.needs + (row.instead.empty() ? "" : "; this run: " + row.instead));
    }
  }
  return notes;
}

}  // namespace mantissa::cli
