"""The forward study and its figures (`lra numerics forward`): the golden value, the deviation figures, the sweeps,
the records the leaderboard reads and the plots. Checked against tests/reference.py's fp64 attention, hand-evaluated
deviations, a backend with a known error, and the outlier mix's known variance."""

from __future__ import annotations

import math

import pytest
import torch

import lra.numerics.reference as reference
from attention_impls import BACKENDS, AttentionBackend, Capabilities, why_cannot_run
from lra.cli.main import main
from lra.core.errors import ConfigError
from lra.numerics.figures import FigureSizes, knob_variants, run_figure
from lra.numerics.forward import ForwardSpec, forward_study
from lra.numerics.inputs import draw_inputs, parse_tiles
from lra.numerics.metrics import deviation
from lra.numerics.reference import naive_reference
from lra.numerics.report import figure_record, forward_records, verdict_of, why_of
from lra.results.leaderboard import numerics_table
from lra.results.numerics_tables import knobs_table, reproduction_table
from lra.results.store import load_records
from tests.reference import reference_attention

OUTLIER_VAR = 100.0  # FlashAttention-3's N(0, 100): variance 100
TINY = {"heads": 2, "head_dim": 16, "batch": 1, "device": "cpu"}


def cpu_runnable(names):
    return [n for n in names if n in BACKENDS and why_cannot_run(n, "cpu", None, TINY["head_dim"]) is None]


def rows_by(rows, **match):
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


def test_golden_is_fp64_attention_and_chunking_changes_nothing(monkeypatch):
    q, k, v = draw_inputs(2, 3, 37, 8, "normal", seed=5, draw=0)
    ref = reference_attention(q, k, v)
    assert (naive_reference(q, k, v, torch.float64) - ref).abs().max().item() < 1e-13
    monkeypatch.setattr(reference, "chunk_rows", lambda *a: 5)  # 37 rows in 8 blocks
    assert (naive_reference(q, k, v, torch.float64) - ref).abs().max().item() < 1e-13
    band = torch.ones(1, 37, 37, dtype=torch.bool).tril()  # a token mask: causal
    masked = naive_reference(q, k, v, torch.float64, token_mask=band)
    assert (masked - reference_attention(q, k, v, token_mask=band)).abs().max().item() < 1e-13


def test_deviation_figures_are_the_hand_evaluated_ones():
    ref = torch.zeros(2, 3, dtype=torch.float64)
    out = ref.clone()
    out[0, 1], out[1, 2] = 3e-3, -1e-3
    assert deviation(out, ref).rel == pytest.approx(math.sqrt(9e-6 + 1e-6), rel=1e-12)  # ||ref|| = 0: absolute
    ref[1, 1] = 2.0
    assert deviation(out, ref).rel == pytest.approx(math.sqrt(9e-6 + 1e-6 + 4.0) / 2.0, rel=1e-12)
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
    assert off["peer_max_mean"] == pytest.approx(_Offset.delta, rel=1e-9)  # at fp64, naive is the golden
    assert off["mean"] == pytest.approx(_Offset.delta / numel, rel=1e-6)
    assert off["std"] == pytest.approx(_Offset.delta * math.sqrt((numel - 1) / numel**2), rel=1e-6)
    assert off["max_std"] == pytest.approx(0.0, abs=1e-15)


def test_bf16_deviation_exceeds_fp32_for_every_cpu_implementation():
    names = cpu_runnable(["naive", "sdpa_math", "flash_blockwise"]) + ["emu:fa1-all", "emu:baseline-fp32-softmax"]
    spec = ForwardSpec(backends=names, dtypes=["fp32", "fp16", "bf16"], seqs=[64], draws=2, **TINY)
    rows = forward_study(spec)
    for name in names:
        (fp32,) = rows_by(rows, backend=name, dtype="fp32")
        (bf16,) = rows_by(rows, backend=name, dtype="bf16")
        assert fp32["status"] == bf16["status"] == "ok", (fp32["status"], bf16["status"])
        assert 0 < fp32["max"] < 1e-5, name
        assert bf16["max"] > 10 * fp32["max"] and bf16["mean"] > fp32["mean"], name
        assert bf16["ctrl_naive_vs_naive32"] > 0 and bf16["ctrl_backend_vs_naive32"] > 0
    (naive_bf16,) = rows_by(rows, backend="naive", dtype="bf16")
    assert naive_bf16["ratio_vs_naive"] == 1.0 and naive_bf16["ctrl_ratio"] == pytest.approx(1.0)
    assert naive_bf16["peer_max_mean"] == 0.0  # naive against itself
    (emu_naive,) = rows_by(rows, backend="emu:baseline-fp32-softmax", dtype="bf16")  # naive's arithmetic, emulated
    assert emu_naive["ratio_vs_naive"] == pytest.approx(1.0, abs=0.2)


