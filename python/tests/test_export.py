"""`mantissa export --dtype mxfp8|mxfp4|nvfp4`: the weights of the layers a run trained in a microscaled
recipe, written as the recipe stores them (FP4 packed two a byte, E8M0 or E4M3 block scales, NVFP4's f32
scale per tensor) under ModelOpt's names, byte for byte what mantissa.quantize gives for the weights the
checkpoint holds; the other tensors in bf16; a run with no such layer refused."""
import subprocess

import numpy as np
import pytest

import mantissa
from conftest import read_safetensors

GPT = dict(n_layer=2, n_head=2, n_embd=64, block_size=32, batch_size=4, eval_batches=1)


@pytest.mark.parametrize("recipe", ["nvfp4", "mxfp8", "mxfp4"])
def test_a_microscaled_run_exports_its_layers_as_the_recipe_stores_them(cli, tmp_path, recipe):
    t = mantissa.Trainer("gpt", precision=recipe, steps=2, **GPT)
    t.run()
    state = t.state_dict()
    t.save(tmp_path / "c.safetensors")
    out = tmp_path / "q.safetensors"
    r = subprocess.run([cli, "export", str(tmp_path / "c.safetensors"), "--to", "pytorch", str(out), "--dtype", recipe],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tensors, meta = read_safetensors(out)
    assert meta["quantization"].startswith(recipe)
    levels = {layer: v if isinstance(v, str) else v["level"] for layer, v in t.plan["layers"].items()}
    fp8_layers = [layer for layer, level in levels.items() if level == recipe]  # quantized layers, by the recipe's word
    assert fp8_layers, t.precision_plan
    for layer in fp8_layers:
        q = mantissa.quantize(state[layer + ".weight"], recipe)
        codes = mantissa.pack_fp4(q.codes.ravel()).reshape(q.codes.shape[0], -1) if recipe != "mxfp8" else q.codes
        np.testing.assert_array_equal(tensors[layer + ".weight"], codes, err_msg=layer)
        np.testing.assert_array_equal(tensors[layer + ".weight_scale"], q.scales, err_msg=layer)
        if recipe == "nvfp4":
            assert tensors[layer + ".weight_scale_2"] == np.float32(q.tensor_scale)
        else:
            assert layer + ".weight_scale_2" not in tensors
    # The rest in bf16 (as its bits), the embeddings among them.
    assert tensors["wte.weight"].dtype == np.uint16
    rest = [name for name in tensors if not any(name.startswith(layer + ".weight") for layer in fp8_layers)]
    assert sorted(rest + [layer + ".weight" for layer in fp8_layers]) == sorted(state)


def test_a_run_without_a_quantized_layer_is_refused(cli, tmp_path):
    t = mantissa.Trainer("mlp", precision="bf16", steps=1, hidden=16, batch_size=8)
    t.save(tmp_path / "c.safetensors")
    r = subprocess.run([cli, "export", str(tmp_path / "c.safetensors"), "--to", "pytorch", str(tmp_path / "q.safetensors"), "--dtype",
                        "nvfp4"], capture_output=True, text=True)
    assert r.returncode == 2 and "trained no layer in fp8 or a microscaled recipe" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "q.safetensors").exists()
    r = subprocess.run([cli, "export", str(tmp_path / "c.safetensors"), "--to", "pytorch", str(tmp_path / "q.safetensors"), "--dtype",
                        "fp4"], capture_output=True, text=True)
    assert r.returncode == 2 and "'fp4' is not fp32, bf16, mxfp8, mxfp4, nvfp4 or nvfp4-torchao" in r.stderr, r.stderr
    # A recipe whose elements PyTorch has no dtype for is refused as such, not written in a made-up layout.
    r = subprocess.run([cli, "export", str(tmp_path / "c.safetensors"), "--to", "pytorch", str(tmp_path / "q.safetensors"), "--dtype",
                        "mxfp6"], capture_output=True, text=True)
    assert r.returncode == 2 and "PyTorch has no dtype for its e2m3 elements" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "q.safetensors").exists()
