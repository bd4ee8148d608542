// The quantization recipes a linear layer's products can run, as one table: each recipe's name (how
// flags, plan files, checkpoints, exports and the docs spell it), where its scales come from, and, for
// the microscaled ones, the elements and blocks of each operand and how an export stores them. Parsing,
// printing (`mantissa formats`), the command's settings agreement, export, the Python module and the
// trainer all read this table, so a block-scaled recipe is one row of it (docs/architecture.md).
//
// The products themselves (mantissa/ops/fp8.h) take each operand's QuantSpec from QuantOptions::spec,
// which reads the row; the kernels know only QuantSpecs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "mantissa/numeric/format.h"
#include "mantissa/numeric/microscale.h"

namespace mantissa {

// Where a recipe's scales come from.
enum class RecipeScaling : std::uint8_t {
  history,      // one f32 scale per tensor, from an amax history of earlier steps (TE's DelayedScaling)
  this_step,    // one f32 scale per tensor, from this step's amax (TE's Float8CurrentScaling)
  fp8_blocks,   // power-of-2 scales per 1 x N block, N x N for weights, by FP8's fit rule (DeepSeek-V3's)
  microscaled,  // every operand quantized from the high-precision tensor in 1 x `block` blocks along the
                // product's inner dimension, each block with its own scale (OCP MX, NVFP4)
};

// Which linear layers a run of a recipe keeps in bf16 (in module order; a tied head or an embedding is
// not a linear layer and stays bf16 anyway): none; the first and the last (Megatron's
// --first-last-layers-bf16); or the first and those of the last blocks, about 15% of the blocks and at
// least one, with any linear layer after them (NVIDIA's NVFP4 pretraining recipe; where the model has no
// numbered blocks, each linear layer counts as one).
enum class KeptLayers : std::uint8_t { none, first_last, first_and_last_blocks };

struct RecipeInfo {
  std::string_view name;     // "mxfp8": the flag value, the plan file's and the checkpoint's word
  std::string_view summary;  // one line for --help, `mantissa formats` and the docs
  RecipeScaling scaling;
  // microscaled recipes: the element formats of the forward operands (input, weight) and of the output
  // gradient, the block length and the scale format. (The FP8 recipes take theirs from --fp8-format.)
  Format forward = Format::e4m3();
  Format gradient = Format::e4m3();
  std::int64_t block = 0;
  ScaleFormat scale = ScaleFormat::e8m0;
  // The rule of E4M3 block scales: Transformer Engine's (te: 1 / (2688 / amax) per tensor, block scales
  // rounded to nearest, clamped at 448 only) or torchao's (floor: amax / 2688, block scales kept at least
  // 2^-6). E8M0 scales take the run's rule instead (--mx-scale).
  ScaleRule e4m3_rule = ScaleRule::te;
  // NVFP4's parts (16 x 16 weight blocks, stochastically rounded gradients, the Hadamard transform of the
  // weight-gradient operands), each on unless an ablation turns it off; the transform's fixed sign vector
  // (bit i set: value i of each group of 16 negated, as hadamard16 takes it), and whether its output is
  // rounded to the operand's dtype before it is quantized (TE multiplies in the operand's dtype: bf16
  // under autocast) or quantized from f32.
  bool nvfp4_parts = false;
  std::uint16_t hadamard_signs = 0;
  bool hadamard_in_operand_dtype = false;
  // The linear layers its runs keep in bf16 unless told otherwise (--fp8-first-last).
  KeptLayers kept = KeptLayers::first_last;
  // How `mantissa export --dtype NAME` stores the elements (a safetensors dtype PyTorch reads; "" where
  // PyTorch has none, and the export is refused).
  std::string_view export_dtype = "";
  // What running it needs: every recipe is emulated exactly on any CPU and CUDA GPU (the quantized values
  // held in bf16, which holds them all, and multiplied by bf16 products with f32 accumulation); the
  // per-tensor FP8 ones run on a GPU's fp8 tensor cores where it has them (docs/cuda.md).
  std::string_view needs = "any CPU or CUDA GPU (exact emulation: values in bf16, bf16 products)";