def test_tiles_sweep_reaches_the_tiled_implementations():
    names = cpu_runnable(["flash_blockwise"]) + ["emu:fa1-all", "sdpa_math"]
    tiles = parse_tiles(["default", "32x16", "16x32"])
    spec = ForwardSpec(backends=names, dtypes=["bf16"], seqs=[32, 128], draws=1, tiles=tiles, **TINY)
    rows = forward_study(spec)
    for name in ("flash_blockwise", "emu:fa1-all"):
        assert {r["tiles"] for r in rows_by(rows, backend=name)} == {"default", "32x16", "16x32"}
        (swapped,) = rows_by(rows, backend=name, tiles="16x32", seq=128)
        assert swapped["status"] == "ok" and swapped["tiles_used"] == "16x32" and 0 < swapped["max"] < math.inf
    assert {r["tiles"] for r in rows_by(rows, backend="sdpa_math")} == {"-"}  # untiled: once


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
    argv = ["numerics", "forward", "--figure", "none", "--attn", "naive,sdpa_math", "--dtype", "fp32,bf16"]
    argv += ["--seq", "16,32", "--heads", "2", "--head-dim", "16", "--draws", "1", "--device", "cpu"]
    assert main([*argv, "--results", str(store), "--no-plots"]) == 0
    records = load_records(store)
    assert sorted(r["backend"] for r in records) == ["naive", "sdpa_math"]
    rec = next(r for r in records if r["backend"] == "sdpa_math")
    assert rec["kind"] == "numerics_forward" and rec["metrics"]["seq"] == 32
    assert set(rec["metrics"]["deviation"]) == {"fp32", "bf16"}
    cells = {(r["dtype"], r["seq"]) for r in rec["metrics"]["rows"]}
    assert cells == {(d, n) for d in ("fp32", "bf16") for n in (16, 32)}
    table = numerics_table(records)
    row = next(r for r in table.rows if r[0] == "`sdpa_math`")
    bf16 = rec["metrics"]["deviation"]["bf16"]
    assert row[2] == f"{bf16['max']:.2e} / {bf16['mean']:.2e}" and row[-1] == "32"


def test_records_keep_one_row_set_per_backend():
    spec = ForwardSpec(backends=["naive"], dtypes=["fp32"], seqs=[8], draws=1, **TINY)
    rows = [{"backend": "naive", "tiles": "-", "dtype": "fp32", "seq": 8, "status": "oom"}]
    (rec,) = forward_records(rows, spec, {"device": "x"})
    assert rec["metrics"]["deviation"] == {} and rec["metrics"]["seq"] is None


def _sizes(**kw):
    base = {"seq": 64, "seqs": [32, 64], "tiles": [(16, 16), (16, 32), (32, 16)], "draws": 1, **TINY}
    return FigureSizes(**{**base, **kw})


def test_figures_give_series_verdicts_and_leaderboard_tables(tmp_path):
    impls = ["emu:fa1-all", "emu:fa2-fp32-state", *cpu_runnable(["flash_blockwise"])]
    env = {"device": "cpu (test)", "date": "2026-12-01T00:00:00Z"}
    records = []
    for figure in ("formats", "length", "tiles", "knobs"):
        records.append(figure_record(run_figure(figure, impls, _sizes()), env))
    formats, length, tiles, knobs = records
    assert [p["x"] for p in formats["metrics"]["series"]["emu:fa1-all"]] == ["fp64", "fp32", "fp16", "bf16"]
    (fp64,) = [p for p in formats["metrics"]["series"]["emu:fa1-all"] if p["x"] == "fp64"]
    assert fp64["max"] < 1e-12  # every format-relative preset is fp64 throughout at fp64
    assert [p["x"] for p in length["metrics"]["series"]["naive"]] == [32, 64]
    assert {p["x"] for p in tiles["metrics"]["series"]["emu:fa1-all"]} == {"16x16", "16x32", "32x16"}
    assert "naive" in tiles["metrics"]["series"] and "emu:fa2-fp32-state" in tiles["metrics"]["series"]
    assert set(knobs["metrics"]["series"]) == {"naive", *knob_variants()}
    verdict = formats["metrics"]["verdicts"]["emu:fa1-all"]
    if "flash_blockwise" in impls:  # a kernel's reason is read from the data: the emulation it matches
        assert formats["metrics"]["verdicts"]["flash_blockwise"]["why"].startswith("behaves as emu:fa2-fp32-state (0%)")
    assert verdict["verdict"] == verdict_of(verdict["ratio"]) and "key tiles" in verdict["why"]
    fa1 = knobs["metrics"]["drivers"]["emu:fa1-all"]
    assert fa1[0]["change"] == "(none)" and {c["change"] for c in fa1[1:]} == {f"{k}=acc" for k in "smlpo"} | {
        "rescale=acc"
    }
    for i, rec in enumerate(records):  # as the store gives them back
        rec.update(_path=str(tmp_path / f"{i}.json"), _file=f"{i}.json", _store="test")
    table = reproduction_table(records)
    row = next(r for r in table.rows if r[0].text == "emu:fa1-all")
    assert row[2].text == f"{verdict['ratio']:.2f}"
    assert row[6].text == length["metrics"]["verdicts"]["emu:fa1-all"]["verdict"]
    assert len(knobs_table(records).rows) == len(knob_variants())


