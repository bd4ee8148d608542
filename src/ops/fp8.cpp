// The FP8 linear layer and its recipes; see mantissa/ops/fp8.h. The kernels (the one quantizer, the
// scaled product) are in the backends; this file says each recipe as a QuantSpec per operand, keeps the
// delayed recipe's history, and records the three products for autograd, one path for every recipe.
#include "mantissa/ops/fp8.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mantissa/autograd/node.h"
#include "mantissa/core/batched_reads.h"
#include "mantissa/numeric/convert.h"
#include "mantissa/ops/autocast.h"
#include "mantissa/ops/ops.h"
#include "op_support.h"

namespace mantissa {
namespace {

std::atomic<std::int64_t> g_quantized{0}, g_saturated{0}, g_underflowed{0}, g_scale_updates{0};

// (max finite / amax) / 2^margin, as f32; nullopt where amax gives no scale (zero, or not finite).
std::optional<float> per_tensor_scale(double amax, Format f, int margin) {
  if (!(amax > 0) || !std::isfinite(amax)) return std::nullopt;
  return detail::fp8_scale_for(amax, f, margin, false);
}

// A [R, C] view of x [..., C].
Tensor as_rows(const Tensor& x) { return reshape(x, {-1, x.size(-1)}); }

// One operand, quantized: the values ([R, C] contiguous, or a view of them) and the factor that scales
// products of it back (1 / scale for per-tensor scales; NVFP4's tensor scale; 1 for block scales, whose
// values come scaled back already), an f64 left by the quantizer on the values' device (undefined: 1),
// never read by the host. Per-tensor scaled values are held in their grid's storage dtype (e4m3 or e5m2:
// one byte each, as an fp8 product reads them and half the memory of the kept activations) or in bf16
// (set_fp8_storage); the others in bf16, which holds them exactly.
struct Quantized {
  Tensor values;
  Tensor factor;
};

std::atomic<Fp8Storage> g_storage{Fp8Storage::automatic};

// The dtype a spec's quantized values are held in on `device`: the fp8 element's own for one f32 scale
// per tensor (the values stay on its grid) where set_fp8_storage says so, else bf16.
DType held_dtype(const QuantSpec& spec, Device device) {
  const Fp8Storage storage = g_storage;
  const bool grid = storage == Fp8Storage::grid || (storage == Fp8Storage::automatic && device.type != DeviceType::cpu);
  const std::optional<DType> own = dtype_of(spec.element);
  return grid && spec.stays_on_grid() && own && is_storage_only(*own) ? *own : DType::bf16;
}

// The layer whose products are quantizing on this thread (its forward, or its node's backward), which
// gets its share of the counts.
thread_local QuantState* t_layer = nullptr;
struct CountingFor {
  QuantState* saved;
  explicit CountingFor(QuantState* layer) : saved(t_layer) { t_layer = layer; }
  ~CountingFor() { t_layer = saved; }
  CountingFor(const CountingFor&) = delete;
  CountingFor& operator=(const CountingFor&) = delete;
};

// The counts of one quantization, to the totals and to `layer`'s (if any).
void count(const detail::Fp8QuantizeStats& st, QuantState* layer) {
  g_quantized += st.count;
  g_saturated += st.saturated;
  g_underflowed += st.underflowed;
  if (layer != nullptr) layer->add_counts(st.count, st.saturated, st.underflowed);
}

// One operand quantized as `spec` says, through the one quantizer, for a product whose inner dimension
// is x's columns (or its rows: the blocks turned). The delayed recipe's per-tensor scale is given from
// the layer's history, and x's amax recorded in it when `record`; stochastic rounding draws the layer's
// next seed.
Quantized quantize_operand(const Tensor& x, QuantSpec spec, bool inner_is_rows, QuantState& state, Fp8Operand role,
                           bool record) {
  if (inner_is_rows) std::swap(spec.block_rows, spec.block_cols);
  Tensor q = Tensor::empty({x.size(0), x.size(1)}, held_dtype(spec, x.device()), x.device());
  if (x.numel() == 0) return {q, Tensor()};  // no blocks, no scales
  const bool delayed = state.options().recipe == QuantRecipe::delayed && spec.per_tensor();
  const float given = delayed ? state.delayed_scale(role).value_or(0.0f) : 0.0f;  // none yet: x's own amax
  const std::uint64_t seed = spec.rounding == Rounding::stochastic ? state.next_rounding_seed() : 0;
  // What the quantizer saw (its counts, x's amax for the history) goes where it is needed once the host
  // has it: inside a step, when the step reads its values (one wait); elsewhere, now.
  const auto take = [layer = t_layer, &state, role, keep = record && delayed](const detail::Fp8QuantizeStats& seen) {
    count(seen, layer);
    if (keep) state.record(role, seen.amax);
  };
  BatchedReads* reads = active_batched_reads();
  Tensor counts;
  if (reads != nullptr && reads->device() == x.device()) {
    counts = reads->slot(sizeof(detail::Fp8Counts), [take, n = x.numel()](std::span<const std::byte> bytes) {
      detail::Fp8Counts c;
      std::memcpy(&c, bytes.data(), sizeof c);
      take(detail::stats_of(c, n));
    });
  }
  const Tensor factor = Tensor::empty({static_cast<std::int64_t>(sizeof(double))}, DType::e4m3, x.device());
  const detail::Fp8QuantizeStats st =
      detail::run_kernel_on<detail::kernel::BlockQuantize>(x, x, spec, seed, given, q, counts, factor);
  if (!counts.defined()) take(st);
  return {q, factor};
}

// The values of q as another view (a transpose), with its factor.
Quantized viewed(const Quantized& q, const Tensor& view) { return {view, q.factor}; }

// out = a's factor * b's factor * (a . b) + bias: a's values [M, K], b's given as a [K, N] view, out
// [M, N] in `dtype`.
Tensor scaled_product(const Quantized& qa, const Quantized& qb, const Tensor& bias, DType dtype) {
  const Tensor &a = qa.values, &b = qb.values;
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  Tensor out = Tensor::empty({m, n}, dtype, a.device());
  const Tensor a3 = make_view(a, {1, m, k}, {m * k, a.strides()[0], a.strides()[1]}, a.offset());
  const Tensor b3 = make_view(b, {1, k, n}, {k * n, b.strides()[0], b.strides()[1]}, b.offset());
  const Tensor o3 = make_view(out, {1, m, n}, {m * n, n, 1}, 0);
  detail::run_kernel_on<detail::kernel::ScaledMatmul>(a, a3, b3, detail::ProductScale(1.0, qa.factor, qb.factor), bias, o3);
  return out;
}

// db = 1^T g [R, out] as a product (f32 accumulation), as the plain linear layer does it.
Tensor bias_gradient(const Tensor& g2) {
  return reshape(matmul(Tensor::full({1, g2.size(0)}, 1, g2.dtype(), g2.device()), g2), {g2.size(1)});
}

// NVFP4's random Hadamard transform of x [R, C] along its rows (the weight-gradient product's inner
// dimension), on x's device: each group of 16 rows mixed by H16 diag(signs) / 4, summed in f32. The sign
// vector is the recipe's (its row of the table), fixed for every run, as Transformer Engine fixes its
// own; the result stays f32 or is rounded to x's dtype, as the row says (TE's product is in x's dtype).
Tensor hadamard_rows(const Tensor& x, const RecipeInfo& recipe) {
  const Tensor t = Tensor::empty({x.size(0), x.size(1)}, DType::f32, x.device());
  detail::run_kernel_on<detail::kernel::HadamardRows>(x, x, recipe.hadamard_signs, t);
  return recipe.hadamard_in_operand_dtype && x.dtype() != DType::f32 ? cast(t, x.dtype()) : t;
}

// An operand as the backward pass needs it: its forward quantization, where that serves the backward
// product too (QuantSpec::turns), or the values as they came, to be quantized along the other dimension.
struct Kept {
  Quantized quantized;
  Tensor raw;
};

// The three products of every recipe: each operand quantized by its role's spec along the product's
// inner dimension (mantissa/ops/fp8.h), the weight-gradient operands transformed first where the recipe
// says (NVFP4's Hadamard transform).
class Fp8LinearNode final : public Node {
 public:
  Fp8LinearNode(Kept x, Kept w, Shape x_shape, DType x_dtype, DType w_dtype, std::shared_ptr<QuantState> state)
      : x_(std::move(x)), w_(std::move(w)), x_shape_(std::move(x_shape)), x_dtype_(x_dtype), w_dtype_(w_dtype),
        state_(std::move(state)) {}
  std::string_view name() const override { return "fp8_linear"; }
  void release() override { x_ = w_ = {}; }
  std::vector<Tensor> backward(const Tensor& g) override {
    const CountingFor counting(state_.get());
    const QuantOptions& o = state_->options();
    const QuantSpec gs = o.spec(Fp8Operand::grad_output);
    const Tensor g2 = as_rows(g);
    const bool rht = o.hadamard_wgrad() && g2.size(0) % 16 == 0;
    const RecipeInfo& recipe = o.recipe.info();
    Tensor gx, gw, gb;
    Quantized gq;
    if (inputs[0].node) {  // dx = g w: the inner dimension is g's columns and w's rows
      gq = quantize_operand(g2, gs, false, *state_, Fp8Operand::grad_output, true);
      const Quantized wq = w_.raw.defined() ? quantize_operand(w_.raw, o.spec(Fp8Operand::weight), true, *state_, Fp8Operand::weight, false)
                                            : w_.quantized;
      gx = reshape(scaled_product(gq, wq, Tensor(), x_dtype_), x_shape_);
    }
    if (inputs[1].node) {  // dw = g^T x: the inner dimension is the rows of both
      if (!gq.values.defined() || !gs.turns() || rht) {
        gq = quantize_operand(rht ? hadamard_rows(g2, recipe) : g2, gs, true, *state_, Fp8Operand::grad_output, !inputs[0].node);
      }
      const Quantized xq = x_.raw.defined() ? quantize_operand(rht ? hadamard_rows(x_.raw, recipe) : x_.raw, o.spec(Fp8Operand::input), true,
                                                               *state_, Fp8Operand::input, false)
                                            : x_.quantized;
      gw = scaled_product(viewed(gq, transpose(gq.values, 0, 1)), xq, Tensor(), w_dtype_);
    }
    if (inputs[2].node) gb = bias_gradient(g2);
    return {gx, gw, gb};
  }

