"""The numerics study (`lra numerics`): the golden value, the deviation figures, the sweeps and the weights experiment.

Checked against independent references: tests/reference.py's fp64 attention, hand-evaluated deviations and
Wasserstein distances, the outlier mix's known variance, and identical weights for identical training runs.
"""

from __future__ import annotations

import math

import pytest
import torch

import lra.numerics.study as numerics
from attention_impls import BACKENDS, AttentionBackend, Capabilities, why_cannot_run
from lra.cli.main import main
from lra.numerics.study import (
    ForwardSpec,
    deviation,
    draw_inputs,
    forward_records,
    forward_study,
    naive_reference,
    parse_tiles,
    slope,
    wasserstein1,
    weight_distances,
    weights_plan,
)
from lra.results.leaderboard import numerics_table
from lra.results.store import load_records
from tests.reference import reference_attention
from tests.toy_task import toy_config_path

OUTLIER_VAR = 100.0  # FlashAttention-3's N(0, 100): variance 100
TINY = {"heads": 2, "head_dim": 16, "batch": 1, "device": "cpu"}


def cpu_runnable(names):
    return [n for n in names if n in BACKENDS and why_cannot_run(n, "cpu", None, TINY["head_dim"]) is None]


def rows_by(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def test_golden_is_fp64_attention_and_chunking_changes_nothing(monkeypatch):
    q, k, v = draw_inputs(2, 3, 37, 8, "normal", seed=5, draw=0)
    ref = reference_attention(q, k, v)
    whole = naive_reference(q, k, v, torch.float64)
    assert (whole - ref).abs().max().item() < 1e-13
    monkeypatch.setattr(numerics, "_chunk_rows", lambda *a: 5)  # 37 rows in 8 blocks
    chunked = naive_reference(q, k, v, torch.float64)
    assert (chunked - ref).abs().max().item() < 1e-13
    band = torch.ones(1, 37, 37, dtype=torch.bool).tril()  # a token mask: causal
    masked = naive_reference(q, k, v, torch.float64, token_mask=band)
    assert (masked - reference_attention(q, k, v, token_mask=band)).abs().max().item() < 1e-13


def test_deviation_figures_are_the_hand_evaluated_ones():
    ref = torch.zeros(2, 3, dtype=torch.float64)
    out = ref.clone()
    out[0, 1], out[1, 2] = 3e-3, -1e-3
    d = deviation(out, ref)
    assert d.rel == pytest.approx(math.sqrt(9e-6 + 1e-6), rel=1e-12)  # ||ref|| = 0: the absolute norm
    ref[1, 1] = 2.0
    d = deviation(out, ref)
    assert d.rel == pytest.approx(math.sqrt(9e-6 + 1e-6 + 4.0) / 2.0, rel=1e-12)
    ref[1, 1] = 0.0
    d = deviation(out, ref)
    assert d.max == pytest.approx(3e-3, rel=1e-12)
    assert d.mean == pytest.approx(4e-3 / 6, rel=1e-12)
    assert d.sq_mean == pytest.approx((9e-6 + 1e-6) / 6, rel=1e-12)
    out[0, 0] = float("nan")
    assert deviation(out, ref).nonfinite == 1 and deviation(out, ref).max == math.inf


class _Offset(AttentionBackend):
    """Exact attention plus a known error at one element: the study must report exactly that error."""

    capabilities = Capabilities(devices=("cpu",))
    delta = 2.5e-4

    def forward(self, q, k, v, key_padding_mask=None):
        out = reference_attention(q, k, v, scale=self.scale).to(q.dtype)
        out[0, 0, 0, 0] += self.delta
        return out


class _Broken(AttentionBackend):
    capabilities = Capabilities(devices=("cpu",))

    def forward(self, q, k, v, key_padding_mask=None):
        raise RuntimeError("boom")


def test_forward_study_reports_a_known_error_and_zero_for_naive_fp64():
    BACKENDS.register("_offset")(_Offset)
    BACKENDS.register("_broken")(_Broken)
    try:
        spec = ForwardSpec(backends=["_broken", "naive", "_offset"], dtypes=["fp64"], seqs=[16], draws=2, **TINY)
        rows = forward_study(spec)
    finally:
        BACKENDS.unregister("_offset")
        BACKENDS.unregister("_broken")
    (broken,) = rows_by(rows, backend="_broken")
    assert broken["status"] == "error: RuntimeError: boom" and "max" not in broken  # recorded; the sweep goes on
    (naive,) = rows_by(rows, backend="naive")
    assert naive["status"] == "ok" and naive["max"] == 0.0 and naive["mean"] == 0.0 and naive["draws"] == 2
    (off,) = rows_by(rows, backend="_offset")
    numel = 1 * 2 * 16 * 16
    assert off["elements"] == numel
    assert off["max"] == pytest.approx(_Offset.delta, rel=1e-9)
    assert off["mean"] == pytest.approx(_Offset.delta / numel, rel=1e-6)
    assert off["std"] == pytest.approx(_Offset.delta * math.sqrt((numel - 1) / numel**2), rel=1e-6)
    assert off["max_std"] == pytest.approx(0.0, abs=1e-15)


def test_bf16_deviation_exceeds_fp32_for_every_cpu_backend():
    names = cpu_runnable(["naive", "sdpa_math", "flash_blockwise", "flash"])
    assert {"naive", "sdpa_math", "flash_blockwise"} <= set(names)
    spec = ForwardSpec(backends=names, dtypes=["fp32", "fp16", "bf16"], seqs=[64], draws=2, **TINY)
    rows = forward_study(spec)
    for name in names:
        (fp32,) = rows_by(rows, backend=name, dtype="fp32")
        (bf16,) = rows_by(rows, backend=name, dtype="bf16")
        assert fp32["status"] == bf16["status"] == "ok", (fp32["status"], bf16["status"])
        assert 0 < fp32["max"] < 1e-5, name
        assert bf16["max"] > 10 * fp32["max"], name
        assert bf16["mean"] > fp32["mean"], name
        assert bf16["ctrl_naive_vs_naive32"] > 0 and bf16["ctrl_backend_vs_naive32"] > 0
    (naive_bf16,) = rows_by(rows, backend="naive", dtype="bf16")
    assert naive_bf16["ratio_vs_naive"] == 1.0 and naive_bf16["ctrl_ratio"] == pytest.approx(1.0)


def test_tiles_sweep_and_direction_from_short_to_long(record_property):
    """The deviation of the tiled backends at two lengths; the direction is measured and reported, not assumed."""
    names = cpu_runnable(["flash_blockwise", "flash"])
    spec = ForwardSpec(
        backends=names,
        dtypes=["bf16"],
        seqs=[32, 128],
        draws=2,
        tiles=parse_tiles(["default", "32x16", "16x32"]),
        **TINY,
    )
    rows = forward_study(spec)
    for name in names:
        assert {r["tiles"] for r in rows_by(rows, backend=name)} == {"default", "32x16", "16x32"}
        for tiles in ("default", "32x16", "16x32"):
            short, long = (rows_by(rows, backend=name, tiles=tiles, seq=n)[0] for n in (32, 128))
            assert short["status"] == long["status"] == "ok"
            assert 0 < short["max"] < math.inf and 0 < long["max"] < math.inf
            assert 0 < short["rel_l2"] < math.inf and 0 < long["rel_l2"] < math.inf
            grows = ["grows" if long[k] > short[k] else "does not grow" for k in ("max", "rel_l2")]
            note = (
                f"{name} {tiles} bf16, N=32 -> 128: max |out-golden| {short['max']:.2e} -> {long['max']:.2e} "
                f"({grows[0]}), rel L2 {short['rel_l2']:.2e} -> {long['rel_l2']:.2e} ({grows[1]})"
            )
            record_property(f"{name}_{tiles}_direction", note)
            print(note)
        (swapped,) = rows_by(rows, backend=name, tiles="16x32", seq=128)
        assert swapped["tiles_used"] == "16x32"


def test_block_sparse_backend_is_measured_against_its_masked_golden():
    if "block_sparse_flash" not in BACKENDS:
        pytest.skip("block_sparse_flash is not registered")
    opts = {"block_sparse_flash": {"layout": ["local"], "block": 16}}
    spec = ForwardSpec(
        backends=["naive", "block_sparse_flash"], dtypes=["fp32", "bf16"], seqs=[64], draws=1, options=opts, **TINY
    )
    rows = forward_study(spec)
    fp32, bf16 = (rows_by(rows, backend="block_sparse_flash", dtype=d)[0] for d in ("fp32", "bf16"))
    assert bf16["masked"] and "ratio_vs_naive" not in bf16  # dense naive is no peer for a masked golden
    assert bf16["ctrl_ratio"] is not None  # the control compares with naive under the same mask
    assert fp32["status"] == bf16["status"] == "ok"
    assert fp32["max"] < 1e-5 < bf16["max"]
    assert fp32["tiles_used"] == ("16x16" if fp32["impl"] == "kernel" else None)
    q, k, v = draw_inputs(1, 2, 64, 16, "normal", seed=0, draw=0)
    dense, banded = naive_reference(q, k, v, torch.float64), reference_attention(q, k, v, token_mask=_band(64, 16))
    assert (dense - banded).abs().max().item() > 1e-2  # against a dense golden the figure above would be this large


def _band(n: int, block: int) -> torch.Tensor:
    """The `local` layout of width 3 expanded to tokens: query block i sees key blocks i-1, i, i+1."""
    blocks = torch.arange(n) // block
    return ((blocks[:, None] - blocks[None, :]).abs() <= 1)[None]


def test_outlier_inputs_have_the_fa3_mix_variance():
    q, k, v = draw_inputs(1, 8, 4096, 64, "outlier", seed=0, draw=0)
    x = torch.stack([q, k, v])
    assert x.mean().abs().item() < 0.01
    assert x.var().item() == pytest.approx(1 + OUTLIER_VAR * 0.001, abs=0.015)  # 1 + 100 * 0.001
    n, *_ = draw_inputs(1, 8, 4096, 64, "normal", seed=0, draw=0)
    assert n.var().item() == pytest.approx(1.0, abs=0.005)
    again, *_ = draw_inputs(1, 8, 4096, 64, "outlier", seed=0, draw=0)
    assert torch.equal(again, q)


def test_records_fit_the_leaderboard_and_the_cli_stores_them(tmp_path):
    store = tmp_path / "results"
    argv = ["numerics", "forward", "--attn", "naive,sdpa_math", "--dtype", "fp32,bf16", "--seq", "16,32"]
    argv += ["--heads", "2", "--head-dim", "16", "--draws", "1", "--device", "cpu", "--results", str(store)]
    assert main([*argv, "--no-plots"]) == 0
    records = load_records(store)
    assert sorted(r["backend"] for r in records) == ["naive", "sdpa_math"]
    rec = next(r for r in records if r["backend"] == "sdpa_math")
    assert rec["kind"] == "numerics_forward" and rec["metrics"]["seq"] == 32
    assert set(rec["metrics"]["deviation"]) == {"fp32", "bf16"}
    assert {(r["dtype"], r["seq"]) for r in rec["metrics"]["rows"]} == {
        (d, n) for d in ("fp32", "bf16") for n in (16, 32)
    }
    table = numerics_table(records)
    row = next(r for r in table.rows if r[0] == "`sdpa_math`")
    bf16 = rec["metrics"]["deviation"]["bf16"]
    assert row[2] == f"{bf16['max']:.2e} / {bf16['mean']:.2e}" and row[-1] == "32"


def test_records_keep_one_row_set_per_backend():
    spec = ForwardSpec(backends=["naive"], dtypes=["fp32"], seqs=[8], draws=1, **TINY)
    rows = [{"backend": "naive", "tiles": "-", "dtype": "fp32", "seq": 8, "status": "oom"}]
    (rec,) = forward_records(rows, spec, {"device": "x"})
    assert rec["metrics"]["deviation"] == {} and rec["metrics"]["seq"] is None


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="BLOCK_MxBLOCK_N"):
        parse_tiles(["64by64"])
    with pytest.raises(KeyError, match="known"):
        forward_study(ForwardSpec(backends=["nope"], **TINY))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="cuda"):
            forward_study(ForwardSpec(backends=["naive"], **{**TINY, "device": "cuda"}))
    with pytest.raises(ValueError, match="inputs"):
        forward_study(ForwardSpec(backends=["naive"], inputs="cauchy", **TINY))
    with pytest.raises(ValueError, match="unknown control"):
        weights_plan("naive", "flash", 0, "none", ["seed"])