def test_verdict_and_reason_text():
    assert verdict_of(9.7) == "reproduces ~10x" and verdict_of(2.0) == "above naive, short of 10x"
    assert verdict_of(1.1) == "as naive" and verdict_of(0.3) == "below naive" and verdict_of(None) == "-"
    info = {"kind": "emulation", "form": "fa1", "block_n": 64, "inputs": "in", "s": "in", "m": "acc", "l": "in"}
    info.update(p="in", o="acc", rescale="acc")
    assert why_of(info, 1000) == "O renormalised at each of 16 key tiles (Bc=64); in bf16: s, l, p"


def test_plots_with_the_plots_extra(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    from lra.results.plots.deviation import plot_figure, plot_forward, plot_weights

    spec = ForwardSpec(backends=["naive", "sdpa_math"], dtypes=["fp32", "bf16"], seqs=[16, 32], draws=2, **TINY)
    path = plot_forward(forward_study(spec), tmp_path / "fwd.png")
    assert Image.open(path).size == (900, 400)  # two dtype panels of 4.5 x 4 inches at 100 dpi
    pairs = {
        "a vs b": {"steps": [5, 10], "max_abs": [0.0, 1e-6], "w1_mean": [0.0, 1e-8]},
        "c vs d": {"steps": [5, 10], "max_abs": [1e-3, 2e-3], "w1_mean": [1e-5, 3e-5]},
    }
    path = plot_weights({"task": "toy", "preset": "tiny", "metrics": {"pairs": pairs}}, tmp_path / "w.png")
    assert Image.open(path).size == (1100, 400)
    env = {"device": "cpu", "date": "x"}
    formats = figure_record(run_figure("formats", ["emu:fa1-all"], _sizes(seq=32)), env)
    tiles = figure_record(run_figure("tiles", ["emu:fa1-all"], _sizes(seq=32)), env)
    paths = plot_figure(formats, tmp_path) + plot_figure(tiles, tmp_path)
    assert [p.name.split("-")[-1] for p in paths] == ["fig3.png", "fig4.png", "fig6.png"]
    assert all(Image.open(p).size == (700, 450) for p in paths)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ConfigError, match="BLOCK_MxBLOCK_N"):
        parse_tiles(["64by64"])
    with pytest.raises(KeyError, match="known"):
        forward_study(ForwardSpec(backends=["nope"], **TINY))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="cuda"):
            forward_study(ForwardSpec(backends=["naive"], **{**TINY, "device": "cuda"}))
    with pytest.raises(ConfigError, match="inputs"):
        forward_study(ForwardSpec(backends=["naive"], inputs="cauchy", **TINY))
    with pytest.raises(ConfigError, match="not studied"):
        forward_study(ForwardSpec(backends=["naive"], options={"flash": {}}, **TINY))
    assert main(["numerics", "forward", "--figure", "fig7", "--no-record", "--no-plots"]) == 2


def test_a_bad_length_is_refused_before_any_figure_runs(tmp_path, capsys):
    # Fig. 5's lengths were checked when its turn came, after Figs. 3-4 had run and stored their records.
    store = tmp_path / "results"
    argv = ["numerics", "forward", "--attn", "naive", "--device", "cpu", "--seq", "0", "--results", str(store)]
    assert main([*argv, "--no-plots"]) == 2
    assert "sequence lengths must be positive integers" in capsys.readouterr().err
    assert not store.exists()
