// The FP8 layer policy: the model's linear layers found by walking its modules, each given FP8 or bf16.
#include "mantissa/nn/fp8_policy.h"

#include <algorithm>
#include <array>
#include <stdexcept>

#include "mantissa/nn/layers.h"

namespace mantissa::nn {
namespace {

std::vector<std::pair<std::string, Linear*>> linear_layers(Module& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [path, m] : model.named_modules()) {
    if (auto* l = dynamic_cast<Linear*>(m)) out.emplace_back(path, l);
  }
  return out;
}

}  // namespace

std::vector<Fp8LayerChoice> apply_fp8_policy(Module& model, const Fp8Options& options, const Fp8Policy& policy) {
  options.check();
  const auto layers = linear_layers(model);
  const auto modules = model.named_modules();
  for (const auto* list : {&policy.bf16_layers, &policy.fp8_layers}) {
    for (const std::string& p : *list) {
      bool found = false;
      for (const auto& [path, m] : modules) found = found || path_within(path, p);
      if (!found) throw std::invalid_argument("fp8 policy: no module of the model is named '" + p + "'");
    }
  }
  std::vector<Fp8LayerChoice> plan;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string& path = layers[i].first;
    Fp8LayerChoice c{path, true, "default"};
    if (policy.first_last_bf16 && i == 0) c = {path, false, "first layer"};
    if (policy.first_last_bf16 && i + 1 == layers.size()) c = {path, false, "last layer"};
    for (const std::string& p : policy.bf16_layers) {
      if (path_within(path, p)) c = {path, false, "kept in bf16 (" + p + ")"};
    }
    for (const std::string& p : policy.fp8_layers) {
      if (path_within(path, p)) c = {path, true, "asked for (" + p + ")"};
    }
    if (c.fp8) {
      Fp8Options mine = options;
      mine.seed = options.seed + i + 1;  // each layer its own stochastic-rounding stream
      layers[i].second->enable_fp8(mine);
    }
    plan.push_back(c);
  }
  return plan;
}

std::string fp8_plan_str(const std::vector<Fp8LayerChoice>& plan, bool every_layer) {
  std::size_t n = 0;
  std::string kept;
  for (const Fp8LayerChoice& c : plan) {
    n += c.fp8 ? 1 : 0;
    if (!c.fp8) kept += (kept.empty() ? "" : ", ") + c.path + " (" + c.reason + ")";
  }
  std::string s = "fp8 in " + std::to_string(n) + " of " + std::to_string(plan.size()) + " linear layers";
  if (!kept.empty()) s += "; bf16: " + kept;
  if (every_layer) {
    for (const Fp8LayerChoice& c : plan) s += "\n  " + c.path + ": " + (c.fp8 ? "fp8" : "bf16") + " (" + c.reason + ")";
  }
  return s;
}

std::vector<std::pair<std::string, Fp8Counters>> fp8_layer_counters(Module& model) {
  std::vector<std::pair<std::string, Fp8Counters>> out;
  for (auto& [path, l] : linear_layers(model)) {
    if (l->fp8()) out.emplace_back(path, l->fp8()->counters());
  }
  return out;
}

void reset_fp8_layer_counters(Module& model) {
  for (auto& [path, l] : linear_layers(model)) {
    if (l->fp8()) l->fp8()->reset_counters();
  }
}

std::int64_t fp8_end_step(Module& model) {
  std::int64_t changed = 0;
  for (auto& [path, l] : linear_layers(model)) {
    if (l->fp8()) changed += l->fp8()->end_step();
  }
  return changed;
}

std::vector<double> fp8_step_amaxes(Module& model) {
  std::vector<double> out;
  for (auto& [path, l] : linear_layers(model)) {
    if (!l->fp8()) continue;
    const std::array<double, kFp8Operands> a = l->fp8()->step_amax();
    out.insert(out.end(), a.begin(), a.end());
  }
  return out;
}

void set_fp8_step_amaxes(Module& model, std::span<const double> amaxes) {
  std::size_t at = 0;
  for (auto& [path, l] : linear_layers(model)) {
    if (!l->fp8()) continue;
    if (at + kFp8Operands > amaxes.size()) throw std::invalid_argument("set_fp8_step_amaxes: fewer values than FP8 layers");
    std::array<double, kFp8Operands> a{};
    std::copy_n(amaxes.begin() + static_cast<std::ptrdiff_t>(at), kFp8Operands, a.begin());
    l->fp8()->set_step_amax(a);
    at += kFp8Operands;
  }
  if (at != amaxes.size()) throw std::invalid_argument("set_fp8_step_amaxes: more values than FP8 layers");
}

void validate_fp8_state(Module& model) {
  for (auto& [path, l] : linear_layers(model)) {
    if (!l->fp8()) continue;
    try {
      l->fp8()->validate();
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ": " + e.what());
    }
  }
}

}  // namespace mantissa::nn
