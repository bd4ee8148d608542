// FP8 products, as Transformer Engine runs them on Hopper: each operand of a linear layer's three
// products is scaled into an 8-bit format's range, rounded to it (nearest even, saturating), multiplied
// with f32 accumulation, and the result descaled. Inputs and weights go to e4m3 for the forward product;
// output gradients to e5m2 for the two backward products ("hybrid"), or e4m3 everywhere.
//
// Where the scales come from is the recipe:
//   delayed  per tensor, from a history of amaxes of earlier steps (TE's DelayedScaling: history 1024,
//            reduced by max, margin 0): scale = (max finite / amax) / 2^margin, recomputed after each
//            step; a tensor seen for the first time is scaled from its own amax (a warm-up TE lacks);
//   current  per tensor, from this step's amax;
//   block    power-of-2 scales per 1 x 128 block of activations and gradients (along the product's inner
//            dimension, so the wgrad product quantizes them again column-wise) and per 128 x 128 block
//            of weights (DeepSeek-V3's recipe, TE's Float8BlockScaling).
// The microscaled recipes quantize every operand of each product from the high-precision tensor, in
// blocks along that product's inner dimension, as their row of the recipe table says
// (mantissa/numeric/recipes.h: mxfp8, mxfp4, nvfp4, ...; mantissa/numeric/microscale.h has the rules).
// E8M0 scales are fitted by rounding amax / max(element) up to a power of 2 (rceil, TE's rule; floor as
// an option). NVFP4 follows NVIDIA's pretraining recipe: 16 x 16 weight blocks (one quantized weight
// serves both products), stochastic rounding of the output gradients, the 16-point random Hadamard
// transform on the weight-gradient product's operands; each part can be turned off to measure it.
// Each recipe is a QuantSpec per operand (QuantOptions::spec; a plan file may set any operand's own), and
// one path runs them all through the one quantizer kernel (BlockQuantize).
// Block-scaled values are held in bf16, which holds every such value; per-tensor scaled ones in their
// grid's fp8 dtype (e4m3, e5m2) where the products read fp8 (a GPU's fp8 tensor cores), in bf16 where they
// read bf16 (the CPU), as set_fp8_storage says. On the CPU this is exact emulation: the values multiplied
// by oneDNN's bf16 product with f32 accumulation.
//
// Non-finite values are not clipped: inf and NaN pass through the quantizer, so the loss scaler's check
// still sees an overflowed gradient.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "mantissa/core/tensor.h"
#include "mantissa/numeric/microscale.h"
#include "mantissa/numeric/recipes.h"

namespace mantissa {

enum class Fp8Format : std::uint8_t { hybrid, e4m3 };  // hybrid: e4m3 forward, e5m2 gradients
enum class AmaxReduction : std::uint8_t { max, most_recent };

// The operands of a layer whose scales the delayed recipe keeps.
enum class Fp8Operand : std::uint8_t { input, weight, grad_output };
inline constexpr std::size_t kFp8Operands = 3;

// How a layer's products are quantized: the recipe (an FP8 scaling or a microscaled format: FP8, FP6,
// FP4) and its settings. (Named for what it covers, not for FP8 alone.)
struct QuantOptions {
  QuantRecipe recipe = QuantRecipe::delayed;
  Fp8Format format = Fp8Format::hybrid;
  std::int64_t amax_history = 1024;               // delayed: steps remembered
  AmaxReduction reduction = AmaxReduction::max;   // delayed: how the history becomes one amax
  int margin = 0;                                 // scales divided by 2^margin (headroom)
  std::int64_t block = 128;                       // block: 1 x block and block x block
  // nvfp4's parts, each on unless an ablation turns it off:
  bool nvfp4_rht = true;         // the Hadamard transform on the weight-gradient product's operands
  bool nvfp4_sr = true;          // stochastic rounding of the output gradients
  bool nvfp4_2d_weights = true;  // 16 x 16 weight blocks (else 1 x 16, each product quantizing its own)
  // The microscaled recipes with E8M0 scales (mxfp8, ...): how the scales are fitted. rceil (TE's and cuBLAS's, torchao's RCEIL) never
  // clips; floor (OCP MX 1.0's) clips a block's largest values by up to 1/8 (e4m3), which biases the
  // gradients: a GPT on the fortunes trained visibly worse with it (docs/microscaling.md).
  ScaleRule mx_rule = ScaleRule::rceil;
  // Stochastic rounding's stream: train::apply_precision_plan gives each layer its own (seed + its index + 1).
  std::uint64_t seed = 0;

  Format forward_format() const { return Format::e4m3(); }
  Format backward_format() const { return format == Fp8Format::hybrid ? Format::e5m2() : Format::e4m3(); }
  // A plan's own spec for an operand, in place of the recipe's (a plan file's "input", "weight",
  // "grad_output"): the recipe's other choices (the delayed history, NVFP4's transform) stay.
  std::array<std::optional<QuantSpec>, kFp8Operands> specs{};

