// Settings that contradict each other or would do nothing (settings_agreement.h): each rule is a row,
// checked against the flags the user gave, once the run's length and data are known.
#include "settings_agreement.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "mantissa/numeric/recipes.h"
#include "mantissa/train/builders.h"

namespace mantissa::cli {
namespace {

std::string n(std::int64_t v) { return std::to_string(v); }

// A flag that does something only under a condition the run does not meet: (flags, condition holds,
// what it needs, what this run has).
struct AppliesOnly {
  std::vector<const char*> flags;
  bool holds;
  std::string needs, instead;
};

}  // namespace

std::vector<std::string> check_agreement(const TrainConfig& c, const RunFacts& run) {
  const auto given = [&](const char* flag) { return c.given.count(flag) > 0; };
  const auto refuse = [](const std::string& what) { throw std::invalid_argument(what); };
  if (given("--epochs") && given("--steps")) refuse("--epochs and --steps both say how long to train: give one of them");

  // Intervals past the run's end: harmless (a run trained in parts may mean the whole), so named.
  std::vector<std::string> notes;
  const std::string last = " is past the run's last step (" + n(c.steps) + ")";
  if (given("--eval-every") && c.eval_every > c.steps) {
    notes.push_back("--eval-every " + n(c.eval_every) + last + ": this run evaluates only after its last step");
  }
  if (given("--checkpoint-every") && c.checkpoint_every > c.steps) {
    notes.push_back("--checkpoint-every " + n(c.checkpoint_every) + last + ": this run saves only after its last step");
  }
  if (given("--update-stats-every") && c.update_stats_every > c.steps) {
    notes.push_back("--update-stats-every " + n(c.update_stats_every) + last + ": this run never measures lost updates");
  }
  // A warm-up longer than the run (the schedule cannot be drawn), an injection that would never happen
  // (a test that cannot fail): refused.
  if (c.warmup > c.steps) refuse("--warmup " + n(c.warmup) + " is longer than the run (" + n(c.steps) + " steps)");
  for (const std::int64_t s : c.inject_nonfinite) {
    if (s > c.steps) refuse("--inject-nonfinite " + n(s) + last + ": it would never happen");
  }

  // Data the settings do not fit.
  if (run.train_images > 0 && c.batch_size > run.train_images) {
    refuse("--batch-size " + n(c.batch_size) + " is more than the " + n(run.train_images) + " training images in " + run.data);
  }
  if (run.labels_single_class) {
    refuse(run.data + ": every training label is the same class: a classifier needs at least two (give the data's labels)");
  }

  // A floor above the start: the scale would start below its own floor.
  if (run.dynamic_scaling && c.min_scale > c.init_scale) {
    refuse("--min-scale " + std::to_string(c.min_scale) + " is above --init-scale " + std::to_string(c.init_scale));
  }

  // Flags for something this run does not do (for a precision's flags: nor any run of its compare).
  const auto any_run = [&](const auto& holds) {
    if (holds(c)) return true;
    for (const std::string& name : c.compared) {
      TrainConfig other = c;
      set_precision(other, name);
      if (holds(other)) return true;
    }
    return false;
  };
  const bool adaptive = any_run([](const TrainConfig& o) { return o.adaptive; });
  const bool fp8 = any_run([](const TrainConfig& o) { return o.precision.fp8 || (o.adaptive && o.adaptive_options.fp8); });
  // A recipe's own flags, for the recipes whose row of the table has what they set.
  constexpr auto has_scale_rule = [](const RecipeInfo& r) { return r.scale_rule_choice(); };
  constexpr auto has_nvfp4_parts = [](const RecipeInfo& r) { return r.nvfp4_parts; };
  const auto recipe_run = [&](bool (*has)(const RecipeInfo&)) {
    return any_run([has](const TrainConfig& o) { return o.precision.fp8 && has(o.precision.fp8->recipe.info()); });
  };
  const std::vector<AppliesOnly> rows = {
      {{"--adaptive-dtype", "--adaptive-fp8", "--adaptive-every", "--adaptive-warmup"}, adaptive, "--precision adaptive", ""},
      {{"--fp8-recipe", "--fp8-format", "--amax-history", "--fp8-margin", "--fp8-first-last", "--fp8-bf16-layers", "--fp8-layers"},
       fp8, "--precision fp8 (or adaptive)", ""},
      {{"--nvfp4-no-rht", "--nvfp4-no-sr", "--nvfp4-1d-weights"}, recipe_run(has_nvfp4_parts),
       "--precision " + recipe_names(has_nvfp4_parts), ""},
      {{"--mx-scale"}, recipe_run(has_scale_rule), "--precision " + recipe_names(has_scale_rule), ""},
      {{"--init-scale", "--growth-interval", "--growth-factor", "--backoff-factor", "--hysteresis", "--min-scale"},
       run.dynamic_scaling, "--loss-scale dynamic (fp16's default)",
       c.loss_scale.empty() ? "no loss scaling" : "--loss-scale " + c.loss_scale},
      {{"--momentum"}, c.optimizer == "sgd", "--optimizer sgd", c.optimizer},
      {{"--stochastic-rounding"}, c.precision.low_precision_model(), "--mode low-precision-model (bf16/fp16 parameters written from f32 masters)",
       "autocast, whose f32 parameters are not rounded"},
      {{"--checkpoint-every", "--checkpoint-minutes", "--keep"}, !c.checkpoint_dir.empty(), "--checkpoint-dir", ""},
      {{"--resume-allow"}, c.resume || !c.resume_from.empty(), "--resume or --resume-from", ""},
      {{"--hidden", "--layers"}, c.model == "mlp" || c.model == "lstm", "--model mlp or lstm", c.model},
      {{"--width"}, c.model == "cnn" || c.model == "segment", "--model cnn or segment", c.model},
      {{"--n-layer", "--n-head", "--n-embd", "--block-size", "--gelu"}, c.model == "gpt", "--model gpt", c.model},
      {{"--embd", "--bptt"}, c.model == "lstm", "--model lstm", c.model},
      {{"--normalize"}, !train::is_text_model(c.model), "an image model (mlp, cnn, segment)", c.model},
      {{"--metrics-append"}, given("--metrics"), "--metrics PATH", ""},
      {{"--telemetry-every", "--telemetry-tensors", "--telemetry-layers"}, c.telemetry.has_value(), "--telemetry PATH", ""},
      {{"--grad-reduce", "--bucket-mb", "--overlap", "--checksum-every", "--dist-timeout", "--inject-rank"}, run.ranks > 1,
       "data parallel training (mpirun with 2 or more ranks)", "1 rank"},
  };
  for (const AppliesOnly& row : rows) {
    if (row.holds) continue;
    for (const char* flag : row.flags) {
      if (given(flag)) refuse(std::string(flag) + " applies only with " + row.needs + (row.instead.empty() ? "" : "; this run: " + row.instead));
    }
  }
  return notes;
}

}  // namespace mantissa::cli
