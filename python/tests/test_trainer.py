"""The Trainer from Python: the issue's first line (the CNN on Fashion-MNIST in bf16 for 50 steps),
the same run as the command step for step, data from NumPy arrays and text, telemetry, the command's
flags as keywords with its errors, and Ctrl-C stopping a run with a checkpoint."""
import json
import os
import signal
import subprocess

import numpy as np
import pytest

import mantissa
from conftest import seeded_rng


def test_the_cnn_trains_on_fashion_mnist_in_bf16_for_50_steps():
    trainer = mantissa.Trainer("cnn", precision="bf16", steps=50, batch_size=64, lr=3e-3, eval_every=50)
    assert trainer.precision_plan.startswith("bf16 in 7 of 7 layers")
    assert trainer.normalization == {"mean": 0.286, "std": 0.353}
    seen = []
    result = trainer.run(on_step=seen.append)
    assert [r["step"] for r in seen] == list(range(1, 51))
    assert all(r["loss_scale"] == 1 and not r["skipped"] for r in seen)  # bf16: no scaling needed
    first, last = np.mean([r["loss"] for r in seen[:5]]), np.mean([r["loss"] for r in seen[-5:]])
    assert last < 0.6 * first, (first, last)
    assert result["final_val_accuracy"] > 0.6  # chance is 0.1
    assert result["throughput_unit"] == "images/s" and result["skipped_steps"] == 0


def test_a_run_from_python_is_the_commands_run_step_for_step(cli, tmp_path):
    flags = dict(precision="fp16", steps=6, batch_size=32, lr=1e-3, seed=5, hidden=64, eval_every=3)
    metrics = tmp_path / "m.jsonl"
    words = ["--model", "mlp", "--metrics", str(metrics)]
    for k, v in flags.items():
        words += ["--" + k.replace("_", "-"), str(v)]
    subprocess.run([cli, "train", *words], check=True, capture_output=True)
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    theirs = [r for r in lines if "loss" in r]
    their_evals = [r for r in lines if "val_loss" in r]
    result = mantissa.Trainer("mlp", **flags).run()
    assert [r["loss"] for r in result["steps"]] == [r["loss"] for r in theirs]
    assert [r["loss_scale"] for r in result["steps"]] == [r["loss_scale"] for r in theirs]
    assert [r["val_loss"] for r in result["evals"]] == [r["val_loss"] for r in their_evals]


def separable_images(rng, n, classes=4, side=12):
    """Noise images whose class is which quadrant is brighter: learnable in a few steps."""
    labels = rng.integers(0, classes, n)
    images = rng.integers(0, 100, (n, side, side))
    half = side // 2
    for k in range(classes):
        r, c = divmod(k, 2)
        images[labels == k, r * half:(r + 1) * half, c * half:(c + 1) * half] += 150
    return images.astype(np.uint8), labels


def test_trains_on_numpy_arrays_normalized_by_their_own_statistics():
    rng = seeded_rng()
    train_x, train_y = separable_images(rng, 2048)
    test_x, test_y = separable_images(rng, 512)
    trainer = mantissa.Trainer("mlp", train_images=train_x, train_labels=train_y, test_images=test_x,
                               test_labels=test_y, precision="bf16", steps=40, batch_size=64, lr=3e-3, hidden=64)
    pixels = train_x / 255.0
    assert trainer.normalization == {"mean": round(pixels.mean(), 4), "std": round(pixels.std(), 4)}
    assert trainer.data_summary.startswith("arrays: 2048 training images of 1x12x12, 512 test, 4 classes")
    result = trainer.run()
    assert result["final_val_accuracy"] > 0.9


def test_image_files_by_path_are_the_commands_flags(tmp_path):
    rng = seeded_rng()
    (tx, ty), (vx, vy) = separable_images(rng, 256), separable_images(rng, 64)
    paths = [tmp_path / f"{n}.npy" for n in ("a", "b", "c", "d")]
    for path, array in zip(paths, (tx, ty, vx, vy)):
        np.save(path, array)
    t = mantissa.Trainer("mlp", train_images=paths[0], train_labels=str(paths[1]), test_images=paths[2], test_labels=paths[3],
                         steps=2, hidden=16, normalize="0.5,0.25")
    assert t.normalization == {"mean": 0.5, "std": 0.25}
    assert t.data_summary.startswith(f"{paths[0]}: 256 training images of 1x12x12, 64 test, 4 classes")