 private:
  Kept x_, w_;
  Shape x_shape_;
  DType x_dtype_, w_dtype_;
  std::shared_ptr<QuantState> state_;
};

}  // namespace

QuantSpec QuantOptions::spec(Fp8Operand operand) const {
  if (const auto& own = specs[static_cast<std::size_t>(operand)]) return *own;
  const RecipeInfo& r = recipe.info();
  const bool gradient = operand == Fp8Operand::grad_output;
  const Format element = gradient ? backward_format() : forward_format();
  switch (r.scaling) {
    case RecipeScaling::history:
    case RecipeScaling::this_step:
      return {.element = element, .block_rows = 0, .block_cols = 0, .scale = ScaleFormat::f32, .rule = ScaleRule::fit, .margin = margin};
    case RecipeScaling::fp8_blocks:
      return {.element = element, .block_rows = operand == Fp8Operand::weight ? block : 1, .block_cols = block,
              .scale = ScaleFormat::e8m0, .rule = ScaleRule::fit, .margin = margin};
    case RecipeScaling::microscaled: break;
  }
  QuantSpec s = r.element_spec(gradient ? r.gradient : r.forward);  // (E4M3 scales: the row's rule)
  if (r.scale_rule_choice()) s.rule = mx_rule;
  if (r.nvfp4_parts) {
    if (operand == Fp8Operand::weight && nvfp4_2d_weights) s.block_rows = s.block_cols;
    if (gradient && nvfp4_sr) s.rounding = Rounding::stochastic;
  }
  return s;
}

bool QuantOptions::keeps_rounding_count() const {
  if (microscaled()) return true;
  return std::any_of(specs.begin(), specs.end(), [](const auto& s) { return s && s->rounding == Rounding::stochastic; });
}

std::string QuantOptions::str() const {
  std::string s = std::string(recipe.name()) + " (";
  if (microscaled()) {
    QuantOptions own = *this;  // the recipe's input spec, whatever a plan set
    own.specs = {};
    s += own.spec(Fp8Operand::input).str();
    if (recipe.info().gradient != recipe.info().forward) s += "; gradients " + own.spec(Fp8Operand::grad_output).element.name();
    if (recipe.info().nvfp4_parts) {
      s += std::string("; weights ") + (nvfp4_2d_weights ? "16x16" : "1x16") + ", RHT " + (nvfp4_rht ? "on" : "off") +
           ", gradients " + (nvfp4_sr ? "stochastic" : "nearest");
    }
  } else {
    s += std::string(fp8_format_name(format));
    if (recipe == QuantRecipe::delayed) {
      s += ", history " + std::to_string(amax_history) + ", " + std::string(amax_reduction_name(reduction));
    }
    if (recipe == QuantRecipe::block) {
      const std::string b = std::to_string(block);
      s += ", blocks 1x" + b + " and " + b + "x" + b;
    }
    s += ", margin " + std::to_string(margin);
  }
  for (std::size_t i = 0; i < kFp8Operands; ++i) {
    if (specs[i]) s.append("; ").append(fp8_operand_name(static_cast<Fp8Operand>(i))).append(" ").append(specs[i]->str());
  }
  return s + ")";
}

void QuantOptions::check() const {
  if (amax_history < 1 || amax_history > (1 << 20)) {
    throw std::invalid_argument("fp8: the amax history must hold 1 to 1048576 steps, got " + std::to_string(amax_history));
  }
  if (margin < 0 || margin > 30) throw std::invalid_argument("fp8: the margin must be in 0..30, got " + std::to_string(margin));
  if (block < 1 || block > (1 << 16)) throw std::invalid_argument("fp8: the block size must be in 1..65536, got " + std::to_string(block));
  for (const auto& own : specs) {
    if (own) own->check();
  }
}

Fp8Format parse_fp8_format(std::string_view n) {
  if (n == "hybrid") return Fp8Format::hybrid;
  if (n == "e4m3") return Fp8Format::e4m3;
  throw std::invalid_argument("'" + std::string(n) + "' is not an fp8 format choice (hybrid or e4m3)");
}
std::string_view fp8_format_name(Fp8Format f) { return f == Fp8Format::hybrid ? "hybrid" : "e4m3"; }
AmaxReduction parse_amax_reduction(std::string_view n) {
  if (n == "max") return AmaxReduction::max;
  if (n == "most_recent") return AmaxReduction::most_recent;
  throw std::invalid_argument("'" + std::string(n) + "' is not an amax reduction (max or most_recent)");
}
std::string_view amax_reduction_name(AmaxReduction r) { return r == AmaxReduction::max ? "max" : "most_recent"; }

constexpr std::array<std::string_view, kFp8Operands> kOperandNames = {"input", "weight", "grad_output"};
std::string_view fp8_operand_name(Fp8Operand operand) { return kOperandNames[static_cast<std::size_t>(operand)]; }
std::optional<Fp8Operand> parse_fp8_operand(std::string_view name) {
  for (std::size_t i = 0; i < kFp8Operands; ++i) {
    if (name == kOperandNames[i]) return static_cast<Fp8Operand>(i);
  }
  return std::nullopt;
}

QuantState::QuantState(const QuantOptions& options) : options_(options) {
  options_.check();
  if (options_.recipe == QuantRecipe::delayed) {
    amax_history_ = Tensor::zeros({options_.amax_history, static_cast<std::int64_t>(kFp8Operands)}, DType::f32);
    scale_ = Tensor::full({static_cast<std::int64_t>(kFp8Operands)}, 1.0, DType::f32);
  }
  if (options_.keeps_rounding_count()) rounding_calls_ = Tensor::zeros({1}, DType::f64);
}

void QuantState::add_counts(std::int64_t quantized, std::int64_t saturated, std::int64_t underflowed) {
  counters_.quantized += quantized;
  counters_.saturated += saturated;
  counters_.underflowed += underflowed;
}

std::uint64_t QuantState::next_rounding_seed() {
  double& calls = rounding_calls_.data_as<double>()[0];
  const auto n = static_cast<std::uint64_t>(calls);
  calls += 1;
  rounding_calls_.storage()->bump_version();
  // Distinct for every (layer, call): the stream in the high bits, the count in the low 40.
  return (options_.seed << 40) ^ n;
}

std::optional<float> QuantState::delayed_scale(Fp8Operand operand) const {
  const auto i = static_cast<std::size_t>(operand);
  // No amax recorded yet: the history's column is all zeros, and the scale has never been computed.
  const float* h = amax_history_.data_as<const float>();
  bool any = false;
  const auto cols = static_cast<std::int64_t>(kFp8Operands);
  for (std::int64_t r = 0; r < options_.amax_history && !any; ++r) any = h[r * cols + static_cast<std::int64_t>(i)] > 0;
  if (!any) return std::nullopt;
  return scale_.data_as<const float>()[i];
}

void QuantState::record(Fp8Operand operand, double amax) {
  const auto i = static_cast<std::size_t>(operand);
  if (!std::isfinite(amax)) return;
  pending_[i] = seen_[i] ? std::max(pending_[i], amax) : amax;
  seen_[i] = true;
}

std::array<double, kFp8Operands> QuantState::step_amax() const {
  std::array<double, kFp8Operands> out{};
  for (std::size_t i = 0; i < kFp8Operands; ++i) out[i] = seen_[i] ? pending_[i] : -1.0;
  return out;
}

void QuantState::set_step_amax(const std::array<double, kFp8Operands>& amax) {
  for (std::size_t i = 0; i < kFp8Operands; ++i) {
    seen_[i] = amax[i] >= 0;
    pending_[i] = seen_[i] ? amax[i] : 0.0;
  }
}

std::int64_t QuantState::end_step() {
  if (options_.recipe != QuantRecipe::delayed) return 0;
  const auto cols = static_cast<std::int64_t>(kFp8Operands);
  float* h = amax_history_.data_as<float>();
  float* scale = scale_.data_as<float>();
  std::int64_t changed = 0;
  for (std::size_t i = 0; i < kFp8Operands; ++i) {
    if (!seen_[i]) continue;
    const auto c = static_cast<std::int64_t>(i);
    for (std::int64_t r = options_.amax_history - 1; r > 0; --r) h[r * cols + c] = h[(r - 1) * cols + c];
    h[c] = static_cast<float>(pending_[i]);
    double amax = h[c];
    if (options_.reduction == AmaxReduction::max) {
      for (std::int64_t r = 1; r < options_.amax_history; ++r) amax = std::max(amax, static_cast<double>(h[r * cols + c]));
    }
    const Format f = static_cast<Fp8Operand>(i) == Fp8Operand::grad_output ? options_.backward_format() : options_.forward_format();
    const std::optional<float> s = per_tensor_scale(amax, f, options_.margin);  // none: keep the scale
    if (s && *s != scale[i]) {
      scale[i] = *s;
      ++changed;
    }
    seen_[i] = false;
  }
  amax_history_.storage()->bump_version();
  scale_.storage()->bump_version();
  return changed;
}

void QuantState::validate() const {
  if (rounding_calls_.defined()) {
    const double n = rounding_calls_.data_as<const double>()[0];
    if (!(n >= 0) || n > 0x1p40 || n != std::floor(n)) {
      throw std::invalid_argument("fp8 stochastic-rounding count " + std::to_string(n) + " is not a whole number in 0..2^40");
    }
  }
  if (options_.recipe != QuantRecipe::delayed) return;
  const float* h = amax_history_.data_as<const float>();
  for (std::int64_t i = 0; i < amax_history_.numel(); ++i) {
    if (!(h[i] >= 0) || !std::isfinite(h[i])) {
      throw std::invalid_argument("fp8 amax history holds " + std::to_string(h[i]) + " (amaxes are finite and at least 0)");
    }
  }
  const float* s = scale_.data_as<const float>();
  for (std::int64_t i = 0; i < scale_.numel(); ++i) {
    if (!(s[i] > 0) || !std::isfinite(s[i])) {
      throw std::invalid_argument("fp8 scale " + std::to_string(s[i]) + " is not positive and finite");
    }
  }
}

void set_fp8_storage(Fp8Storage storage) { g_storage = storage; }
Fp8Storage fp8_storage() { return g_storage; }

Fp8Counters fp8_counters() { return {g_quantized.load(), g_saturated.load(), g_underflowed.load(), g_scale_updates.load()}; }
void reset_fp8_counters() { g_quantized = g_saturated = g_underflowed = g_scale_updates = 0; }
void add_fp8_scale_updates(std::int64_t n) { g_scale_updates += n; }

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const std::shared_ptr<QuantState>& state) {
  detail::check_computable(x, "fp8_linear");
  detail::check_computable(w, "fp8_linear");
  if (!state) throw std::invalid_argument("fp8_linear: no FP8 state");
  if (w.dim() != 2 || x.dim() < 1 || x.size(-1) != w.size(1)) {
    throw std::invalid_argument("fp8_linear: x " + shape_str(x.shape()) + " and weight " + shape_str(w.shape()) +
                                " do not fit ([..., in] and [out, in])");
  }
  if (bias.defined() && bias.shape() != Shape{w.size(0)}) {
    throw std::invalid_argument("fp8_linear: bias must be [" + std::to_string(w.size(0)) + "], got " + shape_str(bias.shape()));
  }
  const CountingFor counting(state.get());
  const QuantOptions& o = state->options();
  const DType out_dtype = autocast_dtype().value_or(x.dtype());
  const bool training = grad_enabled();  // evaluation uses the delayed scales without changing the history
  const Tensor x2 = as_rows(x);
  const QuantSpec xs = o.spec(Fp8Operand::input), ws = o.spec(Fp8Operand::weight);
  Quantized xq, wq;
  Tensor y;
  {
    NoGradGuard no_grad;
    xq = quantize_operand(x2, xs, false, *state, Fp8Operand::input, training);
    wq = quantize_operand(w, ws, false, *state, Fp8Operand::weight, training);
    y = scaled_product(xq, viewed(wq, transpose(wq.values, 0, 1)), bias, out_dtype);
    Shape shape = x.shape();
    shape.back() = w.size(0);
    y = reshape(y, shape);
  }
  if (needs_grad({&x, &w, &bias})) {
    // Kept for backward (counted as activations): an operand's quantization where it serves the backward
    // product too, else the input as it came (the weight: the parameter itself).
    const auto kept = [](const Quantized& q) { return Kept{{save_for_backward(q.values), q.factor}, {}}; };
    Kept xk = xs.turns() && !o.hadamard_wgrad() ? kept(xq) : Kept{{}, save_for_backward(x2)};
    Kept wk = ws.turns() ? kept(wq) : Kept{{}, w};
    record(y, std::make_shared<Fp8LinearNode>(std::move(xk), std::move(wk), x.shape(), x.dtype(), w.dtype(), state), {&x, &w, &bias});
  }
  return y;
}

