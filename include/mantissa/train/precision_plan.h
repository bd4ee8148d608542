// Which layer runs in what, as one value. A run's precision plan gives every product layer (linear and
// convolution) of the model its level, f32 > the run's 16-bit format > fp8, says why where the reason is
// not the default, and names the FP8 recipe its fp8 layers use. The trainer resolves it once, from the
// run's PrecisionPolicy (compute dtype, FP8 layer policy, f32 layers) or from a fixed plan (a plan file),
// applies it, prints it at start and saves it in checkpoints; the adaptive controller edits the same value.
// A layer's precision is decided here and nowhere else, and so is the recipe each fp8 layer quantizes by:
// the run's, or a layer's own where a plan file gives one (say nvfp4 inside, mxfp8 at the edges).
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

// quantized: FP8 or a microscaled recipe (the plan names which).
enum class LayerPrecision : std::uint8_t { quantized, low, f32 };  // in order, lowest first
// "fp8", the low dtype's name ("bf16", "fp16"), "fp32".
std::string layer_precision_name(LayerPrecision p, DType low);
LayerPrecision parse_layer_precision(std::string_view name, DType low);
// A quantized layer's level as plans write it: "fp8" for the FP8 recipes (delayed, current, block), else
// the microscaled recipe's name ("nvfp4"): a layer quantized to FP4 is not an "fp8" layer.
std::string quantized_level_name(const QuantOptions& recipe);

struct PrecisionPlan {
  DType low = DType::bf16;                        // the 16-bit format of the run (its autocast dtype)
  std::map<std::string, LayerPrecision> layers;  // by module path
  std::map<std::string, std::string> reasons;    // why a layer has its level, where not by default
  QuantOptions fp8 = {.recipe = QuantRecipe::current};  // the recipe of the fp8 layers
  std::map<std::string, QuantOptions> recipes;         // fp8 layers with a recipe of their own

  // Whether a layer runs its products quantized (fp8 or a microscaled recipe): what the trainer's per-step
  // quantizer bookkeeping and the refusals of a quantized run that quantizes nothing ask.
  bool quantizes() const;
  // The recipe layer `path` quantizes by (its own, else the run's).
  const QuantOptions& recipe_of(const std::string& path) const;
  // What a plan file holds and a checkpoint saves, without reasons:
  //   {"low": "bf16", "quantized": {"recipe": "mxfp8", "mx_scale": "rceil", "seed": 0},
  //    "layers": {"fc0": "bf16", "fc1": "mxfp8", "fc2": {"level": "nvfp4", "recipe": {"recipe": "nvfp4", ...}}}}
  // A quantized layer's level is its recipe's word (quantized_level_name: "fp8" for the FP8 recipes, else
  // the microscaled recipe's name); "quantized" is there when a layer is. Reading, a recipe may also be
  // just its name ("nvfp4": the recipe with its defaults), the run's recipe may be left out (current
  // scaling), a layer's level may name a microscaled recipe other than the run's (that recipe with its
  // defaults), and plans written before these names read as they did: "fp8" for the run's recipe and for
  // any quantized layer's level.
  std::string json() const;
  // The levels alone ({"layers": ..., "low": ...}).
  std::string levels_json() const;
  static PrecisionPlan parse(std::string_view json);  // throws std::invalid_argument
  // Whether a plan's text gives the run's recipe ("quantized", or "fp8" as plans before it said): a plan
  // saved before plans named their recipes has the levels alone. Throws as parse() does.
  static bool names_recipe(std::string_view json);
  // "fp8 in 6 of 8 layers (mxfp8); bf16 in 2: blocks.0.attn.qkv (first layer), blocks.1.mlp.proj (last
  // layer)": each level's count, and its layers by name where there are at most 4 (else those with a
  // reason or a recipe of their own); with `every_layer`, a line per layer after it, the fp8 layers with
  // their recipe and, for a block-scaled one, what each operand is quantized to.
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
// removes a keep_in_f32 (an autocast policy of the layer's own stays), fp8 runs its products in FP8 by
// the layer's recipe (the i-th linear layer with stochastic-rounding stream recipe.seed + i + 1).
// Throws std::invalid_argument for a path that is no product layer of the model, fp8 for a convolution,
// or a layer that runs fp8 already by another recipe.
void apply_precision_plan(nn::Module& model, const PrecisionPlan& plan);
// One layer, `path`, set to the level the plan gives it (the adaptive controller's moves, after it edits
// the plan), as apply_precision_plan sets each.
void apply_layer_precision(nn::Module& model, const PrecisionPlan& plan, const std::string& path);

}  // namespace mantissa::train
