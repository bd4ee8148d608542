// Which layer runs in what, as one value. A run's precision plan gives every product layer (linear and
// convolution) of the model its level, f32 > the run's 16-bit format > fp8, says why where the reason is
// not the default, and names the FP8 recipe its fp8 layers use. The trainer resolves it once, from the
// run's PrecisionPolicy (compute dtype, FP8 layer policy, f32 layers) or from a fixed plan (a plan file),
// applies it, prints it at start and saves it in checkpoints; the adaptive controller edits its own copy.
// A layer's precision is decided here and nowhere else.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mantissa/nn/module.h"
#include "mantissa/ops/fp8.h"
#include "mantissa/train/config.h"

namespace mantissa::train {

enum class LayerPrecision : std::uint8_t { fp8, low, f32 };  // in order, lowest first
// "fp8", the low dtype's name ("bf16", "fp16"), "fp32".
std::string layer_precision_name(LayerPrecision p, DType low);
LayerPrecision parse_layer_precision(std::string_view name, DType low);

struct PrecisionPlan {
  DType low = DType::bf16;                        // the 16-bit format of the run (its autocast dtype)
  std::map<std::string, LayerPrecision> layers;  // by module path
  std::map<std::string, std::string> reasons;    // why a layer has its level, where not by default
  Fp8Options fp8 = {.recipe = Fp8Recipe::current};  // the recipe of the fp8 layers
  // {"low": "bf16", "layers": {"fc0": "fp8", ...}}: the levels (a plan file), without reasons or recipe.
  std::string json() const;
  static PrecisionPlan parse(std::string_view json);  // throws std::invalid_argument
  // "fp8 in 6 of 8 layers; bf16 in 2: blocks.0.attn.qkv (first layer), blocks.1.mlp.proj (last layer)":
  // each level's count, and its layers by name where there are at most 4 (else those with a reason);
  // with `every_layer`, a line per layer after it.
  std::string str(bool every_layer = false) const;
};

// The layers a plan names: every linear and convolution layer of the model, in registration order.
std::vector<std::pair<std::string, nn::Module*>> product_layers(nn::Module& model);

// The plan a policy makes of a model: an f32 run keeps every layer in f32; otherwise each product layer
// runs in the 16-bit format, the linear layers the FP8 layer policy picks in fp8 (with the policy's
// recipe; by default every one but the first and the last), and those under policy.f32_layers, or kept
// in f32 on the module or a module around it (Module::keep_in_f32), in f32.
// Throws std::invalid_argument for a path in the FP8 layer policy that names no module.
PrecisionPlan plan_precision(nn::Module& model, const PrecisionPolicy& policy);

// Sets each layer the plan names to its level: f32 keeps it in f32 (keep_in_f32), the 16-bit format
// removes a keep_in_f32 (an autocast policy of the layer's own stays), fp8 runs its products in FP8 by the plan's recipe (the i-th linear layer with
// stochastic-rounding stream recipe.seed + i + 1). Throws std::invalid_argument for a path that is no
// product layer of the model, or fp8 for a convolution.
void apply_precision_plan(nn::Module& model, const PrecisionPlan& plan);
// One layer's level (the adaptive controller's moves); FP8 by `fp8` where the layer has none yet.
void set_layer_precision(nn::Module& layer, const std::string& path, LayerPrecision p,
                         const Fp8Options& fp8 = {.recipe = Fp8Recipe::current});

}  // namespace mantissa::train
