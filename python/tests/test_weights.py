"""Weights in and out of a Python Trainer: state_dict() has PyTorch's names and is, value for value, what
`mantissa export` writes; load_state_dict() checks as PyTorch's strict load does and sets the master
copies too; a checkpoint saved from Python resumes bit-identically."""
import subprocess

import numpy as np
import pytest

import mantissa
from conftest import read_safetensors, seeded_rng

SMALL = dict(hidden=32, batch_size=16, lr=1e-3, seed=2)


def test_state_dict_is_what_export_writes_under_pytorchs_names(cli, tmp_path):
    t = mantissa.Trainer("cnn", precision="bf16", steps=3, batch_size=16, width=8)
    t.run()
    state = t.state_dict()
    t.save(tmp_path / "c.safetensors")
    subprocess.run([cli, "export", str(tmp_path / "c.safetensors"), "--to", "pytorch", str(tmp_path / "w.safetensors")],
                   check=True, capture_output=True)
    exported, _ = read_safetensors(tmp_path / "w.safetensors")
    assert sorted(state) == sorted(exported)
    assert "stage0.conv.weight" in state and "stage0.bn.running_mean" in state
    for name, value in state.items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, exported[name], err_msg=name)


def test_load_state_dict_round_trips_and_refuses_what_pytorch_refuses():
    t = mantissa.Trainer("mlp", steps=2, **SMALL)
    state = t.state_dict()
    rng = seeded_rng()
    new = {name: rng.standard_normal(v.shape).astype(np.float32) for name, v in state.items()}
    t.load_state_dict(new)
    for name, value in t.state_dict().items():
        np.testing.assert_array_equal(value, new[name])
    missing = dict(new)
    del missing["fc1.bias"]
    with pytest.raises(mantissa.CheckpointError, match="has no tensor 'fc1.bias'"):
        t.load_state_dict(missing)
    with pytest.raises(mantissa.CheckpointError, match="'fc0.weight' has shape"):
        t.load_state_dict({**new, "fc0.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(mantissa.CheckpointError, match="'fc9.weight' is no parameter"):
        t.load_state_dict({**new, "fc9.weight": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"state_dict\['fc1.weight'\]: not numbers"):
        t.load_state_dict({**new, "fc1.weight": "x"})
    with pytest.raises(mantissa.CheckpointError, match="'fc0.bias' holds NaN"):
        t.load_state_dict({**new, "fc0.bias": np.full(state["fc0.bias"].shape, np.nan, np.float32)})


def test_a_low_precision_model_gives_and_takes_its_f32_master_weights():
    t = mantissa.Trainer("mlp", precision="bf16", mode="low-precision-model", steps=2, **SMALL)
    t.run()
    state = t.state_dict()
    # Master weights after updates: not all on the bf16 grid (a bf16 value has 16 zero low bits).
    assert (state["fc0.weight"].view(np.uint32) & 0xFFFF).any()
    precise = {name: (v + np.float32(1e-4)).astype(np.float32) for name, v in state.items()}
    t.load_state_dict(precise)
    np.testing.assert_array_equal(t.state_dict()["fc0.weight"], precise["fc0.weight"])


def test_a_run_saved_from_python_resumes_bit_identically(tmp_path):
    whole = mantissa.Trainer("mlp", precision="fp16", steps=8, **SMALL).run()
    first = mantissa.Trainer("mlp", precision="fp16", steps=8, **SMALL)
    for _ in range(5):
        first.step()
    first.save(tmp_path / "at5.safetensors")
    rest = mantissa.Trainer("mlp", precision="fp16", steps=8, resume_from=tmp_path / "at5.safetensors", **SMALL).run()
    assert [r["step"] for r in rest["steps"]] == [6, 7, 8]
    assert [r["loss"] for r in rest["steps"]] == [r["loss"] for r in whole["steps"][5:]]
    assert rest["final_val_loss"] == whole["final_val_loss"]