def test_wasserstein_and_slope_are_the_hand_evaluated_ones():
    a = torch.tensor([0.0, 1.0, 2.0])
    b = torch.tensor([3.0, 0.0, 1.0])
    assert wasserstein1(a, b) == pytest.approx(1 / 3)  # sorted: [0,1,2] vs [0,1,3]
    assert wasserstein1(a, a.flip(0)) == 0.0  # a permutation: same distribution
    assert wasserstein1(a, a + 0.25) == pytest.approx(0.25)
    d = weight_distances({"w": a}, {"w": b})["w"]
    assert d["max_abs"] == 3.0 and d["w1"] == pytest.approx(1 / 3)
    assert slope([10, 20, 30], [1.0, 3.0, 5.0]) == pytest.approx(0.2)
    assert slope([10], [2.0]) == pytest.approx(0.2)


def test_plan_reuses_runs_but_always_trains_a_and_b():
    runs, pairs = weights_plan("naive", "naive", 3, "none", ["seeds", "amp"])
    assert set(runs) == {"a", "b", "naive_seed2", "naive_bf16"}
    assert pairs == {
        "naive vs naive": ("a", "b"),
        "naive seed 3 vs 4": ("a", "naive_seed2"),
        "naive fp32 vs bf16": ("a", "naive_bf16"),
    }
    runs, pairs = weights_plan("naive", "flash", 0, "bf16", ["amp"])  # train.amp=bf16: A, B in autocast
    assert runs["naive_fp32"].amp == "none" and pairs["naive fp32 vs bf16"] == ("naive_fp32", "a")


