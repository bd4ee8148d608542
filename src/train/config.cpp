// The parsers of a run's typed settings; see mantissa/train/config.h.
#include "mantissa/train/config.h"

#include <algorithm>
#include <cctype>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "mantissa/io/checkpoint.h"
#include "mantissa/numeric/parse_number.h"

namespace mantissa::train {

std::string PrecisionPolicy::label() const {
  if (compute == DType::f32) return "fp32";
  std::string more;
  for (const AutocastOp op : more_f32_ops) {
    more += more.empty() ? " (" : ", ";
    more += autocast_op_name(op);
  }
  if (!more.empty()) more += " in fp32)";
  if (fp8) return (fp8->microscaled() ? "" : "fp8 ") + fp8->str() + (compute == DType::bf16 ? "" : " over " + std::string(precision_name(compute))) +
                  " " + std::string(precision_mode_name(mode)) + more;
  return std::string(precision_name(compute)) + " " + std::string(precision_mode_name(mode)) +
         (fp32_ops ? "" : " (no fp32 ops)") + more;
}

AutocastPolicy PrecisionPolicy::autocast_policy() const {
  AutocastPolicy p = fp32_ops ? AutocastPolicy::defaults() : AutocastPolicy::all_low();
  for (const AutocastOp op : more_f32_ops) p.set(op, AutocastPrecision::f32);
  return p;
}

std::vector<std::string> comma_words(std::string_view text) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= text.size();) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    out.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

void set_fp32_ops(PrecisionPolicy& policy, std::string_view words) {
  bool list = false, none = false;
  std::vector<AutocastOp> more;
  std::string candidates;  // the ops autocast's list leaves out
  for (std::size_t i = 0; i < kAutocastOps; ++i) {
    const auto op = static_cast<AutocastOp>(i);
    if (AutocastPolicy::defaults().precision(op) == AutocastPrecision::f32) continue;
    if (!candidates.empty()) candidates += ", ";
    candidates += autocast_op_name(op);
  }
  for (const std::string& word : comma_words(words)) {
    if (word == "default") {
      list = true;
    } else if (word == "none") {
      none = true;
    } else if (const std::optional<AutocastOp> op = parse_autocast_op(word);
               op && AutocastPolicy::defaults().precision(*op) != AutocastPrecision::f32) {
      if (std::find(more.begin(), more.end(), *op) == more.end()) more.push_back(*op);
    } else {
      throw std::invalid_argument("'" + std::string(word) + "' is not default, none or an op to run in fp32 as well (" + candidates + ")");
    }
  }
  if (none && (list || !more.empty())) throw std::invalid_argument("none runs every op in the compute dtype: it takes nothing with it");
  std::sort(more.begin(), more.end());
  policy.fp32_ops = !none;
  policy.more_f32_ops = more;
}

std::string fp32_ops_setting(const PrecisionPolicy& policy) {
  std::string s = policy.fp32_ops ? "default" : "none";
  for (const AutocastOp op : policy.more_f32_ops) {
    s += ',';
    s += autocast_op_name(op);
  }
  return s;
}

void PrecisionPolicy::check() const {
  if (compute != DType::f32 && compute != DType::bf16 && compute != DType::f16) {
    throw std::invalid_argument("precision: " + std::string(dtype_name(compute)) + " is not fp32, bf16 or fp16");
  }
  if (low_precision_model() && compute == DType::f32) {
    throw std::invalid_argument("a low-precision model needs bf16 or fp16");
  }
  if (compute == DType::f32 && (!fp32_ops || !more_f32_ops.empty())) {
    throw std::invalid_argument("--fp32-ops " + fp32_ops_setting(*this) + " needs a bf16 or fp16 compute dtype");
  }
  if (fp8) {
    if (compute == DType::f32) throw std::invalid_argument("fp8 products need a bf16 or fp16 compute dtype");
    fp8->check();
  }
}

namespace {

// A precision's name as people write it: any case, and PyTorch's and NumPy's names for the same dtypes.
std::string canonical_precision(std::string_view name) {
  std::string n(name);
  for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (n == "float32" || n == "float" || n == "f32") return "fp32";
  if (n == "bfloat16") return "bf16";
  if (n == "float16" || n == "half" || n == "f16") return "fp16";
  return n;
}

}  // namespace

