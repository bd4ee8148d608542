"""Number formats from Python against their definitions and against the command: `mantissa cast` and
mantissa.encode give the same bits for the same values (one library call behind both), every code of the
small formats decodes and encodes back, the recipes match torchao's golden vectors, and values come in
through NumPy, DLPack and lists alike."""
import subprocess

import numpy as np
import pytest

import mantissa
from conftest import SOURCE_DIR, read_safetensors, seeded_rng

FORMATS = ["fp32", "fp16", "bf16", "e4m3", "e5m2", "e2m1", "e3m2", "e2m3", "e6m9"]


def fresh_values(rng, n):
    """Values across every scale a format meets: normal, tiny (subnormal in the small formats), huge, ties
    of the small formats (k + 0.5 ulp), zeros of both signs, infinities and NaN."""
    x = np.concatenate([
        rng.standard_normal(n) * 10.0 ** rng.integers(-12, 12, n),
        (rng.integers(-64, 64, n) + 0.5) * 2.0 ** rng.integers(-12, 4, n),
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448.0, 464.0, 57344.0, 65520.0, 6.0, 7.0, 1e-45]),
    ])
    return x.astype(np.float32)


def cli_cast(cli, values, fmt, *args):
    """`mantissa cast`'s bit patterns for these values (one per line, as hex floats: exact)."""
    text = "".join(float(v).hex() + "\n" if np.isfinite(v) else f"{v}\n" for v in values)
    out = subprocess.run([cli, "cast", "--to", fmt, *args], input=text, capture_output=True, text=True, check=True).stdout
    return np.array([int(line.split("\t")[2], 16) for line in out.splitlines()], dtype=np.uint64)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rounding", [[], ["--round", "stochastic", "--seed", "7"], ["--round", "zero"], ["--saturate"]])
def test_encode_gives_the_commands_bits(cli, fmt, rounding):
    rng = seeded_rng()
    x = fresh_values(rng, 400)
    kwargs = {}
    if "--round" in rounding:
        kwargs["rounding"] = rounding[1]
    if "--seed" in rounding:
        kwargs["seed"] = int(rounding[3])
    if "--saturate" in rounding:
        kwargs["saturate"] = True
    ours = mantissa.encode(x, fmt, **kwargs).astype(np.uint64)
    np.testing.assert_array_equal(ours, cli_cast(cli, x, fmt, *rounding))
    # cast() is encode then decode: the values the command prints.
    np.testing.assert_array_equal(mantissa.cast(x, fmt, **kwargs).view(np.uint32),
                                  mantissa.decode(mantissa.encode(x, fmt, **kwargs), fmt).view(np.uint32))


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "e4m3", "e5m2", "e2m1", "e3m2"])
def test_every_code_decodes_and_encodes_back(fmt):
    bits = mantissa.format_info(fmt)["bits"]
    codes = np.arange(2 ** bits, dtype=np.uint32)
    values = mantissa.decode(codes, fmt)
    back = mantissa.encode(values, fmt).astype(np.uint32)
    finite = ~np.isnan(values)
    np.testing.assert_array_equal(back[finite], codes[finite])
    assert np.isnan(mantissa.decode(back[~finite], fmt)).all()


def test_storage_width_and_shape():
    x = seeded_rng().standard_normal((3, 5)).astype(np.float32)
    assert mantissa.encode(x, "e4m3").dtype == np.uint8
    assert mantissa.encode(x, "bf16").dtype == np.uint16
    assert mantissa.encode(x, "fp32").dtype == np.uint32
    assert mantissa.cast(x, "bf16").shape == (3, 5)
    np.testing.assert_array_equal(mantissa.cast(x, "fp32"), x)


