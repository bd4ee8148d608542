// The models mantissa trains: an MLP, a residual CNN with batch norm for 28x28 images, a segmenter, a
// GPT (decoder-only transformer with pre-LayerNorm blocks, causal self-attention, GELU MLP and a head tied
// to the token embedding) and a stacked LSTM language model (the mixed-precision paper's recurrent case).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "mantissa/nn/layers.h"

namespace mantissa::nn {

struct MlpConfig {
  std::int64_t in = 784, hidden = 256, layers = 2, classes = 10;  // `layers` hidden layers
  std::uint64_t seed = 0;
};

class Mlp : public Module {
 public:
  explicit Mlp(const MlpConfig& c);
  // x [N, ...] (flattened to [N, in]) -> logits [N, classes]
  Tensor forward(const Tensor& x) const;

 private:
  std::vector<std::shared_ptr<Linear>> layers_;
};

struct CnnConfig {
  std::int64_t in_channels = 1, width = 32, classes = 10;
  std::uint64_t seed = 0;
};

// Two stages of conv-BN-ReLU and a residual block (conv-BN-ReLU-conv-BN plus the input), each followed
// by 2x2 max pooling; global average pooling and a linear head. For 28x28 inputs (Fashion-MNIST).
class Cnn : public Module {
 public:
  explicit Cnn(const CnnConfig& c);
  Tensor forward(const Tensor& x) const;  // [N, C, H, W] -> logits [N, classes]

 private:
  struct Stage {
    std::shared_ptr<Conv2d> conv, res1, res2;
    std::shared_ptr<BatchNorm2d> bn, bn1, bn2;
  };
  std::vector<Stage> stages_;
  std::shared_ptr<Linear> head_;
};

// Per-pixel classification (semantic segmentation): `layers` 3x3 convolutions of `width` channels with
// ReLU at full resolution, dilated 1, 2, 4, ... so that each pixel sees the whole object, then a 1x1 convolution to the classes, initialized normal(0, head_stddev) as
// detection heads are (RetinaNet's 0.01). Its loss is a mean over every pixel of the batch, so its
// gradients are small: with fp16 and no loss scaling most of them flush to zero (the mixed-precision
// paper's SSD case).
struct SegmenterConfig {
  std::int64_t in_channels = 1, width = 16, layers = 4, classes = 11;
  double head_stddev = 0.01;
  std::uint64_t seed = 0;
};

class Segmenter : public Module {
 public:
  explicit Segmenter(const SegmenterConfig& c);
  Tensor forward(const Tensor& x) const;  // [N, C, H, W] -> logits [N * H * W, classes], pixels in row-major order

 private:
  std::vector<std::shared_ptr<Conv2d>> convs_;
  std::shared_ptr<Conv2d> head_;
};

struct GptConfig {
  std::int64_t n_layer = 4, n_head = 4, n_embd = 256, block_size = 128, vocab = 256;
  std::uint64_t seed = 0;
  bool gelu_tanh = false;  // the MLP's GELU in GPT-2's tanh form (gelu_tanh) instead of the exact erf form
};

class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& c);
  // ids [batch, T] (T <= block_size) -> logits [batch * T, vocab]
  Tensor forward(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t) const;
  // The mean (or summed) cross-entropy of forward()'s logits against targets [batch * T], through
  // linear_cross_entropy: on a GPU the logits' gradient is made with the loss and kept (no second
  // classifier product in backward), and in evaluation the [batch * T, vocab] logits never exist whole;
  // on the CPU the same ops as cross_entropy(forward(...)).
  Tensor loss(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t, std::span<const std::int64_t> targets,
              Reduction reduction = Reduction::mean) const;
  const GptConfig& config() const { return c_; }

 private:
  // The final layer norm's output [batch * T, n_embd], the head's input.
  Tensor hidden(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t) const;
  struct Block {
    std::shared_ptr<LayerNorm> ln1, ln2;
    std::shared_ptr<Linear> qkv, proj, fc, fc_proj;
  };
  GptConfig c_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::vector<Block> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
};

// A byte-level language model: an embedding, `layers` LSTM layers of `hidden` units (each step: the
// input's and the hidden state's products, two linear layers, then the fused cell), a linear head.
struct LstmConfig {
  std::int64_t vocab = 256, embd = 64, hidden = 256, layers = 2;
  std::uint64_t seed = 0;
};

class LstmLm : public Module {
 public:
  // Each layer's h and c [batch, hidden], carried from one segment of a stream to the next (truncated
  // backpropagation through time); empty: zeros.
  struct State {
    std::vector<Tensor> h, c;
  };
  explicit LstmLm(const LstmConfig& c);
  // ids [batch, t] -> logits [batch * t, vocab]; starts from `state` and leaves the final one there,
  // detached (gradients stop at the segment's start).
  Tensor forward(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t, State& state) const;
  const LstmConfig& config() const { return c_; }

 private:
  struct Layer {
    std::string path;                // "layers.L": the cell's ops are named after it
    std::shared_ptr<Linear> ih, hh;  // [4 hidden, in] with the bias; [4 hidden, hidden] without
  };
  LstmConfig c_;
  std::shared_ptr<Embedding> embed_;
  std::vector<Layer> layers_;
  std::shared_ptr<Linear> head_;
};

}  // namespace mantissa::nn
