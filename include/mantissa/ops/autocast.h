// Autocast: inside a region, each op runs in the precision that is safe for it (PyTorch AMP's rules):
//   low precision: matmul, linear, conv2d, attention (its two products; the softmax between them in f32)
//     and the fused head linear_cross_entropy (its product; the loss in f32): f32 inputs are cast to
//     bf16/f16, products accumulate in f32, outputs are low precision;
//   f32: softmax, log-softmax, layer norm, the losses, exp, log, pow, sqrt, the reductions sum, mean,
//     variance, and the LSTM cell's state: low-precision inputs are cast to f32, outputs are f32;
//   everything else runs in its inputs' dtype (batch norm too, as on CUDA: computed in f32 with f32
//     parameters and statistics, rounded once), and binary ops promote to the wider input.
// Regions nest (the innermost wins) and can switch autocast off inside. The policy (which op goes
// where) can be replaced per region and printed. Within the outermost region, each f32 parameter is
// cast to each low dtype once, however often it is used, and again after an in-place update (the casts
// are cached by parameter and dtype, with the storage version they were made from, until the region ends).
//
//   { Autocast bf16(DType::bf16);  loss = cross_entropy(model(x), y); }   // forward in the region
//   loss.backward();                                                     // gradients arrive in f32
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "mantissa/core/tensor.h"

namespace mantissa {

enum class AutocastOp : std::uint8_t {
  matmul, linear, conv2d, attention, linear_cross_entropy,
  softmax, log_softmax, layer_norm, batch_norm, cross_entropy, mse_loss,
  exp, log, pow, sqrt, sum, mean, variance, lstm_cell,
};
inline constexpr std::size_t kAutocastOps = 19;
std::string_view autocast_op_name(AutocastOp op);
// The op autocast_op_name() names; std::nullopt for any other name.
std::optional<AutocastOp> parse_autocast_op(std::string_view name);

enum class AutocastPrecision : std::uint8_t {
  low,    // cast f32 inputs to the region's dtype
  f32,    // cast low-precision inputs to f32
  input,  // leave the inputs as they are
};

class AutocastPolicy {
 public:
  // PyTorch AMP's lists (see the file comment).
  static AutocastPolicy defaults();
  // Every op in the region's low precision, the f32 list included (softmax, norms, losses, reductions,
  // the LSTM cell state): what running a whole model in fp16 does, for showing why the f32 list exists.
  static AutocastPolicy all_low();
  AutocastPrecision precision(AutocastOp op) const { return table_[static_cast<std::size_t>(op)]; }
  AutocastPolicy& set(AutocastOp op, AutocastPrecision p);
  // A table of every op and where it runs, for people.
  std::string str() const;

 private:
  std::array<AutocastPrecision, kAutocastOps> table_{};
};

class Autocast {
 public:
  // An autocast region in dtype (bf16 or f16); std::nullopt switches autocast off inside.
  explicit Autocast(std::optional<DType> dtype, AutocastPolicy policy = AutocastPolicy::defaults());
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

// The region in force on this thread: its dtype, or nothing when autocast is off.
std::optional<DType> autocast_dtype();
// How many parameter casts the current outermost region has cached.
std::size_t autocast_cache_size();

namespace detail {
// What an op front-end calls on each floating input: x cast as the policy of the region says.
Tensor autocast_input(const Tensor& x, AutocastOp op);
// The dtype autocast_input would give x, without casting: for kernels that read a low-precision input
// and compute in f32 anyway (norms), so that no f32 copy of the input is made; and for an op that
// decides by it and then casts with autocast_cast, asking the policy once.
DType autocast_input_dtype(const Tensor& x, AutocastOp op);
// The same for an input of dtype x.
DType autocast_input_dtype(DType x, AutocastOp op);
// x cast to `dtype` as autocast_input casts (parameters once per region, from its cache): the cast that
// autocast_input_dtype decided, without asking the policy again. x itself where dtype is its own.
Tensor autocast_cast(const Tensor& x, DType dtype);
// Whether a region is in force (outside backward) whose policy runs op in low precision: for ops whose
// output is f32 by their kernel's contract (the losses), which then round it into the region's dtype.
bool autocast_runs_low(AutocastOp op);
}  // namespace detail

}  // namespace mantissa
