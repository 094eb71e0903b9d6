"""The weights study (`lra numerics weights`): the exact 1-D Wasserstein-1 distance against a hand-computed case and
an independent evaluation of its CDF form, the growth slopes, the run plan, and end-to-end runs on the toy task
(identical runs give exactly zero distance; another seed, another backend, an emulation and low precision do not)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lra.cli.main import main
from lra.core.errors import ConfigError
from lra.numerics.metrics import slope, wasserstein1, weight_distances
from lra.numerics.weights import control_ratios, run_config, weights_plan, weights_study
from lra.results.numerics_tables import weights_table
from lra.results.store import load_records
from lra.train.config import load_config
from tests.toy_task import toy_config_path


def w1_from_cdfs(a: np.ndarray, b: np.ndarray) -> float:
    """W1 as the integral of |F_a(x) - F_b(x)| dx between the two empirical CDFs (scipy's definition)."""
    xs = np.sort(np.concatenate([a, b]))
    widths = np.diff(xs)
    fa = np.searchsorted(np.sort(a), xs[:-1], side="right") / len(a)
    fb = np.searchsorted(np.sort(b), xs[:-1], side="right") / len(b)
    return float(np.sum(np.abs(fa - fb) * widths))


def test_wasserstein_is_the_hand_computed_and_the_cdf_integral():
    a = torch.tensor([0.0, 1.0, 2.0])
    b = torch.tensor([3.0, 0.0, 1.0])
    assert wasserstein1(a, b) == pytest.approx(1 / 3)  # sorted: [0,1,2] vs [0,1,3]: one unit of mass moves 1
    assert wasserstein1(a, a.flip(0)) == 0.0  # a permutation: the same distribution
    assert wasserstein1(a, a + 0.25) == pytest.approx(0.25)  # a shift moves every unit of mass by the shift
    rng = np.random.default_rng(0)
    for n in (1, 7, 1000):
        x, y = rng.normal(size=n), rng.standard_t(3, size=n) * 0.5 + 0.1
        assert wasserstein1(torch.tensor(x), torch.tensor(y)) == pytest.approx(w1_from_cdfs(x, y), rel=1e-10)
    d = weight_distances({"w": a}, {"w": b})["w"]
    assert d["max_abs"] == 3.0 and d["w1"] == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="one size"):
        wasserstein1(a, torch.zeros(4))


def test_slope_and_ratios_are_the_hand_evaluated_ones():
    assert slope([10, 20, 30], [1.0, 3.0, 5.0]) == pytest.approx(0.2)
    assert slope([10], [2.0]) == pytest.approx(0.2)
    assert slope([], []) is None
    curves = {
        "naive vs flash": {"slope_w1_mean": 1.0, "slope_max_abs": 2.0, "w1_mean": [0.5, 1.0], "max_abs": [1.0, 3.0]},
        "naive fp32 vs fp16": {"slope_w1_mean": 4.0, "slope_max_abs": 4.0, "w1_mean": [1.0, 5.0], "max_abs": [1, 6]},
    }
    r = control_ratios(curves, ["naive vs flash"], {"fp16": "naive fp32 vs fp16", "seeds": "missing"})
    want = {"slope_w1_mean": 0.25, "slope_max_abs": 0.5, "final_w1_mean": 0.2, "final_max_abs": 0.5}
    assert r == {"naive vs flash / fp16": want}


def test_plan_reuses_runs_but_always_trains_a_and_every_b():
    runs, pairs = weights_plan("naive", ["naive", "emu:fa1-all"], 3, "none", ["seeds", "fp16", "bf16"])
    assert set(runs) == {"a", "b0", "b1", "seed2", "naive_fp16", "naive_bf16"}
    assert pairs == {
        "naive vs naive": ("a", "b0"),
        "naive vs emu:fa1-all": ("a", "b1"),
        "naive seed 3 vs 4": ("a", "seed2"),
        "naive fp32 vs fp16": ("a", "naive_fp16"),
        "naive fp32 vs bf16": ("a", "naive_bf16"),
    }
    runs, pairs = weights_plan("naive", ["flash"], 0, "bf16", ["bf16"])  # train.amp=bf16: A, B in autocast
    assert runs["naive_fp32"].amp == "none" and pairs["naive fp32 vs bf16"] == ("naive_fp32", "a")
    with pytest.raises(ConfigError, match="unknown control"):
        weights_plan("naive", ["flash"], 0, "none", ["seed"])


def test_an_emulation_run_gets_its_options_in_the_config(tmp_path):
    config = load_config(toy_config_path(tmp_path))
    name, cfg = run_config(config, weights_plan("naive", ["emu:fa1-all+block_n=16"], 5, "bf16", [])[0]["b0"])
    assert name == "flash_emulated" and cfg.options_of(name) == {"preset": "fa1-all", "block_n": 16}
    assert (cfg.train.seed, cfg.train.amp, cfg.train.compile) == (5, "bf16", "none")
    assert config.to_dict()["attention"] == {} and config.train.seed == 0  # a variant: the study's config is kept


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
    assert rec["metrics"]["ratios"]["naive vs naive / seeds"]["final_w1_mean"] == 0.0
    (row,) = weights_table(load_records(store)).rows
    assert [c.text for c in row[:4]] == ["naive vs naive", "seeds", "0", "0"]  # the leaderboard's rendering


def test_weights_emulation_and_low_precision_controls_move_the_weights(tmp_path):
    """The all-bf16 FA1 emulation (in bf16 autocast, on the CPU too) and an fp16 autocast run both move weights."""
    path, sets = _toy(tmp_path)
    sets = [*sets[:-1], "train.amp=bf16", "attention.flash_emulated.block_n=8"]
    rec = weights_study(path, preset="tiny", overrides=sets, attn_b=["emu:fa1-all"], controls=["fp16"], device="cpu")
    ab = rec["metrics"]["pairs"]["naive vs emu:fa1-all"]
    fp16 = rec["metrics"]["pairs"]["naive fp32 vs fp16"]
    assert ab["runs"][1]["backend"] == "emu:fa1-all" and fp16["runs"] == [
        {"backend": "naive", "seed": 0, "amp": "none"},
        {"backend": "naive", "seed": 0, "amp": "fp16"},
    ]
    assert all(0 < x < math.inf for x in ab["max_abs"] + ab["w1_mean"] + fp16["max_abs"] + fp16["w1_mean"])
    ratio = rec["metrics"]["ratios"]["naive vs emu:fa1-all / fp16"]
    assert ratio["slope_w1_mean"] == pytest.approx(ab["slope_w1_mean"] / fp16["slope_w1_mean"])
    assert rec["config"]["model"]["attention_dropout"] == 0.0
    print(f"toy: W1 growth naive-vs-emu:fa1-all / naive fp32-vs-fp16 = {ratio['slope_w1_mean']:.3g}")