class DLPackOnly:
    """A producer seen only through DLPack (as a torch tensor is): forces that path."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_dlpack_numpy_strided_and_lists_read_the_same_values():
    rng = seeded_rng()
    x = rng.standard_normal((6, 7)).astype(np.float32)
    want = mantissa.cast(x, "e5m2")
    np.testing.assert_array_equal(mantissa.cast(DLPackOnly(x), "e5m2"), want)
    np.testing.assert_array_equal(mantissa.cast(np.asfortranarray(x), "e5m2"), want)
    np.testing.assert_array_equal(mantissa.cast(x.T, "e5m2"), want.T)
    np.testing.assert_array_equal(mantissa.cast(x.tolist(), "e5m2"), want)


def test_a_torch_tensor_is_read_in_place_bit_for_bit_as_the_command_reads_its_values(cli):
    torch = pytest.importorskip("torch")  # (Debian's python3-torch where CI has it)
    x = torch.from_numpy(fresh_values(seeded_rng(), 200))
    for fmt in ("bf16", "e4m3", "e2m1"):
        np.testing.assert_array_equal(mantissa.encode(x, fmt).astype(np.uint64), cli_cast(cli, x.numpy(), fmt))
    y = torch.randn(64, 32)
    np.testing.assert_array_equal(mantissa.cast(y, "bf16"), y.to(torch.bfloat16).float().numpy())  # PyTorch's own rounding
    with pytest.raises(TypeError, match="a bfloat16 tensor.*float()"):
        mantissa.cast(y.to(torch.bfloat16), "e4m3")
    with pytest.raises(ValueError, match="strided tensor"):
        mantissa.cast(y.t(), "bf16")


def test_values_that_are_not_f32_are_refused_with_the_way_out():
    with pytest.raises(TypeError, match=r"float64 array.*astype\(numpy.float32\)"):
        mantissa.cast(np.zeros(3), "bf16")
    with pytest.raises(TypeError, match="integers"):
        mantissa.decode(np.zeros(3, dtype=np.float32), "bf16")
    with pytest.raises(ValueError, match="code 256 at flat index 1 does not fit e4m3's 8 bits"):
        mantissa.decode(np.array([1, 256]), "e4m3")
    with pytest.raises(ValueError, match="code 18446744073709551615 at flat index 0"):
        mantissa.decode(np.array([2 ** 64 - 1], dtype=np.uint64), "bf16")
    with pytest.raises(ValueError, match="pack_fp4: code 16 at flat index 1 does not fit e2m1's 4 bits"):
        mantissa.pack_fp4(np.array([3, 16]))
    with pytest.raises(TypeError, match="None"):
        mantissa.cast(None, "bf16")
    with pytest.raises(ValueError, match=r"cast: not numbers \(could not convert"):
        mantissa.cast(["1.0", "x"], "bf16")
    with pytest.raises(ValueError, match="format 'e9m9'"):
        mantissa.cast(np.zeros(3, dtype=np.float32), "e9m9")
    with pytest.raises(ValueError, match="rounding"):
        mantissa.cast(np.zeros(3, dtype=np.float32), "bf16", rounding="up")


def golden():
    tensors, _ = read_safetensors(SOURCE_DIR / "tests" / "golden" / "microscale.safetensors")
    return tensors


def codes_outside_nan_blocks(codes, scales, block):
    """Element codes with the blocks of a NaN scale (E8M0 0xFF) masked: there every value is NaN whatever
    its bits, and the casts write NaN differently (tests/unit/microscale_test.cpp)."""
    mask = np.repeat(scales != 0xFF, block, axis=1)[:, :codes.shape[1]]
    return np.where(mask, codes, 0)


def mx_golden_cases():
    """Each MX recipe of the table (E8M0 scales) with each of its elements and both rules a run chooses
    from: a recipe added to the table is compared here unasked."""
    return sorted({(r["name"], element, rule) for r in mantissa.recipes() if r.get("scale") == "e8m0"
                   for element in (r["forward"], r["gradient"]) for rule in ("floor", "rceil")})


@pytest.mark.parametrize("recipe,element,rule", mx_golden_cases())
def test_mx_recipes_match_torchaos_golden_vectors(recipe, element, rule):
    g = golden()
    key = f"mx.{element}.{rule}"
    assert key + ".codes" in g, f"no golden vectors for {key}: run tests/golden/make_microscale_golden.py"
    q = mantissa.quantize(g["mx.input"], recipe, element=element, rule=rule)
    np.testing.assert_array_equal(q.scales, g[key + ".scales"])
    fp4 = element == "e2m1"
    codes = q.codes if not fp4 else mantissa.pack_fp4(q.codes.ravel()).reshape(q.codes.shape[0], -1)
    block = 32 if not fp4 else 16  # packed: two codes a byte
    np.testing.assert_array_equal(codes_outside_nan_blocks(codes, q.scales, block),
                                  codes_outside_nan_blocks(g[key + ".codes"], q.scales, block))


def test_the_recipes_are_the_commands(cli):
    """mantissa.recipes() is the table `mantissa formats` prints, row for row."""
    out = subprocess.run([cli, "formats"], capture_output=True, text=True, check=True).stdout
    rows = [row for row in out.split("\n\n", 1)[1].splitlines()[1:] if " run on " not in row]
    recipes = mantissa.recipes()
    assert len(rows) == len(recipes)
    for row, r in zip(rows, recipes):
        assert row.split()[0] == r["name"] and row.endswith(r["summary"]), (row, r)
        assert r["precision"] == r["microscaled"]


def test_nvfp4_by_transformer_engines_rule_matches_tes_golden_vectors():
    """nvfp4 is Transformer Engine's: its scales as TE's reference quantizer makes them (issue 53)."""
    g, _ = read_safetensors(SOURCE_DIR / "tests" / "golden" / "nvfp4_te.safetensors")
    for case in ("outliers", "magnitudes", "zero_blocks", "quarter_grid"):
        x = g[f"te.{case}.bf16.input"]
        q = mantissa.quantize(x, "nvfp4")
        assert q.spec == "e2m1 1x16 e4m3*f32 te nearest"
        np.testing.assert_array_equal(q.scales, g[f"te.{case}.bf16.1x16.scales"])
        np.testing.assert_array_equal(mantissa.pack_fp4(q.codes.ravel()).reshape(64, 128), g[f"te.{case}.bf16.1x16.codes"])


def test_nvfp4_torchao_matches_torchaos_golden_vectors():
    g = golden()
    for i in range(g["nvfp4.input"].shape[0]):
        q = mantissa.quantize(g["nvfp4.input"][i], "nvfp4-torchao")
        assert q.spec == "e2m1 1x16 e4m3*f32 nearest"
        assert np.float32(q.tensor_scale) == g["nvfp4.tensor_scale"][i]
        np.testing.assert_array_equal(q.scales, g["nvfp4.scales"][i])
        np.testing.assert_array_equal(mantissa.pack_fp4(q.codes.ravel()).reshape(64, 128), g["nvfp4.codes"][i])


def test_quantize_values_and_overrides():
    rng = seeded_rng()
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    q = mantissa.quantize(x, "mxfp8")
    assert q.codes.shape == (6, 64) and q.scales.shape == (6, 2)
    v = q.values()
    assert v.shape == x.shape
    # By the definition: x / scale rounded to E4M3, within half its ulp (2^-4 relative; 2^-10 absolute among
    # the subnormals), except past E4M3's 448, where the floor rule's scale leaves values to saturate.
    scale = np.repeat(2.0 ** (q.scales.astype(np.float64) - 127), 32, axis=1)
    rows = x.reshape(6, 64) / scale
    got = v.reshape(6, 64) / scale
    saturated = np.abs(rows) > 448
    np.testing.assert_array_equal(got[saturated], 448 * np.sign(rows[saturated]))
    assert (np.abs(got - rows)[~saturated] <= np.maximum(2.0 ** -4 * np.abs(rows), 2.0 ** -10)[~saturated]).all()
    q2 = mantissa.quantize(x, "mxfp8", element="e5m2", block=(1, 16), rule="rceil")
    assert q2.spec == "e5m2 1x16 e8m0 rceil nearest" and q2.scales.shape == (6, 4)
    q3 = mantissa.quantize(x, "e5m2 1x16 e8m0 rceil nearest")  # a spec in its own words, the same value
    np.testing.assert_array_equal(q3.codes, q2.codes)
    np.testing.assert_array_equal(q3.scales, q2.scales)
    a = mantissa.quantize(x, "nvfp4", rounding="stochastic", seed=3).codes
    b = mantissa.quantize(x, "nvfp4", rounding="stochastic", seed=3).codes
    c = mantissa.quantize(x, "nvfp4", rounding="stochastic", seed=4).codes
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()
    with pytest.raises(ValueError):
        mantissa.quantize(x, "mxfp9")


def test_fp4_packing_round_trips():
    codes = seeded_rng().integers(0, 16, 101).astype(np.uint8)
    packed = mantissa.pack_fp4(codes)
    assert packed.shape == (51,) and packed[0] == codes[0] | (codes[1] << 4)
    np.testing.assert_array_equal(mantissa.unpack_fp4(packed, 101), codes)