def test_bad_arrays_get_one_clear_error():
    rng = seeded_rng()
    x, y = separable_images(rng, 64)
    with pytest.raises(TypeError, match="train_images: uint8 pixels"):
        mantissa.Trainer("mlp", train_images=x.astype(np.float32), train_labels=y, test_images=x, test_labels=y)
    with pytest.raises(ValueError, match="train_labels: label 300 at index 0 is not 0..255"):
        mantissa.Trainer("mlp", train_images=x, train_labels=np.full(64, 300), test_images=x, test_labels=y)
    with pytest.raises(mantissa.DataError, match="63 labels for 64 images"):
        mantissa.Trainer("mlp", train_images=x, train_labels=y[:63], test_images=x, test_labels=y)
    with pytest.raises(ValueError, match="give all four"):
        mantissa.Trainer("mlp", train_images=x, train_labels=y)
    with pytest.raises(ValueError, match="trains on text, not images"):
        mantissa.Trainer("gpt", train_images=x, train_labels=y, test_images=x, test_labels=y)


def test_trains_a_text_model_on_a_string_and_refuses_binary_bytes():
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(400))
    trainer = mantissa.Trainer("gpt", text=text, precision="bf16", steps=8, batch_size=8, block_size=32, n_layer=1,
                               n_embd=64, n_head=2, lr=3e-3, eval_batches=2)
    result = trainer.run()
    assert result["throughput_unit"] == "tokens/s"
    assert result["steps"][-1]["loss"] < result["steps"][0]["loss"]
    with pytest.raises(mantissa.DataError, match="binary data, not text"):
        mantissa.Trainer("gpt", text=bytes(range(256)) * 8)


def test_keywords_are_the_librarys_settings_each_checked_by_its_kind():
    settings = mantissa._mantissa._run_options()
    assert {"steps", "precision", "fp32_layers", "overlap", "telemetry_every"} <= set(settings)
    wrong = {"integer": "1", "real": "x", "flag": 1, "on_off": "on", "text": 1, "list": 1}
    for key, kind in settings.items():
        if key in ("model", "train_images", "train_labels", "test_images", "test_labels"):
            continue  # Trainer's own arguments, checked by it
        with pytest.raises(TypeError, match=f"^{key}: "):
            mantissa.Trainer("mlp", **{key: wrong[kind]})


def test_numpy_scalars_are_numbers_and_telemetry_settings_need_telemetry():
    import numpy as np
    t = mantissa.Trainer("mlp", steps=np.int64(2), lr=np.float32(0.002), batch_size=16, hidden=16, quiet=True)
    assert t.steps == 2
    with pytest.raises(ValueError, match=r"telemetry_every applies only with telemetry=True"):
        mantissa.Trainer("mlp", steps=2, telemetry_every=5)


def test_refusals_name_keywords_not_the_commands_flags():
    cases = [dict(batch_size=0), dict(resume=True), dict(epochs=1, steps=3), dict(model="gpt", n_embd=30, n_head=4),
             dict(master_weights=False), dict(fp32_ops="default,attention"), dict(warmup=10, steps=5),
             dict(momentum=0.5), dict(resume_allow=["nope"]), dict(normalize="x"), dict(mode="o2"),
             dict(precision="bf16", fp8_first_last="x"), dict(precision_plan="/nonexistent/plan.json"),
             dict(steps=2, fp32_layers=["nope"]), dict(inject_nonfinite=[0]), dict(grad_reduce="fp64")]
    for keywords in cases:
        model = keywords.pop("model", "mlp")
        with pytest.raises(ValueError) as refused:
            mantissa.Trainer(model, **keywords)
        assert "--" not in str(refused.value), str(refused.value)
        assert any(key in str(refused.value) for key in keywords), str(refused.value)