def _toy(tmp_path):
    sets = ["train.steps=12", "train.eval_every=6", "model.dropout=0.0", "train.amp=none"]
    return toy_config_path(tmp_path), sets


def test_weights_zero_control_and_seed_control(tmp_path):
    """Same backend, same seed: identical weights (exactly zero); another seed: positive distance."""
    path, sets = _toy(tmp_path)
    store = tmp_path / "results"
    argv = ["numerics", "weights", path, "--preset", "tiny", "--attn-a", "naive", "--attn-b", "naive"]
    argv += ["--control", "seeds", "--device", "cpu", "--results", str(store), "--no-plots"]
    for s in sets:
        argv += ["--set", s]
    assert main(argv) == 0
    (rec,) = load_records(store)
    assert rec["kind"] == "numerics_weights" and rec["task"] == "toy"
    same = rec["metrics"]["pairs"]["naive vs naive"]
    seeds = rec["metrics"]["pairs"]["naive seed 0 vs 1"]
    assert same["steps"] == seeds["steps"] == [6, 12]
    assert all(x == 0.0 for x in same["max_abs"] + same["w1_mean"])
    assert all(v == 0.0 for t in same["per_tensor"].values() for v in t["max_abs"])
    assert all(x > 0 for x in seeds["max_abs"] + seeds["w1_mean"])
    assert rec["metrics"]["slope_ratios"]["ab_over_seeds"]["w1_mean"] == 0.0


