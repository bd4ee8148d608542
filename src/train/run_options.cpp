// RunOptions (run_options.h): one table of a run's settings, each with its kind and the field it sets,
// which both doors go through, and the checks of a run's settings, worded as the door spells them.
#include "mantissa/train/run_options.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <tuple>

#include "mantissa/base/errors.h"
#include "mantissa/base/value_range.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/numeric/parse_number.h"
#include "mantissa/numeric/recipes.h"
#include "mantissa/train/builders.h"
#include "mantissa/train/setting_ranges.h"

namespace mantissa::train {
namespace {

const char* kind_words(OptionKind kind) {
  switch (kind) {
    case OptionKind::integer: return "an integer";
    case OptionKind::real: return "a number";
    case OptionKind::flag: return "a switch (true or false)";
    case OptionKind::on_off: return "on or off (true or false)";
    case OptionKind::text: return "text";
    case OptionKind::list: return "a list of names";
  }
  return "?";
}

// A value of the row's kind; a UsageError naming the setting for any other.
template <class T>
T value_of(const RunOptions& o, std::string_view key, OptionKind kind, const OptionValue& v) {
  if constexpr (std::is_same_v<T, double>) {
    if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  }
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    if (const auto* s = std::get_if<std::string>(&v)) return comma_words(*s);  // the command's form: NAME,NAME
  }
  if (const T* t = std::get_if<T>(&v)) return *t;
  throw UsageError(o.name(key) + ": takes " + kind_words(kind));
}

// An integer setting held in an int: its value must fit.
int as_int(const RunOptions& o, std::string_view key, std::int64_t v) {
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max()) {
    throw UsageError(o.name(key) + ": " + std::to_string(v) + " is out of range");
  }
  return static_cast<int>(v);
}

// A library parser's refusal, as the setting's: "mode: 'x' is not autocast or low-precision-model".
template <class F>
auto parsed(const RunOptions& o, std::string_view key, F&& parse) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    throw UsageError(o.name(key) + ": " + e.what());
  }
}

using Setter = std::function<void(RunOptions&, const OptionValue&)>;
struct Row {
  RunOption option;
  Setter set;
};

template <class T>
Row field(const char* key, OptionKind kind, T RunOptions::*member) {
  return {{key, kind}, [key, kind, member](RunOptions& o, const OptionValue& v) {
            if constexpr (std::is_same_v<T, int>) {
              o.*member = as_int(o, key, value_of<std::int64_t>(o, key, kind, v));
            } else if constexpr (std::is_same_v<T, std::uint64_t>) {
              const std::int64_t n = value_of<std::int64_t>(o, key, kind, v);
              if (n < 0) throw UsageError(o.name(key) + ": must be 0 or more, got " + std::to_string(n));
              o.*member = static_cast<std::uint64_t>(n);
            } else {
              o.*member = value_of<T>(o, key, kind, v);
            }
          }};
}

// A setting whose value is turned into a typed field by its own rule.
template <class T>
Row rule(const char* key, OptionKind kind, std::function<void(RunOptions&, const T&)> apply) {
  return {{key, kind}, [key, kind, apply](RunOptions& o, const OptionValue& v) { apply(o, value_of<T>(o, key, kind, v)); }};
}

