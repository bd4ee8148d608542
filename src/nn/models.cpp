// MLP, CNN and GPT: their layers and forward passes.
#include "mantissa/nn/models.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>

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
  const auto scope = forward_scope();
  // The head is the token embedding, transposed (weight tying).
  return matmul(hidden(ids, batch, t), transpose(wte_->weight(), 0, 1));
}

Tensor Gpt::loss(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t,
                 std::span<const std::int64_t> targets, Reduction reduction) const {
  const auto scope = forward_scope();
  return linear_cross_entropy(hidden(ids, batch, t), wte_->weight(), targets, reduction);
}

Tensor Gpt::hidden(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t) const {
  if (t > c_.block_size) {
    throw std::invalid_argument("gpt: " + std::to_string(t) + " tokens exceed the block size " + std::to_string(c_.block_size));
  }
  const std::int64_t c = c_.n_embd, h = c_.n_head;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(t));
  for (std::int64_t i = 0; i < t; ++i) positions[static_cast<std::size_t>(i)] = i;
  // The residual stream is x + r, r the branch a block's attention or MLP made and the next layer norm adds
  // in its own pass (LayerNorm::forward_for with r). The layer norms' outputs are made in the dtype the
  // products after them read.
  Tensor x = add(wte_->forward(ids, {batch, t}), wpe_->forward(positions, {t}));
  Tensor r;
  const auto norm = [&x, &r](const LayerNorm& ln, const std::function<DType(DType)>& reads) {
    if (!r.defined()) return ln.forward_for(x, reads);
    Tensor y;
    std::tie(x, y) = ln.forward_for(x, r, reads);
    r = Tensor();
    return y;
  };
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const Block& b = blocks_[i];
    const LayerScope part = part_scope("blocks." + std::to_string(i));  // attention, GELU, the residual sums
    // Causal self-attention on the fused q, k, v projection, heads read and written in place.
    const Tensor qkv = b.qkv->forward(norm(*b.ln1, [&b](DType d) { return b.qkv->reads(d); }));
    r = b.proj->forward(self_attention(qkv, h));
    const Tensor ln2 = norm(*b.ln2, [&b](DType d) { return b.fc->reads(d); });
    r = c_.gelu_tanh ? b.fc->forward_gelu_tanh_into(*b.fc_proj, ln2) : b.fc_proj->forward(gelu(b.fc->forward(ln2)));
  }
  // The head (linear_cross_entropy in training, a matmul for logits) reads its input as the former.
  return reshape(norm(*ln_f_, linear_cross_entropy_input_dtype), {batch * t, c});
}

LstmLm::LstmLm(const LstmConfig& c) : c_(c) {
  if (c.vocab < 1 || c.embd < 1 || c.hidden < 1 || c.layers < 1) {
    throw std::invalid_argument("lstm: vocab, embedding, hidden size and layers must be at least 1");
  }
  std::uint64_t seed = c.seed;
  // PyTorch's nn.LSTM draws every weight and bias uniform within 1/sqrt(hidden); Linear's default
  // (1/sqrt(fan in)) is that for the recurrent weights and close to it for the first layer's input ones.
  embed_ = register_module("embed", std::make_shared<Embedding>(c.vocab, c.embd, seed++, 1.0));
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string name = "layers." + std::to_string(l);
    Layer layer;
    layer.path = name;
    layer.ih = register_module(name + ".ih", std::make_shared<Linear>(l == 0 ? c.embd : c.hidden, 4 * c.hidden, seed++));
    layer.hh = register_module(name + ".hh", std::make_shared<Linear>(c.hidden, 4 * c.hidden, seed++, false));
    layers_.push_back(layer);
  }
  head_ = register_module("head", std::make_shared<Linear>(c.hidden, c.vocab, seed++));
}

Tensor LstmLm::forward(std::span<const std::int64_t> ids, std::int64_t batch, std::int64_t t, State& state) const {
  if (static_cast<std::int64_t>(ids.size()) != batch * t || t < 1) {
    throw std::invalid_argument("lstm: " + std::to_string(ids.size()) + " ids for " + std::to_string(batch) + " x " +
                                std::to_string(t));
  }
  const auto scope = forward_scope();
  const std::int64_t hidden = c_.hidden;
  const auto layers = static_cast<std::size_t>(c_.layers);
  if (state.h.size() != layers || state.h[0].size(0) != batch) {
    state.h.assign(layers, Tensor::zeros({batch, hidden}, DType::f32));
    state.c.assign(layers, Tensor::zeros({batch, hidden}, DType::f32));
  }
  std::vector<Tensor> h = state.h, c = state.c, outputs;
  std::vector<std::int64_t> column(static_cast<std::size_t>(batch));
  for (std::int64_t step = 0; step < t; ++step) {
    for (std::int64_t b = 0; b < batch; ++b) column[static_cast<std::size_t>(b)] = ids[static_cast<std::size_t>(b * t + step)];
    Tensor x = embed_->forward(column, {batch});
    for (std::size_t l = 0; l < layers; ++l) {
      const LayerScope part = part_scope(layers_[l].path);  // the cell
      const Tensor hc = lstm_cell(layers_[l].ih->forward(x), layers_[l].hh->forward(h[l]), c[l]);
      h[l] = reshape(slice(hc, 0, 0, 1), {batch, hidden});
      c[l] = reshape(slice(hc, 0, 1, 2), {batch, hidden});
      x = h[l];
    }
    outputs.push_back(reshape(x, {batch, 1, hidden}));
  }
  for (std::size_t l = 0; l < layers; ++l) {
    state.h[l] = h[l].detach();
    state.c[l] = c[l].detach();
  }
  return head_->forward(reshape(concat(outputs, 1), {batch * t, hidden}));
}

}  // namespace mantissa::nn