def test_weights_other_backend_and_low_precision_control(tmp_path):
    """A different summation order (blockwise online softmax) and bf16 autocast both move the weights."""
    path, sets = _toy(tmp_path)
    sets = [*sets, "attention.flash_blockwise.block_m=32", "attention.flash_blockwise.block_n=16"]
    rec = numerics.weights_study(
        path, preset="tiny", overrides=sets, attn_a="naive", attn_b="flash_blockwise", controls=["amp"], device="cpu"
    )
    ab = rec["metrics"]["pairs"]["naive vs flash_blockwise"]
    amp = rec["metrics"]["pairs"]["naive fp32 vs bf16"]
    assert ab["runs"][1]["backend"] == "flash_blockwise" and amp["runs"][1]["amp"] == "bf16"
    assert all(0 < x < math.inf for x in ab["max_abs"] + ab["w1_mean"])
    assert all(0 < x < math.inf for x in amp["max_abs"] + amp["w1_mean"])
    ratio = rec["metrics"]["slope_ratios"]["ab_over_amp"]["w1_mean"]
    assert ratio == pytest.approx(ab["slope_w1_mean"] / amp["slope_w1_mean"])
    print(f"toy: W1 slope naive-vs-flash_blockwise / naive fp32-vs-bf16 = {ratio:.3g}")


def test_plots_with_the_plots_extra(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    spec = ForwardSpec(backends=["naive", "sdpa_math"], dtypes=["fp32", "bf16"], seqs=[16, 32], draws=2, **TINY)
    path = numerics.plot_forward(forward_study(spec), tmp_path / "fwd.png")
    assert Image.open(path).size == (900, 400)  # two dtype panels of 4.5 x 4 inches at 100 dpi
    pairs = {
        "a vs b": {"steps": [5, 10], "max_abs": [0.0, 1e-6], "w1_mean": [0.0, 1e-8]},
        "c vs d": {"steps": [5, 10], "max_abs": [1e-3, 2e-3], "w1_mean": [1e-5, 3e-5]},
    }
    path = numerics.plot_weights({"task": "toy", "preset": "tiny", "metrics": {"pairs": pairs}}, tmp_path / "w.png")
    assert Image.open(path).size == (1100, 400)