using K = OptionKind;
using Text = std::string;
using List = std::vector<std::string>;

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      field("model", K::text, &RunOptions::model),
      field("data", K::text, &RunOptions::data),
      field("train_images", K::text, &RunOptions::train_images),
      field("train_labels", K::text, &RunOptions::train_labels),
      field("test_images", K::text, &RunOptions::test_images),
      field("test_labels", K::text, &RunOptions::test_labels),
      field("normalize", K::text, &RunOptions::normalize),
      field("precision", K::text, &RunOptions::precision_name),
      rule<Text>("adaptive_dtype", K::text,
                 [](RunOptions& o, const Text& v) {
                   if (v != "bf16" && v != "fp16") throw UsageError(o.name("adaptive_dtype") + ": '" + v + "' is not bf16 or fp16");
                   o.adaptive_options.low = v == "fp16" ? DType::f16 : DType::bf16;
                 }),
      rule<bool>("adaptive_fp8", K::on_off, [](RunOptions& o, const bool& v) { o.adaptive_options.fp8 = v; }),
      rule<std::int64_t>("adaptive_every", K::integer, [](RunOptions& o, const std::int64_t& v) { o.adaptive_options.every = v; }),
      rule<std::int64_t>("adaptive_warmup", K::integer, [](RunOptions& o, const std::int64_t& v) { o.adaptive_options.warmup = v; }),
      field("precision_plan", K::text, &RunOptions::precision_plan),
      rule<Text>("fp8_recipe", K::text,
                 [](RunOptions& o, const Text& v) { o.fp8_options.recipe = parsed(o, "fp8_recipe", [&] { return QuantRecipe::parse(v); }); }),
      rule<bool>("nvfp4_no_rht", K::flag, [](RunOptions& o, const bool& v) { o.fp8_options.nvfp4_rht = !v; }),
      rule<bool>("nvfp4_no_sr", K::flag, [](RunOptions& o, const bool& v) { o.fp8_options.nvfp4_sr = !v; }),
      rule<bool>("nvfp4_1d_weights", K::flag, [](RunOptions& o, const bool& v) { o.fp8_options.nvfp4_2d_weights = !v; }),
      rule<Text>("mx_scale", K::text,
                 [](RunOptions& o, const Text& v) { o.fp8_options.mx_rule = parsed(o, "mx_scale", [&] { return parse_scale_rule(v); }); }),
      rule<Text>("fp8_format", K::text,
                 [](RunOptions& o, const Text& v) { o.fp8_options.format = parsed(o, "fp8_format", [&] { return parse_fp8_format(v); }); }),
      rule<std::int64_t>("amax_history", K::integer, [](RunOptions& o, const std::int64_t& v) { o.fp8_options.amax_history = v; }),
      rule<std::int64_t>("fp8_margin", K::integer,
                         [](RunOptions& o, const std::int64_t& v) { o.fp8_options.margin = as_int(o, "fp8_margin", v); }),
      rule<Text>("fp8_first_last", K::text,
                 [](RunOptions& o, const Text& v) {
                   if (v == "bf16") o.precision.fp8_layers.kept = KeptLayers::first_last;
                   else if (v == "fp8") o.precision.fp8_layers.kept = KeptLayers::none;
                   else if (v == "recipe") o.precision.fp8_layers.kept.reset();
                   else throw UsageError(o.name("fp8_first_last") + ": '" + v + "' is not recipe, bf16 or fp8");
                 }),
      rule<List>("fp8_bf16_layers", K::list, [](RunOptions& o, const List& v) { o.precision.fp8_layers.bf16_layers = v; }),
      rule<List>("fp8_layers", K::list, [](RunOptions& o, const List& v) { o.precision.fp8_layers.fp8_layers = v; }),
      field("master_weights", K::on_off, &RunOptions::master_weights),
      rule<Text>("fp32_ops", K::text,
                 [](RunOptions& o, const Text& v) { parsed(o, "fp32_ops", [&] { set_fp32_ops(o.precision, v); return 0; }); }),
      rule<Text>("mode", K::text,
                 [](RunOptions& o, const Text& v) { o.precision.mode = parsed(o, "mode", [&] { return parse_precision_mode(v); }); }),
      field("loss_scale", K::text, &RunOptions::loss_scale),
      field("init_scale", K::real, &RunOptions::init_scale),
      field("growth_interval", K::integer, &RunOptions::growth_interval),
      field("growth_factor", K::real, &RunOptions::growth_factor),
      field("backoff_factor", K::real, &RunOptions::backoff_factor),
      field("hysteresis", K::integer, &RunOptions::hysteresis),
      field("min_scale", K::real, &RunOptions::min_scale),
      field("optimizer", K::text, &RunOptions::optimizer),
      field("lr", K::real, &RunOptions::lr),
      field("weight_decay", K::real, &RunOptions::weight_decay),
      field("momentum", K::real, &RunOptions::momentum),
      field("schedule", K::text, &RunOptions::schedule),
      field("warmup", K::integer, &RunOptions::warmup),
      field("clip", K::real, &RunOptions::clip),
      field("loss_weight", K::real, &RunOptions::loss_weight),
      field("stochastic_rounding", K::flag, &RunOptions::stochastic_rounding),
      field("steps", K::integer, &RunOptions::steps),
      field("epochs", K::integer, &RunOptions::epochs),
      field("batch_size", K::integer, &RunOptions::batch_size),
      field("grad_accum", K::integer, &RunOptions::grad_accum),
      field("eval_every", K::integer, &RunOptions::eval_every),
      field("eval_batches", K::integer, &RunOptions::eval_batches),
      field("seed", K::integer, &RunOptions::seed),
      field("threads", K::integer, &RunOptions::threads),
      field("device", K::text, &RunOptions::device),
      field("hidden", K::integer, &RunOptions::hidden),
      field("layers", K::integer, &RunOptions::layers),
      field("embd", K::integer, &RunOptions::embd),
      field("bptt", K::integer, &RunOptions::bptt),
      field("width", K::integer, &RunOptions::width),
      field("n_layer", K::integer, &RunOptions::n_layer),
      field("n_head", K::integer, &RunOptions::n_head),
      field("n_embd", K::integer, &RunOptions::n_embd),
      field("block_size", K::integer, &RunOptions::block_size),
      field("gelu", K::text, &RunOptions::gelu),
      field("checkpoint_dir", K::text, &RunOptions::checkpoint_dir),
      field("checkpoint_every", K::integer, &RunOptions::checkpoint_every),
      field("checkpoint_minutes", K::real, &RunOptions::checkpoint_minutes),
      field("keep", K::integer, &RunOptions::keep),
      field("resume", K::flag, &RunOptions::resume),
      field("resume_from", K::text, &RunOptions::resume_from),
      field("init_from", K::text, &RunOptions::init_from),
      field("resume_allow", K::list, &RunOptions::resume_allow),
      rule<List>("inject_nonfinite", K::list,
                 [](RunOptions& o, const List& v) {
                   o.inject_nonfinite.clear();
                   for (const std::string& item : v) {
                     const std::int64_t step = parse_number<std::int64_t>(item, o.name("inject_nonfinite"));
                     if (step < 1) throw UsageError(o.name("inject_nonfinite") + ": '" + item + "' is not a step number (1, 2, ...)");
                     o.inject_nonfinite.push_back(step);
                   }
                 }),
      field("inject_rank", K::integer, &RunOptions::inject_rank),
      rule<Text>("grad_reduce", K::text,
                 [](RunOptions& o, const Text& v) {
                   try {
                     o.grad_reduce = parse_precision(v);
                   } catch (const std::invalid_argument&) {
                     throw UsageError(o.name("grad_reduce") + ": '" + v + "' is not f32, bf16 or fp16");
                   }
                 }),
      field("bucket_mb", K::real, &RunOptions::bucket_mb),
      field("overlap", K::on_off, &RunOptions::overlap),
      field("checksum_every", K::integer, &RunOptions::checksum_every),
      field("dist_timeout", K::real, &RunOptions::dist_timeout),
      rule<List>("fp32_layers", K::list, [](RunOptions& o, const List& v) { o.precision.f32_layers = v; }),
      field("trace_nonfinite", K::flag, &RunOptions::trace_nonfinite),
      field("update_stats_every", K::integer, &RunOptions::update_stats_every),
      field("hold_lr_on_skip", K::flag, &RunOptions::hold_lr_on_skip),
      field("plateau_patience", K::integer, &RunOptions::plateau_patience),
      field("skip_patience", K::integer, &RunOptions::skip_patience),
      field("stop_on_stall", K::flag, &RunOptions::stop_on_stall),
      field("quiet", K::flag, &RunOptions::quiet),
      field("telemetry_every", K::integer, &RunOptions::telemetry_every),
      field("telemetry_tensors", K::list, &RunOptions::telemetry_tensors),
      field("telemetry_layers", K::list, &RunOptions::telemetry_layers),
  };
  return table;
}

