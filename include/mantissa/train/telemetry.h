// Numerics telemetry: what each chosen tensor's values look like to each number format. For the tensors
// a policy picks (layer outputs, weights, weight gradients, the gradients reaching layer outputs; by
// layer path), every `every` steps: the largest magnitude, the share of the non-zero values that fall
// below each format's smallest subnormal (lost to zero) and smallest normal (losing precision) or above
// its largest finite value, and a histogram of log2 magnitudes. Gradients are measured unscaled (divided
// by the step's loss scale): the shares say what a format would lose without loss scaling, and the loss
// scale recorded with them says what scaling moved. `mantissa train --telemetry FILE` writes one JSON line
// per tensor per sampled step; `mantissa inspect FILE` summarizes them.
//
//   train::TrainerOptions o;  o.telemetry = train::TelemetryPolicy{.every = 50};
//   for (const StepRecord& r : ...) for (const TensorNumerics& t : r.numerics) log << t.json() << "\n";
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mantissa/autograd/watch.h"
#include "mantissa/nn/module.h"

namespace mantissa::train {

enum class TensorKind : std::uint8_t { activation, weight, weight_grad, activation_grad };
inline constexpr std::array<TensorKind, 4> kTensorKinds = {TensorKind::activation, TensorKind::weight,
                                                           TensorKind::weight_grad, TensorKind::activation_grad};
// "activation", "weight", "weight_grad", "activation_grad" (parse also takes "weight-grad" and plurals).
std::string_view tensor_kind_name(TensorKind kind);
TensorKind parse_tensor_kind(std::string_view name);

struct TelemetryPolicy {
  std::int64_t every = 50;  // sampled steps: the first and every multiple of this
  std::vector<TensorKind> kinds = {kTensorKinds.begin(), kTensorKinds.end()};
  std::vector<std::string> layers = {};  // path prefixes ("blocks.1", "head"); empty: every layer
  bool due(std::int64_t step) const { return step == 1 || step % every == 0; }
  bool wants(TensorKind kind, const std::string& layer) const;
  void check() const;  // throws std::invalid_argument for every < 1
};

// The formats every tensor is measured against, in this order.
inline constexpr std::array<DType, 4> kTelemetryFormats = {DType::f16, DType::bf16, DType::e4m3, DType::e5m2};

// Shares of a tensor's non-zero finite values (0 when it has none).
struct FormatShares {
  double below_subnormal = 0;  // |v| below the smallest subnormal: flushed to zero
  double below_normal = 0;     // below the smallest normal (subnormals included): fewer significant bits
  double overflow = 0;         // above the largest finite value: inf (fp16, bf16) or saturated (fp8)
};

struct TensorNumerics {
  std::int64_t step = 0;
  TensorKind kind = TensorKind::activation;
  std::string layer;   // the module path ("" for the model itself)
  std::string tensor;  // the parameter's name within the layer ("weight", "bias"); empty for activations
  DType dtype = DType::f32;  // what the tensor is held in
  double loss_scale = 1;     // the gradients' (divided out before measuring)
  std::int64_t count = 0, zeros = 0, nonfinite = 0;
  double amax = 0;  // largest finite magnitude
  std::array<FormatShares, kTelemetryFormats.size()> formats = {};
  int log2_lo = 0;                   // the exponent of log2_counts[0]
  std::vector<std::int64_t> log2_counts;  // non-zero finite values by floor(log2 |v|), lowest to highest non-empty bin

  std::int64_t nonzero() const { return count - zeros - nonfinite; }
  const FormatShares& shares(DType format) const;
  std::string json() const;
  // Throws std::invalid_argument naming what is wrong.
  static TensorNumerics parse(std::string_view json_line);
};

// Measures t's values times factor (the inverse loss scale for gradients).
TensorNumerics measure(const Tensor& t, double factor = 1);

// Collects a step's records: a LayerTap for the layer outputs and their gradients during forward and
// backward, then the parameters and their gradients before the optimizer step. Several micro-batches add
// into one record per tensor.
class Telemetry : public LayerTap {
 public:
  explicit Telemetry(TelemetryPolicy policy);
  const TelemetryPolicy& policy() const { return policy_; }
  void begin_step(std::int64_t step, double loss_scale);
  void activation(const std::string& layer, const Tensor& output) override;
  void activation_grad(const std::string& layer, const Tensor& grad) override;
  void parameters(const nn::Module& model);
  // The step's records, in the order they were first seen; empties the collector.
  std::vector<TensorNumerics> take();

 private:
  void add(TensorKind kind, const std::string& layer, const std::string& tensor, const Tensor& t, double factor);
  TelemetryPolicy policy_;
  std::int64_t step_ = 0;
  double scale_ = 1;
  std::vector<TensorNumerics> records_;
  std::map<std::string, std::size_t> index_;  // kind/layer/tensor -> records_
};

}  // namespace mantissa::train
