"""mantissa from Python: number formats and mixed-precision training in C++.

Two things, both the C++ library's own code, bit for bit what the `mantissa` command does:

* Number formats and recipes on NumPy arrays and torch tensors (read in place through DLPack):
  ``cast``, ``encode``, ``decode`` in fp32, fp16, bf16, e4m3, e5m2, e2m1 or any eXmY, with nearest-even,
  stochastic or toward-zero rounding; ``quantize`` by the block-scaled recipes (``recipes()``).
* ``Trainer``: mantissa's built-in models (mlp, cnn, segment, gpt, lstm) trained on files or NumPy arrays
  in fp32, bf16, fp16, fp8 or a microscaled recipe, with a callback per step, checkpoints, and the weights
  as NumPy arrays under PyTorch's names.

It is not a second autograd for Python models: a model of your own trains in PyTorch (with AMP); its
weights move to and from mantissa through state_dict()/load_state_dict() or safetensors files
(docs/interop.md, docs/python.md).
"""
import json
import os

from ._mantissa import (  # noqa: F401 (the package's API)
    CheckpointError,
    DataError,
    InputFileError,
    LossScaleCollapse,
    Quantized,
    TrainingStalled,
    __version__,
    cast,
    decode,
    encode,
    format_info,
    formats,
    isa,
    pack_fp4,
    quantize,
    read_telemetry,
    recipes,
    unpack_fp4,
)
from . import _mantissa

__all__ = [
    "CheckpointError", "DataError", "InputFileError", "LossScaleCollapse", "Quantized", "Trainer", "TrainingStalled",
    "__version__", "cast", "decode", "encode", "format_info", "formats", "isa", "pack_fp4", "quantize", "read_telemetry",
    "recipes", "unpack_fp4",
]

class Trainer:
    """A training run of one of mantissa's models, described by the keywords `mantissa train` takes as flags.

    Trainer("cnn", precision="bf16", steps=50, lr=3e-3) trains the CNN on Fashion-MNIST; any flag of
    `mantissa train --help` is a keyword (dashes as underscores), both being the library's run settings:
    batch_size, precision ("fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4", ...), loss_scale,
    checkpoint_dir, resume, seed, ... Counts are ints, rates numbers, switches and on/off settings bools
    (overlap=False), lists lists, the rest str; a value of another type is a TypeError naming the keyword.

    The data: `data` (a directory in the MNIST layout, or a text file or directory), the four image files
    (train_images=path, ...: IDX or .npy), or arrays: uint8
    images [N, H, W] or [N, C, H, W] with integer labels [N] (train_images, train_labels, test_images,
    test_labels; normalized by the training set's mean and standard deviation, as files are), or `text`
    (str or bytes) for the text models. Without either, Fashion-MNIST (image models) or the fortunes (text).

    telemetry=True samples the numerics of every layer's tensors every `telemetry_every` steps (50) into
    the step records' "numerics".
    """

    def __init__(self, model="mlp", *, data=None, train_images=None, train_labels=None, test_images=None,
                 test_labels=None, text=None, telemetry=False, **flags):
        arrays = (train_images, train_labels, test_images, test_labels)
        images = None
        if all(isinstance(a, (str, os.PathLike)) for a in arrays):  # files, as the command's --train-images ...
            flags.update(zip(("train_images", "train_labels", "test_images", "test_labels"), arrays))
        elif any(a is not None for a in arrays):
            if any(a is None for a in arrays):
                raise ValueError("give all four of train_images, train_labels, test_images, test_labels")
            images = arrays
        if text is not None and (images is not None or data is not None):
            raise ValueError("give one of data, the image arrays, text")
        if images is not None and data is not None:
            raise ValueError("give one of data, the image arrays, text")
        keywords = {"model": model, "data": data, **flags}
        keywords = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in keywords.items()}
        self._run = _mantissa._Trainer(keywords, bool(telemetry), images, text)

    def run(self, on_step=None, on_eval=None, on_save=None):
        """Trains to the last step: `on_step(record)` after each step, `on_eval(record)` after each
        evaluation, `on_save(path, step)` after each checkpoint. Records are dicts, as the lines of a
        --metrics file (docs/metrics.md). Ctrl-C stops after the step, with a checkpoint where there is a
        checkpoint_dir, and raises KeyboardInterrupt. Returns the steps', evaluations' records and totals."""
        def hand(callback):
            return None if callback is None else (lambda line: callback(json.loads(line)))
        r = self._run.run(hand(on_step), hand(on_eval), on_save)
        steps = [json.loads(s) for s in r["steps"]]
        evals = [json.loads(e) for e in r["evals"]]
        return {
            "steps": steps,
            "evals": evals,
            "final_val_loss": evals[-1]["val_loss"] if evals else None,
            "final_val_accuracy": evals[-1].get("val_accuracy") if evals else None,
            "wall_seconds": r["wall_seconds"],
            "skipped_steps": r["skipped_steps"],
            "peak_bytes": json.loads(r["peak_bytes"]),
            "throughput_unit": r["throughput_unit"],
            "warnings": list(r["warnings"]),
        }

    def step(self):
        """One optimizer step (draws its batches); its record."""
        return json.loads(self._run.step())

    def evaluate(self, full=True):
        """The validation loss (and accuracy) over the held-out data (all of it, or the run's eval batches)."""
        return json.loads(self._run.evaluate(full))

    def state_dict(self):
        """The weights by PyTorch's names (the twins in bench/pytorch/models.py), as f32 NumPy arrays."""
        return self._run.state_dict()

    def load_state_dict(self, state):
        """Sets every weight from name -> array (NumPy, torch tensor): all must be there, with their shapes
        and finite values, as PyTorch's load_state_dict(strict=True)."""
        self._run.load_state_dict(dict(state))

    def save(self, path):
        """A checkpoint that resumes bit-identically (Trainer(..., resume_from=path))."""
        self._run.save(str(path))

    next_step = property(lambda self: self._run.next_step, doc="The step the next step() runs.")
    steps = property(lambda self: self._run.steps, doc="The run's last step.")
    loss_scale = property(lambda self: self._run.loss_scale, doc="The loss scale now.")
    precision_plan = property(lambda self: self._run.precision_plan, doc="Which layer runs in what, as text.")
    plan = property(lambda self: json.loads(self._run.precision_plan_json),
                    doc="Which layer runs in what, as a plan file holds it ({'low', 'quantized', 'layers'}).")
    data_summary = property(lambda self: self._run.data_summary, doc="What the run trains on.")

    @property
    def normalization(self):
        """Images: {"mean": M, "std": S}, the normalization applied; None for text."""
        text = self._run.normalization
        return json.loads(text) if text else None