const Row* find_row(std::string_view key) {
  for (const Row& r : rows()) {
    if (key == r.option.key) return &r;
  }
  return nullptr;
}

// set_precision's name rule, unprefixed: "'x' is not fp32, bf16, ... (or adaptive)".
void apply_precision_name(RunOptions& o) {
  o.adaptive = o.precision_name == "adaptive";
  if (o.adaptive) {
    o.precision.compute = o.adaptive_options.low;
    o.precision.fp8.reset();
    return;
  }
  try {
    const PrecisionPolicy p = parse_precision_policy(o.precision_name, o.fp8_options);
    o.precision.compute = p.compute;
    o.precision.fp8 = p.fp8;  // the FP8 settings, with the microscaled recipe the name says
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(e.what()) + " (or adaptive)");
  }
}

}  // namespace

std::string RunOptions::name(std::string_view key) const {
  std::string s(key);
  if (spelling == Spelling::keywords) return s;
  std::replace(s.begin(), s.end(), '_', '-');
  return "--" + s;
}

const std::vector<RunOption>& run_option_table() {
  static const std::vector<RunOption> table = [] {
    std::vector<RunOption> out;
    for (const Row& r : rows()) out.push_back(r.option);
    return out;
  }();
  return table;
}

const RunOption* find_run_option(std::string_view key) {
  const Row* r = find_row(key);
  return r == nullptr ? nullptr : &r->option;
}

