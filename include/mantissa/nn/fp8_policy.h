// Which layers of a model run their products in FP8: a policy like autocast's, overridable per module,
// and the FP8 layers' step. By default every linear layer does except those the recipe keeps in bf16
// (its row of mantissa/numeric/recipes.h: the model's first and last, as Megatron's
// --first-last-layers-bf16, the layers nearest the data and the loss being the most sensitive; for
// NVFP4 the first and the last blocks', as NVIDIA's recipe); the embedding, attention's inner products
// and a tied head are not linear layers and stay in bf16. The
// policy is resolved into the run's precision plan (train::plan_precision), which enables FP8 per layer.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/nn/module.h"
#include "mantissa/ops/fp8.h"

namespace mantissa::nn {

struct Fp8Policy {
  std::optional<KeptLayers> kept;        // the linear layers kept in bf16; unset: the recipe's choice
  std::vector<std::string> bf16_layers;  // module paths, or path prefixes ("blocks.0"), kept in bf16
  std::vector<std::string> fp8_layers;   // module paths, or prefixes, run in FP8 whatever else says
};

// After each optimizer step: the delayed recipe's histories and scales in every FP8 layer. Returns how
// many scales changed.
std::int64_t fp8_end_step(Module& model);
// Data parallel: every FP8 layer's amaxes of this step, three a layer in order (-1 where an operand was
// not seen), to be reduced across ranks with max before fp8_end_step(), as Transformer Engine reduces
// them, so that every rank keeps the same histories and scales; and setting them back.
std::vector<double> fp8_step_amaxes(Module& model);
void set_fp8_step_amaxes(Module& model, std::span<const double> amaxes);
// Each FP8 layer's quantization counts since the last reset (by module path, in module order), and the
// reset: what telemetry reports per layer.
std::vector<std::pair<std::string, Fp8Counters>> fp8_layer_counters(Module& model);
void reset_fp8_layer_counters(Module& model);
// Every FP8 layer's state checked (after a checkpoint was loaded); throws std::invalid_argument naming
// the layer.
void validate_fp8_state(Module& model);

}  // namespace mantissa::nn
