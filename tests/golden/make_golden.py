#!/usr/bin/env python3
"""Golden cases computed by PyTorch, in float64, for tests/golden/golden_test.cpp: the forward and backward
of a linear layer, layer norm, causal attention and cross-entropy (with label smoothing and an ignored row),
and three AdamW steps under GradScaler with an overflow in the middle. Inputs and results are written to
tests/golden/<case>.safetensors (F64 tensors; settings in the metadata), so the test needs no PyTorch. The
files are committed; run this again (with torch installed) only to change the cases.

  python3 tests/golden/make_golden.py
"""
import json
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, tensors, metadata=None):
    """A safetensors file of float64 tensors (written by hand: no safetensors package needed)."""
    header, blobs, offset = {}, b"", 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for key, t in tensors.items():
        data = t.detach().to(torch.float64).contiguous().numpy().tobytes()
        header[key] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs += data
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(HERE, name + ".safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blobs)


def leaf(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale).requires_grad_()


def grads_of(out, inputs):
    g = torch.randn_like(out)
    out.backward(g)
    return g, [x.grad for x in inputs]


def main():
    torch.manual_seed(20261201)

    x, w, b = leaf(4, 6), leaf(5, 6), leaf(5)
    y = torch.nn.functional.linear(x, w, b)
    gy, (gx, gw, gb) = grads_of(y, [x, w, b])
    write("linear", {"x": x, "w": w, "b": b, "y": y, "gy": gy, "gx": gx, "gw": gw, "gb": gb})

    x, gamma, beta = leaf(3, 8, scale=3.0), leaf(8), leaf(8)
    y = torch.nn.functional.layer_norm(x, (8,), gamma, beta, eps=1e-5)
    gy, (gx, ggamma, gbeta) = grads_of(y, [x, gamma, beta])
    write("layer_norm", {"x": x, "gamma": gamma, "beta": beta, "y": y, "gy": gy, "gx": gx, "ggamma": ggamma,
                         "gbeta": gbeta}, {"eps": "1e-5"})

    q, k, v = leaf(2, 2, 5, 4), leaf(2, 2, 5, 4), leaf(2, 2, 5, 3)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    gy, (gq, gk, gv) = grads_of(y, [q, k, v])
    write("attention", {"q": q, "k": k, "v": v, "y": y, "gy": gy, "gq": gq, "gk": gk, "gv": gv}, {"causal": "1"})

    logits = leaf(6, 7, scale=2.0)
    targets = [3, 0, 6, -100, 2, 5]
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(targets), ignore_index=-100, label_smoothing=0.1)
    loss.backward()
    write("cross_entropy", {"logits": logits, "loss": loss.reshape(1), "glogits": logits.grad},
          {"targets": json.dumps(targets), "ignore_index": "-100", "label_smoothing": "0.1"})

    # AdamW under GradScaler: gradients of loss = sum(p * c_t) are c_t; step 2's has an inf, so that step is
    # skipped and the scale halves; growth after 2 good steps in a row.
    p = torch.randn(10, dtype=torch.float64).requires_grad_()
    p0 = p.detach().clone()
    opt = torch.optim.AdamW([p], lr=1e-2, weight_decay=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    cs, scales = [], []
    for t in range(4):
        c = torch.randn(10, dtype=torch.float64)
        if t == 1:
            c[3] = float("inf")
        cs.append(c)
        opt.zero_grad()
        scaler.scale((p * c).sum()).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    write("adamw_gradscaler", {"p0": p0, "c": torch.stack(cs), "p": p, "scales": torch.tensor(scales)},
          {"lr": "1e-2", "weight_decay": "0.1", "init_scale": "1024", "growth_interval": "2"})


if __name__ == "__main__":
    main()