void set_run_option(RunOptions& o, std::string_view key, const OptionValue& value) {
  const Row* r = find_row(key);
  if (r == nullptr) throw UsageError("'" + std::string(key) + "' is no setting of a training run");
  r->set(o, value);
}

void resolve_precision(RunOptions& o) {
  try {
    o.fp8_options.check();
  } catch (const std::invalid_argument& e) {
    throw UsageError(o.name("fp8_recipe") + "/" + o.name("fp8_format") + "/" + o.name("amax_history") + "/" + o.name("fp8_margin") + "/" +
                     o.name("mx_scale") + ": " + e.what());
  }
  try {
    apply_precision_name(o);
  } catch (const std::invalid_argument& e) {
    throw UsageError(error_in(o.name("precision"), e.what()));
  }
}

void set_precision(RunOptions& o, const std::string& name) {
  o.precision_name = name;
  apply_precision_name(o);
}

namespace {

// A real-valued setting, the field it sets and its range (mantissa/train/setting_ranges.h).
struct RealSetting {
  const char* key;
  double RunOptions::*value;
  ValueRange range;
};

const std::vector<RealSetting>& real_settings() {
  namespace r = ranges;
  namespace s = loss_scale_ranges;
  static const std::vector<RealSetting> settings = {
      {"lr", &RunOptions::lr, r::kLearningRate},
      {"weight_decay", &RunOptions::weight_decay, r::kWeightDecay},
      {"momentum", &RunOptions::momentum, r::kMomentum},
      {"clip", &RunOptions::clip, r::kClip},
      {"loss_weight", &RunOptions::loss_weight, r::kLossWeight},
      {"init_scale", &RunOptions::init_scale, s::kScale},
      {"growth_factor", &RunOptions::growth_factor, s::kGrowthFactor},
      {"backoff_factor", &RunOptions::backoff_factor, s::kBackoffFactor},
      {"min_scale", &RunOptions::min_scale, s::kMinScale},
      {"checkpoint_minutes", &RunOptions::checkpoint_minutes, r::kCheckpointMinutes},
      {"bucket_mb", &RunOptions::bucket_mb, r::kBucketMiB},
      {"dist_timeout", &RunOptions::dist_timeout, r::kDistTimeout},
  };
  return settings;
}

}  // namespace

std::pair<double, double> normalization(const RunOptions& o) {
  if (o.normalize == "auto") return {kOwnStatistics, kOwnStatistics};
  const std::string flag = o.name("normalize");
  const std::vector<std::string> words = comma_words(o.normalize);
  const auto bad = [&] {
    return UsageError(flag + ": '" + o.normalize + "' is not auto or MEAN,STD (two numbers, STD above 0: the pixels' "
                      "mean and standard deviation on a 0..1 scale, as 0.2860,0.3530)");
  };
  if (words.size() != 2 || !is_number<double>(words[0]) || !is_number<double>(words[1])) throw bad();
  const double mean = parse_number<double>(words[0], flag);
  const double stddev = parse_number<double>(words[1], flag);
  if (!(stddev > 0)) throw bad();
  for (const auto& [range, what, v] : {std::tuple{ranges::kPixelMean, flag + "'s mean", mean},
                                       std::tuple{ranges::kPixelStd, flag + "'s standard deviation", stddev}}) {
    if (std::string problem = range.problem(what, v); !problem.empty()) throw UsageError(problem);
  }
  return {mean, stddev};
}