  // The quantizer's spec of the forward operands' blocks with the OCP rule (floor) where scales are
  // E8M0, the row's rule where they are E4M3: what `quant_spec(name)` and an export use. Only for
  // microscaled rows.
  QuantSpec element_spec(Format element) const {
    return QuantSpec{.element = element, .block_cols = block, .scale = scale,
                     .rule = scale == ScaleFormat::e4m3 ? e4m3_rule : ScaleRule::floor};
  }
  bool microscaled() const { return scaling == RecipeScaling::microscaled; }
  // The E8M0 scale rule is the run's choice (--mx-scale, a plan's "mx_scale").
  bool scale_rule_choice() const { return microscaled() && scale == ScaleFormat::e8m0; }
};

inline constexpr std::string_view kFp8TensorCores =
    "any CPU (exact emulation); a CUDA GPU: fp8 tensor-core products from compute capability 8.9";

// The table, in the order help texts and `mantissa formats` list it. A row's index is its QuantRecipe.
inline constexpr RecipeInfo kRecipes[] = {
    {.name = "delayed", .summary = "FP8, one scale per tensor from an amax history (TE's DelayedScaling)",
     .scaling = RecipeScaling::history, .needs = kFp8TensorCores},
    {.name = "current", .summary = "FP8, one scale per tensor from this step's amax (TE's Float8CurrentScaling)",
     .scaling = RecipeScaling::this_step, .needs = kFp8TensorCores},
    {.name = "block", .summary = "FP8, power-of-2 scales per 1x128 block, 128x128 for weights (DeepSeek-V3)",
     .scaling = RecipeScaling::fp8_blocks},
    {.name = "mxfp8", .summary = "OCP MXFP8: e4m3 elements, an E8M0 scale per 32 (TE's MXFP8BlockScaling)",
     .scaling = RecipeScaling::microscaled, .forward = Format::e4m3(), .gradient = Format::e4m3(), .block = 32,
     .scale = ScaleFormat::e8m0, .export_dtype = "F8_E4M3"},
    {.name = "mxfp4", .summary = "OCP MXFP4: e2m1 elements, an E8M0 scale per 32",
     .scaling = RecipeScaling::microscaled, .forward = Format::e2m1(), .gradient = Format::e2m1(), .block = 32,
     .scale = ScaleFormat::e8m0, .export_dtype = "F4"},
    {.name = "mxfp6", .summary = "OCP MXFP6: e2m3 forward, e3m2 gradients (as FP8's hybrid), an E8M0 scale per 32",
     .scaling = RecipeScaling::microscaled, .forward = Format::e2m3(), .gradient = Format::e3m2(), .block = 32,
     .scale = ScaleFormat::e8m0},
    {.name = "nvfp4",
     .summary = "NVFP4 as Transformer Engine computes it: e2m1 elements, an E4M3 scale per 16 under an f32 scale per tensor",
     .scaling = RecipeScaling::microscaled, .forward = Format::e2m1(), .gradient = Format::e2m1(), .block = 16,
     .scale = ScaleFormat::e4m3, .e4m3_rule = ScaleRule::te, .nvfp4_parts = true,
     .hadamard_signs = 0xd7e8,  // TE's default random_sign_mask_t, bit for bit (tests/unit/nvfp4_te_test.cpp)
     .hadamard_in_operand_dtype = true, .kept = KeptLayers::first_and_last_blocks, .export_dtype = "F4"},
    {.name = "nvfp4-torchao",
     .summary = "NVFP4 with torchao's scale rule (block scales at least 2^-6) and the sign vector 0xb4e1: nvfp4 before TE's",
     .scaling = RecipeScaling::microscaled, .forward = Format::e2m1(), .gradient = Format::e2m1(), .block = 16,
     .scale = ScaleFormat::e4m3, .e4m3_rule = ScaleRule::floor, .nvfp4_parts = true, .hadamard_signs = 0xb4e1,
     .export_dtype = "F4"},
};

// A recipe: a row of kRecipes. Compared, copied and stored as a byte; named by the table.
class QuantRecipe {
 public:
  static const QuantRecipe delayed, current, block, mxfp8, mxfp4, nvfp4, nvfp4_torchao;

  // Every recipe, in the table's order.
  static std::span<const QuantRecipe> all();
  // By name; throws std::invalid_argument naming the recipes.
  static QuantRecipe parse(std::string_view name);
  // The row of `name`, or nullptr.
  static const QuantRecipe* find(std::string_view name);

  const RecipeInfo& info() const { return kRecipes[index_]; }
  std::string_view name() const { return info().name; }
  friend constexpr bool operator==(QuantRecipe, QuantRecipe) = default;

 private:
  explicit constexpr QuantRecipe(std::uint8_t index) : index_(index) {}
  static consteval QuantRecipe named(std::string_view name) {
    for (std::uint8_t i = 0; i < std::size(kRecipes); ++i) {
      if (kRecipes[i].name == name) return QuantRecipe(i);
    }
    throw "no recipe of that name";  // (a compile-time error)
  }
  std::uint8_t index_;
};

inline constexpr QuantRecipe QuantRecipe::delayed = QuantRecipe::named("delayed");
inline constexpr QuantRecipe QuantRecipe::current = QuantRecipe::named("current");
inline constexpr QuantRecipe QuantRecipe::block = QuantRecipe::named("block");
inline constexpr QuantRecipe QuantRecipe::mxfp8 = QuantRecipe::named("mxfp8");
inline constexpr QuantRecipe QuantRecipe::mxfp4 = QuantRecipe::named("mxfp4");
inline constexpr QuantRecipe QuantRecipe::nvfp4 = QuantRecipe::named("nvfp4");
inline constexpr QuantRecipe QuantRecipe::nvfp4_torchao = QuantRecipe::named("nvfp4-torchao");

// The names of the recipes `keep` holds, joined as a list ("mxfp8, mxfp4 or nvfp4"), for help and
// error texts.
std::string recipe_names(bool (*keep)(const RecipeInfo&), std::string_view last_joint = " or ");
// The microscaled recipes, each also a --precision name (bf16 with that recipe's products).
bool is_microscaled(const RecipeInfo& r);

}  // namespace mantissa
