// What the trainer trains: a batch in, logits (and a loss) out. One interface for every model, so the
// training step has no per-model branches; ModuleModel adapts any nn::Module whose forward takes an
// input tensor (an MLP, a CNN, a user's own) or token ids (the GPT).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "mantissa/nn/module.h"
#include "mantissa/ops/ops.h"

namespace mantissa::train {

// One batch of examples: an input tensor (images, features) or token ids, and one class target per row
// of the model's logits (per image, or per token).
struct Batch {
  Tensor inputs;                         // [N, ...]; undefined for token models
  std::vector<std::int64_t> tokens;      // [rows * length] token ids; empty for tensor inputs
  std::int64_t rows = 0, length = 0;     // token batches: sequences and their length
  std::vector<std::int64_t> targets;     // classes, one per row of the logits
  // Token batches cut from parallel streams, one segment after another (truncated backpropagation
  // through time): which streams (0 training, 1 evaluation; -1: independent windows), and whether this
  // segment starts them (a recurrent model then starts from a zero state, else from the last segment's).
  int stream = -1;
  bool stream_start = true;
  // Examples in the batch as throughput counts them: images, or tokens.
  std::int64_t items() const { return tokens.empty() ? static_cast<std::int64_t>(targets.size()) : rows * length; }
};

class Model {
 public:
  virtual ~Model() = default;
  // The module whose parameters are trained, converted and checkpointed.
  virtual nn::Module& module() = 0;
  // Logits [targets, classes] of a batch.
  virtual Tensor forward(const Batch& batch) = 0;
  // The training loss: the mean cross-entropy of forward() against the targets, unless overridden.
  virtual Tensor loss(const Batch& batch) { return cross_entropy(forward(batch), batch.targets); }
  // The summed cross-entropy, as evaluation adds it up over batches (the same override rule).
  virtual Tensor loss_sum(const Batch& batch) { return cross_entropy(forward(batch), batch.targets, Reduction::sum); }
};

// A Model over a module M (held by value, built from the arguments): M::forward(const Tensor&) for
// tensor inputs, or M::forward(span of ids, rows, length) for token inputs.
template <class M>
class ModuleModel final : public Model {
 public:
  template <class... Args>
  explicit ModuleModel(Args&&... args) : m_(std::forward<Args>(args)...) {}
  nn::Module& module() override { return m_; }
  M& get() { return m_; }
  Tensor forward(const Batch& b) override {
    if constexpr (requires { m_.forward(b.inputs); }) {
      return m_.forward(b.inputs);
    } else {
      return m_.forward(b.tokens, b.rows, b.length);
    }
  }
  // A module with a loss of its own (the GPT's fused classifier and cross-entropy) computes it.
  Tensor loss(const Batch& b) override {
    if constexpr (requires { m_.loss(b.tokens, b.rows, b.length, b.targets, Reduction::mean); }) {
      return m_.loss(b.tokens, b.rows, b.length, b.targets, Reduction::mean);
    } else {
      return Model::loss(b);
    }
  }
  Tensor loss_sum(const Batch& b) override {
    if constexpr (requires { m_.loss(b.tokens, b.rows, b.length, b.targets, Reduction::sum); }) {
      return m_.loss(b.tokens, b.rows, b.length, b.targets, Reduction::sum);
    } else {
      return Model::loss_sum(b);
    }
  }

 private:
  M m_;
};

// A Model over a recurrent module M (M::forward(span of ids, rows, length, M::State&)) that carries each
// stream's state from one segment to the next: zero at a stream's start, at an independent window, and
// after a resume (the state is not checkpointed: a resumed run restarts it at the next segment).
template <class M>
class RecurrentModel final : public Model {
 public:
  template <class... Args>
  explicit RecurrentModel(Args&&... args) : m_(std::forward<Args>(args)...) {}
  nn::Module& module() override { return m_; }
  M& get() { return m_; }
  Tensor forward(const Batch& b) override {
    if (b.stream < 0) {
      typename M::State fresh;
      return m_.forward(b.tokens, b.rows, b.length, fresh);
    }
    typename M::State& s = states_[b.stream];
    if (b.stream_start) s = {};
    return m_.forward(b.tokens, b.rows, b.length, s);
  }

 private:
  M m_;
  std::map<int, typename M::State> states_;
};

}  // namespace mantissa::train