TelemetryPolicy telemetry_policy(const RunOptions& o) {
  TelemetryPolicy p;
  p.every = o.telemetry_every;
  if (!o.telemetry_tensors.empty()) {
    p.kinds.clear();
    for (const std::string& k : o.telemetry_tensors) p.kinds.push_back(parsed(o, "telemetry_tensors", [&] { return parse_tensor_kind(k); }));
  }
  p.layers = o.telemetry_layers;
  return p;
}

LossScalerOptions loss_scaler_options(const RunOptions& o) {
  LossScalerOptions dynamic;
  dynamic.init_scale = o.init_scale;
  dynamic.growth_factor = o.growth_factor;
  dynamic.backoff_factor = o.backoff_factor;
  dynamic.growth_interval = o.growth_interval;
  dynamic.hysteresis = o.hysteresis;
  dynamic.min_scale = o.min_scale;
  return parsed(o, "loss_scale", [&] { return parse_loss_scaling(o.loss_scale, o.precision.compute, dynamic); });
}

OptimizerConfig optimizer_options(const RunOptions& o) {
  OptimizerConfig c;
  c.kind = parsed(o, "optimizer", [&] { return parse_optimizer(o.optimizer); });
  c.lr = o.lr;
  c.weight_decay = o.weight_decay;
  c.momentum = o.momentum;
  c.master = {o.master_weights, o.stochastic_rounding ? Rounding::stochastic : Rounding::nearest_even, o.seed + 17, !o.master_weights};
  return c;
}

