// MLP, CNN and GPT: their layers and forward passes.
#include "mantissa/nn/models.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace mantissa::nn {

Mlp::Mlp(const MlpConfig& c) {
  std::int64_t in = c.in;
  for (std::int64_t i = 0; i <= c.layers; ++i) {
    const std::int64_t out = i == c.layers ? c.classes : c.hidden;
    layers_.push_back(register_module("fc" + std::to_string(i), std::make_shared<Linear>(in, out, c.seed + 10 * i)));
    in = out;
  }
}

Tensor Mlp::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  Tensor h = reshape(x, {x.size(0), -1});
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i]->forward(h);
    if (i + 1 < layers_.size()) h = relu(h);
  }
  return h;
}

Cnn::Cnn(const CnnConfig& c) {
  std::int64_t in = c.in_channels;
  std::uint64_t seed = c.seed;
  for (int s = 0; s < 2; ++s) {
    const std::int64_t w = c.width << s;
    const std::string n = "stage" + std::to_string(s) + ".";
    Stage st;
    st.conv = register_module(n + "conv", std::make_shared<Conv2d>(in, w, 3, seed += 10, 1, 1, false));
    st.bn = register_module(n + "bn", std::make_shared<BatchNorm2d>(w));
    st.res1 = register_module(n + "res1", std::make_shared<Conv2d>(w, w, 3, seed += 10, 1, 1, false));
    st.bn1 = register_module(n + "bn1", std::make_shared<BatchNorm2d>(w));
    st.res2 = register_module(n + "res2", std::make_shared<Conv2d>(w, w, 3, seed += 10, 1, 1, false));
    st.bn2 = register_module(n + "bn2", std::make_shared<BatchNorm2d>(w));
    stages_.push_back(st);
    in = w;
  }
  head_ = register_module("head", std::make_shared<Linear>(in, c.classes, seed += 10));
}

Tensor Cnn::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  Tensor h = x;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    const LayerScope part = part_scope("stage" + std::to_string(i));  // the activations, the residual sum, the pool
    h = relu(s.bn->forward(s.conv->forward(h)));
    const Tensor r = s.bn2->forward(s.res2->forward(relu(s.bn1->forward(s.res1->forward(h)))));
    h = max_pool2d(relu(add(h, r)), 2, 2);
  }
  return head_->forward(mean(h, {2, 3}));
}

Gpt::Gpt(const GptConfig& c) : c_(c) {
  if (c.n_embd % c.n_head != 0) throw std::invalid_argument("gpt: n_embd must be a multiple of n_head");
  constexpr double kInit = 0.02;  // GPT-2's; residual projections scaled by 1 / sqrt(2 n_layer)
  const double proj = kInit / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  std::uint64_t seed = c.seed;
  wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab, c.n_embd, seed += 10, kInit));
  wpe_ = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, seed += 10, kInit));
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    const std::string n = "blocks." + std::to_string(i) + ".";
    Block b;
    b.ln1 = register_module(n + "ln1", std::make_shared<LayerNorm>(c.n_embd));
    b.qkv = register_module(n + "attn.qkv", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, seed += 10, true, kInit));
    b.proj = register_module(n + "attn.proj", std::make_shared<Linear>(c.n_embd, c.n_embd, seed += 10, true, proj));
    b.ln2 = register_module(n + "ln2", std::make_shared<LayerNorm>(c.n_embd));
    b.fc = register_module(n + "mlp.fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, seed += 10, true, kInit));
    b.fc_proj = register_module(n + "mlp.proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, seed += 10, true, proj));
    blocks_.push_back(b);
  }
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd));
}

Segmenter::Segmenter(const SegmenterConfig& c) {
  if (c.layers < 1) throw std::invalid_argument("segmenter: needs at least one convolution");
  std::uint64_t seed = c.seed;
  std::int64_t in = c.in_channels;
  // Dilations 1, 2, 4, 8, ...: each pixel's prediction sees 2^(layers + 1) - 1 pixels across (31 with 4
  // layers: all of a 28x28 image), enough to tell the garment from its shape.
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::int64_t d = std::int64_t{1} << i;
    convs_.push_back(register_module("conv" + std::to_string(i), std::make_shared<Conv2d>(in, c.width, 3, seed += 10, 1, d, true, 0, d)));
    in = c.width;
  }
  head_ = register_module("head", std::make_shared<Conv2d>(in, c.classes, 1, seed += 10, 1, 0, true, c.head_stddev));
}

Tensor Segmenter::forward(const Tensor& x) const {
  const auto scope = forward_scope();
  Tensor h = x;
  for (const auto& conv : convs_) h = relu(conv->forward(h));
  const Tensor logits = head_->forward(h);  // [N, classes, H, W]
  return reshape(contiguous(permute(logits, {0, 2, 3, 1})), {logits.size(0) * logits.size(2) * logits.size(3), logits.size(1)});
}

Tensor Gpt::forward(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t) const {
  if (t > c_.block_size) {
    throw std::invalid_argument("gpt: " + std::to_string(t) + " tokens exceed the block size " + std::to_string(c_.block_size));
  }
  const auto scope = forward_scope();
  const std::int64_t c = c_.n_embd, h = c_.n_head;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) positions[static_cast<std::size_t>(i)] = i;
  Tensor x = add(wte_->forward(ids, {batch, t}), wpe_->forward(positions, {t}));
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const LayerScope part = part_scope("blocks." + std::to_string(i));  // attention, GELU, the residual sums
    // Causal self-attention on the fused q, k, v projection, heads read and written in place.
    x = add(x, b.proj->forward(self_attention(b.qkv->forward(b.ln1->forward(x)), h)));
    x = add(x, b.fc_proj->forward(gelu(b.fc->forward(b.ln2->forward(x)))));
  }
  // The head is the token embedding, transposed (weight tying).
  return matmul(reshape(ln_f_->forward(x), {batch * t, c}), transpose(wte_->weight(), 0, 1));
}

}  // namespace mantissa::nn
