"""mantissa's three benchmark models in plain PyTorch: the same layers, shapes, parameter names and
initialisation scheme as src/nn/models.cpp, so a step here and a step in `mantissa bench --model`
compute the same thing (bench/pytorch/bench.py checks it on the first step)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {
    "gpt-small": dict(n_layer=4, n_head=4, n_embd=256, block_size=128, batch_size=16),
    "gpt-wide": dict(n_layer=4, n_head=12, n_embd=768, block_size=256, batch_size=8),
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, batch_size=16, vocab=50304),
    "cnn": dict(width=32, batch_size=256),
}


def _uniform_fan_in(t, fan_in):
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(t, -bound, bound)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, gelu="none"):
        super().__init__()
        self.n_head = n_head
        self.gelu = gelu
        self.ln1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.attn.proj = nn.Linear(n_embd, n_embd)
        self.ln2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.shape
        h, d = self.n_head, c // self.n_head
        qkv = self.attn.qkv(self.ln1(x)).view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        else:  # torch before 2.0 (Debian 12's python3-torch is 1.13): the same product, written out
            att = (qkv[0] @ qkv[1].transpose(-2, -1)) / math.sqrt(d)
            att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = att.softmax(-1) @ qkv[2]
        x = x + self.attn.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x)), approximate=self.gelu))


class Gpt(nn.Module):
    """Pre-LayerNorm decoder, GELU MLP (erf, or GPT-2's tanh form with gelu="tanh"), head tied to the token embedding; GPT-2 initialisation
    (normal 0.02, residual projections 0.02 / sqrt(2 n_layer), zero biases)."""

    def __init__(self, n_layer, n_head, n_embd, block_size, vocab=256, gelu="none", **_):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head, gelu) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)
        proj_std = 0.02 / math.sqrt(2 * n_layer)
        for name, p in self.named_parameters():
            if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
                nn.init.ones_(p)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, proj_std if name.endswith("proj.weight") else 0.02)

    def forward(self, ids):
        b, t = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x).reshape(b * t, -1) @ self.wte.weight.t()


class Stage(nn.Module):
    def __init__(self, cin, w):
        super().__init__()
        self.conv = nn.Conv2d(cin, w, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(w)
        self.res1 = nn.Conv2d(w, w, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.res2 = nn.Conv2d(w, w, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(w)

    def forward(self, h):
        h = F.relu(self.bn(self.conv(h)))
        r = self.bn2(self.res2(F.relu(self.bn1(self.res1(h)))))
        return F.max_pool2d(F.relu(h + r), 2, 2)


class Cnn(nn.Module):
    """Two stages of conv-BN-ReLU and a residual block, each followed by 2x2 max pooling; global average
    pooling and a linear head. Convolutions and the head: uniform(+-1/sqrt(fan_in))."""

    def __init__(self, width=32, classes=10, in_channels=1, **_):
        super().__init__()
        self.stage0 = Stage(in_channels, width)
        self.stage1 = Stage(width, 2 * width)
        self.head = nn.Linear(2 * width, classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                _uniform_fan_in(m.weight, m.weight[0].numel())
                if m.bias is not None:
                    _uniform_fan_in(m.bias, m.weight[0].numel())

    def forward(self, x):
        h = self.stage1(self.stage0(x))
        return self.head(h.mean(dim=(2, 3)))


def make(model, gelu="none", **shape):
    return Cnn(**shape) if model == "cnn" else Gpt(**shape, gelu=gelu)