// Every setting in its range, so that no value is silently wrong or crashes the run later: counts within
// bounds that cannot overflow (a value past the type's range saturates when parsed, so the bounds also
// catch those), real numbers within what each means.
void check_run_options(const RunOptions& o) {
  const auto in_range = [&](std::int64_t v, std::int64_t lo, std::int64_t hi, const char* key) {
    if (v < lo || v > hi) {
      throw UsageError(o.name(key) + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(v));
    }
  };
  constexpr std::int64_t kMaxSteps = 1'000'000'000'000;  // 10^12: beyond any run, far from overflowing
  constexpr std::int64_t kMaxSize = 1 << 20;
  in_range(o.steps, 1, kMaxSteps, "steps");
  in_range(o.epochs, 0, 1'000'000, "epochs");
  in_range(o.batch_size, 1, kMaxSize, "batch_size");
  in_range(o.grad_accum, 1, kMaxSize, "grad_accum");
  in_range(o.eval_every, 1, kMaxSteps, "eval_every");
  in_range(o.eval_batches, 1, kMaxSize, "eval_batches");
  in_range(o.checkpoint_every, 0, kMaxSteps, "checkpoint_every");
  in_range(o.keep, 1, 1 << 20, "keep");
  // An image set file by file: all four, for an image model, instead of data.
  const std::vector<std::pair<const char*, const std::string*>> files = {
      {"train_images", &o.train_images}, {"train_labels", &o.train_labels}, {"test_images", &o.test_images}, {"test_labels", &o.test_labels}};
  std::string given, missing;
  for (const auto& [key, value] : files) {
    std::string& list = value->empty() ? missing : given;
    list += (list.empty() ? "" : ", ") + o.name(key);
  }
  if (!given.empty()) {
    if (!missing.empty()) throw UsageError(given + " given without " + missing + ": give all four files of the image set");
    if (!o.data.empty()) {
      throw UsageError(o.name("data") + " and the image files (" + o.name("train_images") + ", ...) both say where the data is: give one");
    }
    if (is_text_model(o.model)) {
      throw UsageError(o.name("train_images") + ", ...: " + o.name("model") + " " + o.model + " trains on text (give " + o.name("data") + ")");
    }
  }
  normalization(o);  // a bad normalize, before any data is read
  in_range(o.warmup, 0, kMaxSteps, "warmup");
  in_range(o.hidden, 1, 1 << 16, "hidden");
  in_range(o.layers, 0, 1024, "layers");
  in_range(o.width, 1, 1 << 14, "width");
  in_range(o.n_layer, 1, 1024, "n_layer");
  in_range(o.n_head, 1, 1 << 12, "n_head");
  in_range(o.n_embd, 1, 1 << 16, "n_embd");
  in_range(o.block_size, 1, 1 << 16, "block_size");
  if (o.gelu != "erf" && o.gelu != "tanh") throw UsageError(o.name("gelu") + " must be erf or tanh, got '" + o.gelu + "'");
  if (o.n_embd % o.n_head != 0) {
    throw UsageError(o.name("n_embd") + " " + std::to_string(o.n_embd) + " is not a multiple of " + o.name("n_head") + " " +
                     std::to_string(o.n_head));
  }
  in_range(o.growth_interval, 1, kMaxSteps, "growth_interval");
  in_range(o.hysteresis, 1, 1 << 20, "hysteresis");
  in_range(o.skip_patience, 1, 1 << 20, "skip_patience");
  in_range(o.plateau_patience, std::int64_t{0}, std::int64_t{1} << 40, "plateau_patience");
  in_range(o.update_stats_every, 0, kMaxSteps, "update_stats_every");
  if (o.telemetry) in_range(o.telemetry->every, 1, kMaxSteps, "telemetry_every");
  for (const RealSetting& r : real_settings()) {
    if (std::string problem = r.range.problem(o.name(r.key), o.*r.value); !problem.empty()) throw UsageError(problem);
  }
  if (o.model != "mlp" && o.model != "cnn" && o.model != "gpt" && o.model != "segment" && o.model != "lstm") {
    throw UsageError(o.name("model") + ": '" + o.model + "' is not mlp, cnn, segment, gpt or lstm");
  }
  if (o.model == "lstm") {
    in_range(o.layers, 1, 1024, "layers");
    in_range(o.embd, 1, 1 << 16, "embd");
    in_range(o.bptt, 1, 1 << 20, "bptt");
  }
  in_range(o.checksum_every, 0, kMaxSteps, "checksum_every");
  in_range(o.inject_rank, -1, 1 << 20, "inject_rank");
  if (o.threads < 0) throw UsageError(o.name("threads") + ": must be 0 (all of this machine's cores) or more, got " + std::to_string(o.threads));
  if (!o.master_weights && !o.precision.low_precision_model()) {
    throw UsageError(o.name("master_weights") + " off updates bf16/fp16 parameters in place: give " + o.name("mode") +
                     " low-precision-model with it (in autocast mode the f32 parameters are the master weights)");
  }
  if (fp32_ops_setting(o.precision) != "default" && o.precision.compute == DType::f32) {
    throw UsageError(o.name("fp32_ops") + " " + fp32_ops_setting(o.precision) + " needs " + o.name("precision") + " bf16 or fp16");
  }
  if (o.precision.compute != DType::f32 && o.precision.compute != DType::bf16 && o.precision.compute != DType::f16) {
    throw UsageError(o.name("precision") + " must be fp32, bf16 or fp16");
  }
  if (o.adaptive && (o.precision.low_precision_model() || !o.precision_plan.empty())) {
    throw UsageError(o.name("precision") + " adaptive runs in autocast mode, without " + o.name("precision_plan"));
  }
  if (o.adaptive) parsed(o, "adaptive_*", [&] { o.adaptive_options.check(); return 0; });
  if (o.precision.low_precision_model() && o.precision.compute == DType::f32) {
    throw UsageError(o.name("mode") + " low-precision-model needs " + o.name("precision") + " bf16 or fp16");
  }
  if (o.schedule != "cosine" && o.schedule != "constant") {
    throw UsageError(o.name("schedule") + ": '" + o.schedule + "' is not cosine or constant");
  }
  loss_scaler_options(o);  // the loss scaling's own checks
  optimizer_options(o);
}

}  // namespace mantissa::train