def test_the_commands_flags_are_keywords_with_its_checks():
    with pytest.raises(ValueError, match=r"stepz is no keyword of Trainer \(did you mean steps\?\)"):
        mantissa.Trainer("mlp", stepz=10)
    with pytest.raises(ValueError, match="precision 'bf17' is not fp32, bf16"):
        mantissa.Trainer("mlp", precision="bf17")
    with pytest.raises(ValueError, match="batch_size"):
        mantissa.Trainer("mlp", batch_size=0)
    with pytest.raises(ValueError, match="overlap applies only with data parallel"):  # a bool says off
        mantissa.Trainer("mlp", overlap=False)
    t = mantissa.Trainer("mlp", precision="fp16", steps=3, loss_scale="static:1024", hidden=32, batch_size=16,
                         fp32_layers=["fc0"])
    assert t.loss_scale == 1024
    assert "fp32 in 1" in t.precision_plan


def test_telemetry_reaches_the_step_records_and_files_read_back(cli, tmp_path):
    t = mantissa.Trainer("mlp", precision="bf16", steps=3, hidden=32, batch_size=16, telemetry=True,
                         telemetry_every=2, telemetry_layers=["fc0"])
    records = t.run()["steps"]
    assert [("numerics" in r) for r in records] == [True, True, False]  # the first step, then every 2nd
    layers = {n["layer"] for n in records[0]["numerics"]}
    assert layers == {"fc0"}
    path = tmp_path / "t.jsonl"
    subprocess.run([cli, "train", "--model", "mlp", "--steps", "2", "--hidden", "32", "--telemetry", str(path)],
                   check=True, capture_output=True)
    read = mantissa.read_telemetry(path)
    assert read and {"step", "layer", "amax"} <= set(read[0])
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=f"{path}:{len(read) + 1}"):
        mantissa.read_telemetry(path)


def test_quiet_prints_nothing(capfd):
    mantissa.Trainer("mlp", steps=2, hidden=32, batch_size=16, quiet=True).run()
    assert capfd.readouterr().err == ""
    mantissa.Trainer("mlp", steps=2, hidden=32, batch_size=16).run()
    assert "model: mlp" in capfd.readouterr().err


def test_ctrl_c_stops_after_the_step_with_a_checkpoint(tmp_path):
    t = mantissa.Trainer("mlp", steps=50, hidden=32, batch_size=16, checkpoint_dir=tmp_path)
    saved = []

    def on_step(record):
        if record["step"] == 7:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        t.run(on_step=on_step, on_save=lambda path, step: saved.append((path, step)))
    assert [step for _, step in saved] == [7]
    assert t.next_step == 8
    resumed = mantissa.Trainer("mlp", steps=50, hidden=32, batch_size=16, checkpoint_dir=tmp_path, resume=True)
    assert resumed.next_step == 8


def test_an_exception_in_a_callback_ends_the_run_and_is_raised():
    t = mantissa.Trainer("mlp", steps=20, hidden=32, batch_size=16)

    def on_step(record):
        if record["step"] == 3:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        t.run(on_step=on_step)
    assert t.next_step == 4


# Every --precision name: the 16-bit ones, fp8, every microscaled recipe of the table, adaptive.
PRECISION_NAMES = (["fp32", "bf16", "fp16", "fp8"] + [r["name"] for r in mantissa.recipes() if r["precision"]] +
                   ["adaptive"])


@pytest.mark.parametrize("name", PRECISION_NAMES)
def test_every_precision_name_is_the_plan_the_command_makes_of_it(cli, name):
    """The Python door resolves a precision name to the plan `mantissa train` makes of it (issue 49)."""
    t = mantissa.Trainer("mlp", precision=name, steps=1, batch_size=16, quiet=True)
    r = subprocess.run([cli, "train", "--model", "mlp", "--precision", name, "--steps", "1", "--eval-every", "1",
                        "--batch-size", "16", "--json", "--quiet"], capture_output=True, text=True, check=True)
    assert t.plan == json.loads(r.stdout)["precision_plan"]
    levels = t.plan["layers"]
    assert levels["fc1"] == {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "adaptive": "bf16"}.get(name, name)