Tensor fp8_round_trip(const Tensor& x, Format f, std::int64_t br, std::int64_t bc, bool power_of_2) {
  if (x.dim() != 2) throw std::invalid_argument("fp8_round_trip: x must be [R, C], got " + shape_str(x.shape()));
  if (br < 1 || bc < 1) throw std::invalid_argument("fp8_round_trip: block sizes must be at least 1");
  const bool whole = br >= x.size(0) && bc >= x.size(1);
  if (!power_of_2 && !whole) throw std::invalid_argument("fp8_round_trip: f32 scales are one per tensor; blocks take powers of 2");
  NoGradGuard no_grad;
  const QuantSpec spec = power_of_2 ? QuantSpec{.element = f, .block_rows = br, .block_cols = bc, .scale = ScaleFormat::e8m0, .rule = ScaleRule::fit}
                                    : QuantSpec{.element = f, .block_rows = 0, .block_cols = 0, .scale = ScaleFormat::f32, .rule = ScaleRule::fit};
  Tensor q = Tensor::empty(x.shape(), DType::bf16, x.device());
  const detail::Fp8QuantizeStats st =
      detail::run_kernel_on<detail::kernel::BlockQuantize>(x, x, spec, 0, 0.0f, q, Tensor(), Tensor());
  // (Power-of-2 block scales come multiplied in; a tensor scale is applied here.)
  return st.tensor_scale == 1 ? cast(q, DType::f32) : mul(cast(q, DType::f32), st.tensor_scale);
}

}  // namespace mantissa
