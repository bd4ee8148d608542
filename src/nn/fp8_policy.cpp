// The FP8 layers' step: counters, delayed scaling's end of step, amaxes across ranks, state checks.
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