PrecisionPolicy parse_precision_policy(std::string_view given, const QuantOptions& fp8) {
  const std::string canonical = canonical_precision(given);
  const std::string_view name = canonical;
  if (name == "fp8") return PrecisionPolicy{DType::bf16, PrecisionMode::autocast, fp8};
  if (const QuantRecipe* recipe = QuantRecipe::find(name); recipe != nullptr && recipe->info().microscaled()) {
    QuantOptions o = fp8;
    o.recipe = *recipe;
    return PrecisionPolicy{DType::bf16, PrecisionMode::autocast, o};
  }
  try {
    return PrecisionPolicy{parse_precision(name)};
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("precision '" + std::string(given) + "' is not fp32, bf16, fp16, fp8, " + recipe_names(is_microscaled));
  }
}

DType parse_precision(std::string_view given) {
  const std::string name = canonical_precision(given);
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::f16;
  throw std::invalid_argument("precision '" + std::string(given) + "' is not fp32, bf16 or fp16");
}

std::string_view precision_name(DType compute) {
  switch (compute) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    default: return dtype_name(compute);
  }
}

PrecisionMode parse_precision_mode(std::string_view name) {
  if (name == "autocast") return PrecisionMode::autocast;
  if (name == "low-precision-model") return PrecisionMode::low_precision_model;
  throw std::invalid_argument("mode '" + std::string(name) + "' is not autocast or low-precision-model");
}

std::string_view precision_mode_name(PrecisionMode mode) {
  return mode == PrecisionMode::autocast ? "autocast" : "low-precision-model";
}

OptimizerKind parse_optimizer(std::string_view name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "adam") return OptimizerKind::adam;
  if (name == "sgd") return OptimizerKind::sgd;
  throw std::invalid_argument("optimizer '" + std::string(name) + "' is not adamw, adam or sgd");
}

std::string_view optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::adamw: return "adamw";
    case OptimizerKind::adam: return "adam";
    case OptimizerKind::sgd: return "sgd";
  }
  return "?";
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c, std::vector<Tensor> params) {
  if (c.kind == OptimizerKind::sgd) {
    return std::make_unique<Sgd>(std::move(params), SgdOptions{.lr = c.lr, .momentum = c.momentum,
                                                               .weight_decay = c.weight_decay, .master = c.master});
  }
  return std::make_unique<Adam>(std::move(params), AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay, .master = c.master},
                                c.kind == OptimizerKind::adamw);
}

LossScalerOptions parse_loss_scaling(std::string_view name, DType compute, const LossScalerOptions& dynamic) {
  LossScalerOptions o = LossScalerOptions::for_compute(compute);
  const auto use_dynamic = [&] {
    LossScalerOptions d = dynamic;
    d.kind = LossScaling::dynamic;
    d.compute = compute;
    return d;
  };
  if (name.empty()) return o.kind == LossScaling::dynamic ? use_dynamic() : o;
  if (name == "dynamic") return use_dynamic();
  if (name == "none") {
    o.kind = LossScaling::none;
    return o;
  }
  if (name == "deepspeed") {
    LossScalerOptions d = LossScalerOptions::deepspeed();
    d.compute = compute;
    return d;
  }
  if (name.substr(0, 7) == "static:") {
    // The scale multiplies f32 losses: a number f32 holds (not 0, not inf), and positive.
    const std::string what = "loss scale '" + std::string(name) + "' (static:N)";
    const double v = parse_number<float>(name.substr(7), what);
    if (!(v > 0)) throw std::invalid_argument(what + ": N must be positive");
    o.kind = LossScaling::fixed;
    o.init_scale = v;
    return o;
  }
  throw std::invalid_argument("loss scale '" + std::string(name) + "' is not dynamic, deepspeed, static:N or none");
}

std::string loss_scaling_name(const LossScalerOptions& o) {
  switch (o.kind) {
    case LossScaling::none: return "none";
    case LossScaling::fixed: return "static:" + exact_number(o.init_scale);
    case LossScaling::dynamic: break;
  }
  return "dynamic(init " + exact_number(o.init_scale) + ", growth " + exact_number(o.growth_factor) + " every " +
         std::to_string(o.growth_interval) + ", backoff " + exact_number(o.backoff_factor) + ", hysteresis " +
         std::to_string(o.hysteresis) + ", floor " + exact_number(o.min_scale) + ")";
}

}  // namespace mantissa::train