  // A microscaled recipe (mantissa/numeric/recipes.h): every operand block-quantized from the high-precision tensor.
  bool microscaled() const { return recipe.info().microscaled(); }
  // How the recipe quantizes an operand, as a value the one quantizer takes: blocks along the rows of its
  // [R, C] view (1 x N), which a product whose inner dimension is the operand's rows turns. delayed and
  // current: one f32 scale per tensor (the fit rule; delayed's from the history); block: 1 x block
  // power-of-2 scales, block x block for weights; the microscaled presets, with the weight's blocks
  // 16 x 16 for nvfp4 with 2-D weights and the output gradient's rounding stochastic for nvfp4 with
  // stochastic rounding. A plan's own spec (specs) wins.
  QuantSpec spec(Fp8Operand operand) const;
  // NVFP4's Hadamard transform of the weight-gradient product's operands is on.
  bool hadamard_wgrad() const { return recipe.info().nvfp4_parts && nvfp4_rht; }
  // The layer keeps a count of stochastic roundings (a block-scaled recipe, or a stochastic spec).
  bool keeps_rounding_count() const;
  // "delayed (hybrid, history 1024, max, margin 0)", "nvfp4 (e2m1 1x16 e4m3*f32; 16x16 weights, RHT, SR)"
  std::string str() const;
  // Throws std::invalid_argument for a history below 1, a margin outside 0..30, a block below 1, a spec
  // QuantSpec::check refuses.
  void check() const;
  friend bool operator==(const QuantOptions&, const QuantOptions&) = default;
};

// "hybrid", "e4m3"; "max", "most_recent" (the recipes' names are mantissa/numeric/recipes.h's).
// Throw std::invalid_argument.
Fp8Format parse_fp8_format(std::string_view name);
std::string_view fp8_format_name(Fp8Format format);
AmaxReduction parse_amax_reduction(std::string_view name);
std::string_view amax_reduction_name(AmaxReduction reduction);
// "input", "weight", "grad_output" (a plan file's keys); parse gives nullopt for another word.
std::string_view fp8_operand_name(Fp8Operand operand);
std::optional<Fp8Operand> parse_fp8_operand(std::string_view name);


// How much FP8 quantization clipped and lost, over every layer (fp8_counters()) or in one (QuantState), since
// the last reset.
struct Fp8Counters {
  std::int64_t quantized = 0;      // values quantized
  std::int64_t saturated = 0;      // finite values past the format's range, clipped to its largest
  std::int64_t underflowed = 0;    // non-zero values rounded to zero
  std::int64_t scale_updates = 0;  // delayed scales that changed at end_step()
};

// One quantized layer's scaling state (any recipe). For delayed scaling: amax_history() [history, 3] f32 (row 0 the newest,
// columns input, weight, output gradient) and scale() [3] f32; for the block-scaled recipes and any
// with a stochastic spec (QuantOptions::keeps_rounding_count), rounding_calls() [1] f64, the count of stochastically rounded quantizations so far, which keys the next
// one's random bits. A module registers them as buffers, so checkpoints carry them and a resume continues
// bit-identically. The other recipes keep no state.
class QuantState {
 public:
  explicit QuantState(const QuantOptions& options);
  const QuantOptions& options() const { return options_; }
  Tensor& amax_history() { return amax_history_; }
  Tensor& scale() { return scale_; }
  Tensor& rounding_calls() { return rounding_calls_; }
  // The seed of the next stochastically rounded quantization (from the layer's stream and the count,
  // which it advances).
  std::uint64_t next_rounding_seed();
  // This layer's share of the quantization counts (its forward and backward products), since the reset.
  const Fp8Counters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }
  void add_counts(std::int64_t quantized, std::int64_t saturated, std::int64_t underflowed);

  // What the op calls: the operand's scale (nullopt when its history is still empty), and its amax seen
  // this step (the largest of the step's uses; non-finite ones are not recorded).
  std::optional<float> delayed_scale(Fp8Operand operand) const;
  void record(Fp8Operand operand, double amax);
  // This step's amax of each operand so far, -1 where none was recorded; and replacing them (a value
  // below 0 leaves the operand unrecorded). Data parallel reduces them across ranks before end_step().
  std::array<double, kFp8Operands> step_amax() const;
  void set_step_amax(const std::array<double, kFp8Operands>& amax);
  // Delayed scaling, after each optimizer step: this step's amaxes go into the history (rolled) and the
  // scales are recomputed from it. Returns how many scales changed.
  std::int64_t end_step();
  // Throws std::invalid_argument when the state holds what no run writes (a negative or non-finite amax,
  // a scale not positive and finite): a checkpoint that was tampered with or belongs to another recipe.
  void validate() const;

 private:
  QuantOptions options_;
  Tensor amax_history_, scale_, rounding_calls_;
  std::array<double, kFp8Operands> pending_{};
  std::array<bool, kFp8Operands> seen_{};
  Fp8Counters counters_{};
};

// Where FP8's per-tensor scaled operands (delayed and current scaling) are held between their quantizer
// and their products (and kept for backward): in their grid's dtype (one byte a value, what fp8 tensor
// cores read) or in bf16 (what a bf16 product reads). automatic: the grid's dtype on a GPU, bf16 on the
// CPU, whose products are bf16: held in fp8 there, gpt-small's fp8 step kept 15% fewer activation bytes
// and took about 15% more time (every product widening its operands; docs/precision.md). The same
// values, so the same bits, either way.
enum class Fp8Storage : std::uint8_t { automatic, grid, bf16 };
void set_fp8_storage(Fp8Storage storage);
Fp8Storage fp8_storage();

Fp8Counters fp8_counters();
void reset_fp8_counters();
void add_fp8_scale_updates(std::int64_t n);

// y = x w^T + b with the product in FP8 as `state`'s recipe says: x [..., in], w [out, in], bias [out] or
// undefined; y in the autocast region's dtype (x's outside one); the backward pass quantizes the output
// gradient and runs the two products in FP8 too.
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const std::shared_ptr<QuantState>& state);

// x [R, C] as an FP8 product sees it, in f32: scaled by its own amax per block_rows x block_cols block
// (power-of-2 scales if asked), rounded to `format`, and scaled back. For tests and for showing what a
// recipe keeps of a tensor.
Tensor fp8_round_trip(const Tensor& x, Format format, std::int64_t block_rows, std::int64_t block_cols, bool power_of_2);

}  // namespace mantissa
