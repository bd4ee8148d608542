// The typed settings of a training run, and their one parser each. Names a user types (on the command
// line, in a config file) become enums and structs here, once, at the edge; the trainer never compares
// strings. Every parser throws std::invalid_argument naming what it got and what it accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/core/dtype.h"
#include "mantissa/nn/fp8_policy.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa::train {

// Where the low precision lives (Apex's opt levels): autocast keeps f32 parameters and runs each op in the
// precision safe for it (O1); a low-precision model stores bf16/fp16 parameters, with f32 master weights
// in the optimizer (O2).
enum class PrecisionMode : std::uint8_t { autocast, low_precision_model };

struct PrecisionPolicy {
  DType compute = DType::f32;  // f32, bf16 or f16
  PrecisionMode mode = PrecisionMode::autocast;
  // FP8 products (on top of a bf16 or f16 compute dtype) in the linear layers fp8_layers picks.
  std::optional<QuantOptions> fp8 = std::nullopt;
  nn::Fp8Policy fp8_layers = {};
  // Module paths (or prefixes) whose ops all run in f32, whatever the compute dtype (keep_in_f32).
  std::vector<std::string> f32_layers = {};
  // Whether autocast runs its f32 list (softmax, norms, losses, reductions, the LSTM state) in f32; false
  // runs everything in the compute dtype (AutocastPolicy::all_low), an ablation that shows why the list exists.
  bool fp32_ops = true;
  // Ops run in f32 beyond that list (--fp32-ops default,attention): an op family a model needs in f32,
  // such as the char GPT's attention on the unigram plateau (issue 50).
  std::vector<AutocastOp> more_f32_ops = {};

  bool low_precision_model() const { return mode == PrecisionMode::low_precision_model; }
  // The dtype a model's inputs are given in: the compute dtype for a low-precision model, else f32.
  DType input_dtype() const { return low_precision_model() ? compute : DType::f32; }
  // The autocast policy its regions run: AutocastPolicy::defaults() (or all_low() without the f32 list),
  // with more_f32_ops in f32.
  AutocastPolicy autocast_policy() const;
  // "fp32", "bf16 autocast", "fp16 low-precision-model", "fp8 delayed (hybrid, ...) autocast", "bf16
  // autocast (attention in fp32)".
  std::string label() const;
  // Throws std::invalid_argument for a compute dtype other than f32, bf16, f16, a low-precision f32 model,
  // or FP8 over f32.
  void check() const;
};

// The words of a comma-separated setting, in order: "a,b" gives a and b; empty words are kept ("a,"
// gives a and ""), for the setting's own check to refuse by name. The one splitter of the settings that
// take lists (--precisions, --fp32-ops, --models, ...).
std::vector<std::string> comma_words(std::string_view text);

// --fp32-ops: "default" (autocast's f32 list), "none" (every op in the compute dtype), or the list and
// more ops by their autocast names, comma-separated ("default,attention", or "attention" alone: the list
// is implied). Sets policy.fp32_ops and policy.more_f32_ops; throws std::invalid_argument naming the word.
void set_fp32_ops(PrecisionPolicy& policy, std::string_view words);
// What set_fp32_ops() took, as checkpoints and run records keep it: "default", "none", "default,attention".
std::string fp32_ops_setting(const PrecisionPolicy& policy);

// "fp32", "bf16", "fp16" (also "f32", "f16") -> the compute dtype.
DType parse_precision(std::string_view name);
// The same names and "fp8": bf16 compute with FP8 products as `fp8` says (autocast mode); a microscaled
// recipe's name (mantissa/numeric/recipes.h: "mxfp8", "nvfp4", ...): the same with that recipe.
PrecisionPolicy parse_precision_policy(std::string_view name, const QuantOptions& fp8 = {});
// The name parse_precision() takes: "fp32", "bf16", "fp16".
std::string_view precision_name(DType compute);
// "autocast" or "low-precision-model".
PrecisionMode parse_precision_mode(std::string_view name);
std::string_view precision_mode_name(PrecisionMode mode);

enum class OptimizerKind : std::uint8_t { adamw, adam, sgd };
OptimizerKind parse_optimizer(std::string_view name);
std::string_view optimizer_name(OptimizerKind kind);

// An optimizer as a value: built over a model's parameters by make_optimizer(), with f32 master weights
// for every bf16/f16 parameter.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;
  double weight_decay = 0.01;  // AdamW's decoupled decay; L2 for adam and sgd
  double momentum = 0.9;       // sgd
  MasterWeightOptions master = {};
};
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::vector<Tensor> params);

// "dynamic", "deepspeed", "static:N" or "none" -> the scaler's options for `compute`; "" is the compute
// dtype's default (dynamic for fp16, none otherwise). `dynamic` gives the parameters a dynamic scaler uses
// (GradScaler's unless changed); "deepspeed" takes DeepSpeed's own, whatever `dynamic` says.
LossScalerOptions parse_loss_scaling(std::string_view name, DType compute, const LossScalerOptions& dynamic = {});
// The scaling in words, every parameter included: "none", "static:128", "dynamic(init 65536, ...)".
std::string loss_scaling_name(const LossScalerOptions& options);

}  // namespace mantissa::train
