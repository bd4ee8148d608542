"""Own data from the command, as numpy.save writes it: NumPy pairs in a directory under their usual names
(train_images.npy, Keras' x_train.npy), the four files given one by one (any names, IDX and .npy mixed),
normalization from the training set or given, and the mistakes one line each."""
import gzip
import struct
import subprocess

import numpy as np

from test_trainer import separable_images
from conftest import seeded_rng


def write_idx(path, array):
    """An IDX file (gzipped when the name says so) as the MNIST files are written."""
    data = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape) + array.tobytes()
    (gzip.open if str(path).endswith(".gz") else open)(path, "wb").write(data)


def train(cli, *args):
    return subprocess.run([cli, "train", "--model", "mlp", "--hidden", "32", "--batch-size", "32", "--json", *map(str, args)],
                          capture_output=True, text=True)


def said(mean, std, whose="the training set's"):
    return f"normalized by {whose} mean {mean:.4f} and std {std:.4f}"


def test_numpy_pairs_in_a_directory_under_both_usual_names(cli, tmp_path):
    rng = seeded_rng()
    (tx, ty), (vx, vy) = separable_images(rng, 1024), separable_images(rng, 256)
    for names in (["train_images", "train_labels", "test_images", "test_labels"], ["x_train", "y_train", "x_test", "y_test"]):
        d = tmp_path / names[0]
        d.mkdir()
        for name, array in zip(names, (tx, ty, vx, vy)):  # labels as numpy makes them: int64
            np.save(d / (name + ".npy"), array)
        r = train(cli, "--data", d, "--steps", "60", "--eval-every", "60")
        assert r.returncode == 0, r.stderr
        pixels = tx / 255.0
        assert f"1024 training images of 1x12x12, 256 test, 4 classes; {said(pixels.mean(), pixels.std())}" in r.stderr
        assert '"final_val_accuracy":' in r.stdout and float(r.stdout.split('"final_val_accuracy":')[1].split(",")[0]) > 0.9


def test_the_four_files_one_by_one_any_names_and_a_given_normalization(cli, tmp_path):
    rng = seeded_rng()
    (tx, ty), (vx, vy) = separable_images(rng, 512), separable_images(rng, 128)
    files = [tmp_path / "pixels.bin.gz", tmp_path / "classes.npy", tmp_path / "held_out.npy", tmp_path / "held_out_labels"]
    write_idx(files[0], tx)
    np.save(files[1], ty.astype(np.int32))
    np.save(files[2], vx)
    write_idx(files[3], vy.astype(np.uint8))
    flags = ["--train-images", files[0], "--train-labels", files[1], "--test-images", files[2], "--test-labels", files[3]]
    r = train(cli, *flags, "--steps", "2")
    assert r.returncode == 0, r.stderr
    assert f"data: {files[0]}: 512 training images of 1x12x12, 128 test, 4 classes" in r.stderr
    r = train(cli, *flags, "--steps", "2", "--normalize", "0.5,0.25", "--checkpoint-dir", tmp_path / "ckpt")
    assert r.returncode == 0, r.stderr
    assert said(0.5, 0.25, "the given (--normalize)") in r.stderr
    # A resume must normalize as the run did.
    r = train(cli, *flags, "--steps", "4", "--checkpoint-dir", tmp_path / "ckpt", "--resume")
    assert r.returncode == 2 and "--normalize 0.5,0.25 (this run: auto)" in r.stderr, r.stderr


def test_mistakes_get_one_line(cli, tmp_path):
    rng = seeded_rng()
    x, y = separable_images(rng, 64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "float.npy", x.astype(np.float32))
    np.save(tmp_path / "big.npy", y + 300)
    cases = [
        (["--train-images", tmp_path / "x.npy", "--train-labels", tmp_path / "y.npy"],
         "--train-images, --train-labels given without --test-images, --test-labels"),
        (["--data", tmp_path, "--train-images", tmp_path / "x.npy", "--train-labels", tmp_path / "y.npy", "--test-images",
          tmp_path / "x.npy", "--test-labels", tmp_path / "y.npy"], "--data and the image files"),
        (["--train-images", tmp_path / "float.npy", "--train-labels", tmp_path / "y.npy", "--test-images", tmp_path / "x.npy",
          "--test-labels", tmp_path / "y.npy"], f"{tmp_path / 'float.npy'}: elements of type '<f4'"),
        (["--train-images", tmp_path / "x.npy", "--train-labels", tmp_path / "big.npy", "--test-images", tmp_path / "x.npy",
          "--test-labels", tmp_path / "y.npy"], f"{tmp_path / 'big.npy'}: value 30"),
        (["--normalize", "0.5"], "--normalize: '0.5' is not auto or MEAN,STD"),
        (["--normalize", "0.5,0"], "--normalize: '0.5,0' is not auto or MEAN,STD"),
    ]
    for args, message in cases:
        r = train(cli, *args, "--steps", "1")
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr and r.stderr.count("\n") == 1, (message, r.stderr)
