"""`lra bench attention` with attention dropout and its refusal without CUDA, the CPU timing's progress callback, and
`lra bench tiles` (the tile tuner) on the CPU under TRITON_INTERPRET=1 at a tiny shape."""

from __future__ import annotations

import pytest
import torch

from attention_impls.kernels import REGISTER_OPTIONS, TILE_OPTIONS
from lra.bench import tile_tuner
from lra.bench.attention import bench_attention, time_ms
from lra.cli.main import main
from lra.core.errors import RunSetupError
from lra.results.store import load_records

pytest.importorskip("triton")

FWD = [{"block_m": 16, "block_n": 16, "num_warps": 4, "num_stages": 1}, {"block_m": 32, "block_n": 16}]
BWD = [{"bwd_block_m": 16, "bwd_block_n": 16, "bwd_num_stages": 1}, {"bwd_block_m": 16, "bwd_block_n": 32}]


def test_rows_carry_requested_and_applied_dropout():
    rows = bench_attention(["flash", "naive"], [32], [16], "fp32", heads=1, batch=1, device="cpu", rep_ms=1,
                           warmup_ms=0, dropout=0.1, modes=("fwd_bwd",))  # fmt: skip
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows), [r["status"] for r in rows]
    for r in rows:
        assert r["dropout"] == 0.1
        assert r["dropout_effective"] == (26 / 256 if r["backend"] == "flash" else 0.1)


def test_cuda_benchmark_without_cuda_is_refused_before_anything_runs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    calls = []
    monkeypatch.setattr("lra.bench.attention._bench_one", lambda *a, **k: calls.append(a))
    with pytest.raises(RunSetupError, match="CUDA is not available on this machine; run with --device cpu"):
        bench_attention(["naive"], [64], [16], device="cuda")
    with pytest.raises(RunSetupError, match="CUDA is not available"):
        tile_tuner.tune_tiles([16], device="cuda")
    assert calls == []


def test_cpu_timing_reports_progress_with_an_estimate():
    seen = []

    def on_rep(done: int, planned: int) -> None:
        seen.append((done, planned))

    ms = time_ms(lambda: sum(range(20000)), "cpu", 0.0, 30.0, [], on_rep=on_rep)
    assert ms > 0 and len(seen) >= 3
    assert [d for d, _ in seen] == list(range(1, len(seen) + 1))
    assert all(planned >= done for done, planned in seen) and seen[-1][1] >= 3


def test_tile_tuner_picks_the_fastest_candidate():
    record = tile_tuner.tune_tiles([16], shape=(1, 1, 32), device="cpu", options=(FWD, BWD), rep_ms=1, warmup_ms=0)
    assert record["kind"] == "bench_tiles" and record["dropout"] == 0.0
    (res,) = record["results"]
    fwd = [r for r in res["rows"] if r["kind"] == "fwd"]
    bwd = [r for r in res["rows"] if r["kind"] == "fwd_bwd"]
    assert len(fwd) == 2 and len(bwd) == 2 and all("ms" in r for r in res["rows"])
    best_fwd, best_bwd = min(fwd, key=lambda r: r["ms"]), min(bwd, key=lambda r: r["ms"])
    assert res["best"]["block_m"] == best_fwd["block_m"] and res["best"]["bwd_block_n"] == best_bwd["bwd_block_n"]
    assert set(res["best"]) == set(TILE_OPTIONS + REGISTER_OPTIONS)  # a whole Tiles, registers left at 0
    assert res["best"]["maxnreg"] == res["best"]["bwd_maxnreg"] == 0


def test_bench_tiles_command_prints_and_stores_one_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tile_tuner, "candidates", lambda head_dim, dtype, dropout=False: (FWD[:1], BWD[:1]))
    store = tmp_path / "results"
    args = ["bench", "tiles", "--device", "cpu", "--head-dim", "16", "--shape", "1,1,32", "--dtype", "fp32"]
    assert main([*args, "--results", str(store)]) == 0
    assert "Tiles(block_m=16, block_n=16" in capsys.readouterr().out
    (rec,) = load_records(store)
    assert rec["kind"] == "bench_tiles" and rec["results"][0]["best"]["bwd_block_m"] == 16 and rec["torch"]
    assert main([*args[:-2], "--shape", "1,32", "--no-record"]) == 2
    assert "give batch,heads,seq" in capsys.readouterr().err
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # on a CPU the kernels then cannot run: one line, no record
    assert main([*args, "--results", str(tmp_path / "other")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: lra bench tiles times flash's kernels: 'flash' is a Triton GPU kernel")
    assert not (tmp_path / "other").exists()
