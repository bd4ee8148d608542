// The adaptive precision controller; see mantissa/train/adaptive.h.
#include "mantissa/train/adaptive.h"
#include "mantissa/io/json_number.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <tuple>

#include "mantissa/nn/layers.h"
#include "mantissa/numeric/format.h"

namespace mantissa::train {
namespace {

std::string fmt_num(const char* f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

double log2_of(DType d, bool normal) {
  const FormatTraits t = traits(format_of(d));
  return std::log2(normal ? t.min_normal : t.max_finite);
}

// A per-tensor scaled fp8 format keeps magnitudes down to amax times 2^-range: its largest over its
// smallest subnormal, in binades (e4m3 17.8, e5m2 31.8).
double fp8_range(DType d) {
  const FormatTraits t = traits(format_of(d));
  return std::log2(t.max_finite / t.min_subnormal);
}

// The share of a record's non-zero values whose magnitude lies wholly below 2^t (bins [2^e, 2^(e+1))
// with e + 1 <= t).
double share_below(const TensorNumerics& r, double t) {
  if (r.nonzero() <= 0) return 0;
  std::int64_t n = 0;
  for (std::size_t i = 0; i < r.log2_counts.size(); ++i) {
    if (r.log2_lo + static_cast<int>(i) + 1 <= t) n += r.log2_counts[i];
  }
  return static_cast<double>(n) / static_cast<double>(r.nonzero());
}

// A gradient's share held below `format`'s smallest normal: the record is unscaled, the held values are
// multiplied by the loss scale.
double held_below_normal(const TensorNumerics& g, DType format) {
  return share_below(g, log2_of(format, true) - std::log2(g.loss_scale));
}

// The share a per-tensor scaled fp8 format would flush to zero.
double fp8_lost(const TensorNumerics& r, DType format) {
  return r.amax > 0 ? share_below(r, std::log2(r.amax) - fp8_range(format)) : 0;
}

std::string pct(double share) { return fmt_num("%.2f%%", 100 * share); }

}  // namespace

void AdaptiveOptions::check() const {
  if (low != DType::bf16 && low != DType::f16) throw std::invalid_argument("adaptive precision: the 16-bit format must be bf16 or fp16");
  if (every < 1 || warmup < 0 || hold < 0 || max_ups < 1 || skips < 1) {
    throw std::invalid_argument("adaptive precision: every, max_ups and skips must be at least 1; warmup and hold at least 0");
  }
  for (const double share : {underflow, safe, fp8_loss}) {
    if (!(share >= 0 && share <= 1)) throw std::invalid_argument("adaptive precision: shares must lie in [0, 1]");
  }
  if (!(headroom >= 0 && headroom < 100)) throw std::invalid_argument("adaptive precision: headroom must lie in [0, 100)");
}

std::string PrecisionChange::json(DType low) const {
  return nlohmann::json{{"step", step}, {"layer", layer}, {"from", layer_precision_name(from, low)},
                        {"to", layer_precision_name(to, low)}, {"reason", reason}}
      .dump();
}

std::string PrecisionChange::str(DType low) const {
  return layer + " " + layer_precision_name(from, low) + " -> " + layer_precision_name(to, low) + ": " + reason;
}

PrecisionController::PrecisionController(nn::Module& model, AdaptiveOptions options, PrecisionPlan& plan)
    : model_(model), options_(options), plan_(plan) {
  options_.check();
  plan_ = PrecisionPlan{};
  plan_.low = options_.low;
  for (const auto& [path, m] : product_layers(model_)) {
    Layer l;
    l.module = m;
    l.linear = dynamic_cast<nn::Linear*>(m) != nullptr;
    const Tensor w = m->named_parameters().front().second;  // the weight: [out, in] or [out, in, k, k]
    l.fan_in = w.numel() / w.size(0);
    layers_[path] = l;
    plan_.layers[path] = LayerPrecision::low;
  }
  apply_precision_plan(model_, plan_);
}

TelemetryPolicy PrecisionController::telemetry() const { return TelemetryPolicy{.every = options_.every}; }

std::vector<PrecisionChange> PrecisionController::move(std::int64_t step, const std::string& path, bool up,
                                                       const std::string& reason) {
  LayerPrecision& level = plan_.layers.at(path);
  Layer& l = layers_.at(path);
  const LayerPrecision from = level;
  level = static_cast<LayerPrecision>(static_cast<int>(level) + (up ? 1 : -1));
  apply_layer_precision(model_, plan_, path);
  if (up) {
    ++l.ups;
    l.up_decision = decisions_;
  }
  l.blamed = 0;
  return {PrecisionChange{step, path, from, level, reason}};
}

std::vector<PrecisionChange> PrecisionController::decide(std::int64_t step, const std::vector<TensorNumerics>& records) {
  ++decisions_;
  struct Seen {
    const TensorNumerics *out = nullptr, *grad = nullptr, *weight = nullptr, *wgrad = nullptr;
  };
  std::map<std::string, Seen> seen;
  for (const TensorNumerics& r : records) {
    if (layers_.find(r.layer) == layers_.end()) continue;
    Seen& s = seen[r.layer];
    if (r.kind == TensorKind::activation) s.out = &r;
    if (r.kind == TensorKind::activation_grad) s.grad = &r;
    if (r.kind == TensorKind::weight && r.tensor == "weight") s.weight = &r;
    if (r.kind == TensorKind::weight_grad && r.tensor == "weight") s.wgrad = &r;
  }
  const DType low = plan_.low;
  std::vector<PrecisionChange> changes;
  for (const auto& [path, s] : seen) {
    Layer& l = layers_.at(path);
    if (s.out != nullptr) l.macs = static_cast<double>(s.out->count) * static_cast<double>(l.fan_in);
    const LayerPrecision level = plan_.layers.at(path);
    // Up: what the layer's own level loses.
    std::string up;
    if (s.out != nullptr && s.out->nonfinite > 0) up = "its output holds inf/NaN";
    if (level == LayerPrecision::low) {
      const std::string f = layer_precision_name(level, low);
      if (up.empty() && s.out != nullptr && s.out->amax > 0 && log2_of(low, false) - std::log2(s.out->amax) < options_.headroom) {
        up = "its output reaches " + fmt_num("%.4g", s.out->amax) + ", within 2^" + fmt_num("%g", options_.headroom) +
             " of " + f + "'s largest value";
      }
      for (const auto& [g, what] : {std::pair{s.grad, "output gradient"}, std::pair{s.wgrad, "weight gradient"}}) {
        if (!up.empty() || g == nullptr) continue;
        // Every value zero as held: the whole gradient flushed (the shares of non-zero values see nothing).
        if (g->count > 0 && g->zeros == g->count) {
          up = std::string("its ") + what + " is zero everywhere as held in " + f + " (flushed below its smallest subnormal; loss scale " +
               fmt_num("%g", g->loss_scale) + ")";
          continue;
        }
        const double below = held_below_normal(*g, low);
        if (below > options_.underflow) {
          up = std::string("its ") + what + " has " + pct(below) + " of its values below " + f + "'s smallest normal (loss scale " +
               fmt_num("%g", g->loss_scale) + ")";
        }
      }
    } else if (level == LayerPrecision::quantized) {
      for (const auto& [r, fmt, what] : {std::tuple{s.out, DType::e4m3, "output"}, std::tuple{s.weight, DType::e4m3, "weight"},
                                         std::tuple{s.grad, DType::e5m2, "output gradient"}}) {
        if (!up.empty() || r == nullptr) continue;
        const double lost = fp8_lost(*r, fmt);
        if (lost > 4 * options_.fp8_loss) up = "per-tensor scaled " + std::string(dtype_name(fmt)) + " would lose " + pct(lost) + " of its " + what;
      }
    }
    if (!up.empty() && level != LayerPrecision::f32) {
      auto c = move(step, path, true, up);
      changes.insert(changes.end(), c.begin(), c.end());
      continue;
    }
    // Down: after the warm-up, not soon after a move up, not for a layer that kept moving up.
    if (step < options_.warmup || decisions_ - l.up_decision <= options_.hold || l.ups >= options_.max_ups) continue;
    if (s.out == nullptr || s.grad == nullptr || s.wgrad == nullptr || s.weight == nullptr || s.out->nonfinite > 0) continue;
    if (level == LayerPrecision::low && options_.fp8 && l.linear) {
      const double out = fp8_lost(*s.out, DType::e4m3), w = fp8_lost(*s.weight, DType::e4m3), g = fp8_lost(*s.grad, DType::e5m2);
      if (std::max({out, w, g}) <= options_.fp8_loss) {
        auto c = move(step, path, false, "per-tensor scaled fp8 keeps it: e4m3 loses " + pct(out) + " of its output and " + pct(w) +
                                             " of its weight, e5m2 " + pct(g) + " of its output gradient");
        changes.insert(changes.end(), c.begin(), c.end());
      }
    } else if (level == LayerPrecision::f32) {
      const double room = log2_of(low, false) - std::log2(std::max(s.out->amax, 1e-300));
      const double g = held_below_normal(*s.grad, low), wg = held_below_normal(*s.wgrad, low);
      if (room >= options_.headroom + 2 && std::max(g, wg) <= options_.safe) {
        auto c = move(step, path, false, layer_precision_name(LayerPrecision::low, low) + " would keep it: output 2^" +
                                             fmt_num("%.1f", room) + " below the largest value, gradients " + pct(std::max(g, wg)) +
                                             " below the smallest normal");
        changes.insert(changes.end(), c.begin(), c.end());
      }
    }
  }
  return changes;
}

std::vector<PrecisionChange> PrecisionController::blame(std::int64_t step, const std::string& where, const std::string& why) {
  std::vector<PrecisionChange> changes;
  for (auto& [path, l] : layers_) {
    // The layer itself, a parameter of it ("fc0.weight"), or a part holding it ("blocks.1").
    if (!nn::path_within(where, path) && !nn::path_within(path, where)) continue;
    if (++l.blamed < options_.skips || plan_.layers.at(path) == LayerPrecision::f32) continue;
    auto c = move(step, path, true, std::to_string(l.blamed) + " skipped steps in a row blamed it: " + why);
    changes.insert(changes.end(), c.begin(), c.end());
  }
  return changes;
}

void PrecisionController::count_step(bool skipped) {
  for (auto& [path, l] : layers_) {
    macs_[plan_.layers.at(path)] += l.macs;
    if (!skipped) l.blamed = 0;
  }
}

std::map<LayerPrecision, double> PrecisionController::product_shares() const {
  double total = 0;
  for (const auto& [p, m] : macs_) total += m;
  std::map<LayerPrecision, double> out;
  for (const auto& [p, m] : macs_) out[p] = total > 0 ? m / total : 0;
  return out;
}

std::string PrecisionController::state_json() const {
  nlohmann::json j = {{"plan", nlohmann::json::parse(plan_.json())}, {"decisions", decisions_}};
  for (const auto& [path, l] : layers_) {
    j["layers"][path] = {{"ups", l.ups}, {"up_decision", l.up_decision}, {"blamed", l.blamed}, {"macs", l.macs}};
  }
  for (const auto& [p, m] : macs_) j["macs"][layer_precision_name(p, plan_.low)] = m;
  return j.dump();
}

void PrecisionController::load_state_json(std::string_view json) {
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    const PrecisionPlan plan = PrecisionPlan::parse(j.at("plan").dump());
    if (plan.low != plan_.low) throw std::invalid_argument("its 16-bit format differs from this run's");
    if (plan.layers.size() != plan_.layers.size()) throw std::invalid_argument("it names other layers than this model's");
    apply_precision_plan(model_, plan);
    plan_ = plan;
    decisions_ = json_number<std::int64_t>(j, "decisions");
    for (auto& [path, l] : layers_) {
      const nlohmann::json& s = j.at("layers").at(path);
      l.ups = json_number<int>(s, "ups");
      l.up_decision = json_number<std::int64_t>(s, "up_decision");
      l.blamed = json_number<int>(s, "blamed");
      l.macs = json_number<double>(s, "macs");
    }
    macs_.clear();
    if (j.contains("macs")) {
      for (const auto& [name, m] : j.at("macs").items()) macs_[parse_layer_precision(name, plan_.low)] = json_value<double>(m, "macs." + name);
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("adaptive precision state: ") + e.what());
  }
}

}  // namespace mantissa::train
