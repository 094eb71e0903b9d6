"""`lra bench train` times the step `lra run` takes (one `Trainer.step()`), and refuses a device that is not there."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from lra.bench import train as bench_train_module
from lra.bench.train import bench_train
from lra.cli.main import main
from lra.core.errors import RunSetupError
from lra.core.signals import terminate_as_interrupt
from lra.results.store import load_records
from lra.train.config import load_config
from lra.train.run import train
from tests.toy_task import toy_config_path

SETS = ["train.weight_decay=0.05", "train.grad_clip=0.5", "train.steps=12", "train.eval_every=6"]


class StepSpy:
    """Counts gradient clips and optimizer steps, and remembers each optimizer's groups and clip limit."""

    def __init__(self, monkeypatch) -> None:
        self.clips: list[float] = []
        self.groups: list[tuple[tuple[int, float], ...]] = []
        real_clip = torch.nn.utils.clip_grad_norm_

        def clip(params, max_norm, *args, **kwargs):
            self.clips.append(max_norm)
            return real_clip(params, max_norm, *args, **kwargs)

        def after_step(optimizer, args, kwargs) -> None:
            self.groups.append(tuple((len(g["params"]), g["weight_decay"]) for g in optimizer.param_groups))

        monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip)
        self.handle = register_optimizer_step_post_hook(after_step)


def test_bench_train_takes_the_same_step_as_a_run(tmp_path, monkeypatch):
    spy = StepSpy(monkeypatch)
    try:
        train(load_config(toy_config_path(tmp_path), None, SETS), "naive", device="cpu", out_dir=tmp_path / "run")
        run_clips, run_groups = list(spy.clips), list(spy.groups)
        spy.clips.clear()
        spy.groups.clear()
        (rec,) = bench_train(toy_config_path(tmp_path), ["naive"], overrides=SETS, steps=3, warmup=2, device="cpu")
    finally:
        spy.handle.remove()
    assert rec["status"] == "ok"
    assert run_clips == [0.5] * 12 and spy.clips == [0.5] * 5  # one clip per step, at train.grad_clip
    assert len(run_groups) == 12 and len(spy.groups) == 5  # one optimizer step per step
    decay, no_decay = run_groups[0]
    assert decay[1] == 0.05 and no_decay[1] == 0.0 and decay[0] > 0 and no_decay[0] > 0
    assert set(run_groups) == set(spy.groups) == {(decay, no_decay)}  # the same weight-decay groups


def test_bench_train_records_its_fields_and_unsupported_backends(tmp_path):
    recs = bench_train(toy_config_path(tmp_path), ["naive", "sdpa_math"], steps=2, warmup=1, device="cpu")
    naive, sdpa = recs
    assert naive["status"] == sdpa["status"] == "ok"
    for key in ("steps_per_s", "tokens_per_s", "ms_per_step", "ms_spread", "speedup_vs_naive"):
        assert key in sdpa["metrics"], key
    assert naive["metrics"]["speedup_vs_naive"] == 1.0
    assert sdpa["metrics"]["tokens_per_s"] == pytest.approx(sdpa["metrics"]["steps_per_s"] * 32 * 24)
    if not torch.cuda.is_available():
        (rec,) = bench_train(toy_config_path(tmp_path), ["sdpa_flash"], steps=1, warmup=0, device="cpu")
        assert rec["status"].startswith("unsupported: 'sdpa_flash' runs only on cuda") and rec["metrics"] == {}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_bench_train_on_a_missing_device_refuses_and_stores_nothing(tmp_path, capsys):
    store = tmp_path / "store"
    code = main(["bench", "train", toy_config_path(tmp_path), "--attn", "naive", "--results", str(store)])
    assert code == 2
    err = capsys.readouterr().err
    assert "CUDA is not available on this machine" in err and "--device cpu" in err and len(err.splitlines()) == 1
    assert load_records(store) == [] and not store.exists()


def test_bench_train_times_eager_and_compiled_steps_in_one_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LRA_COMPILER", "aot_eager")  # inductor compiles for a minute on a CPU
    path = toy_config_path(tmp_path)
    recs = bench_train(path, ["naive", "sdpa_math"], steps=2, warmup=1, device="cpu", compile_modes=["none", "default"])
    assert [(r["backend"], r["compile"]["requested"]) for r in recs] == [
        ("naive", "none"), ("naive", "default"), ("sdpa_math", "none"), ("sdpa_math", "default")
    ]  # fmt: skip
    by = {(r["backend"], r["compile"]["requested"]): r for r in recs}
    for (backend, mode), rec in by.items():
        m = rec["metrics"]
        assert rec["status"] == "ok" and rec["compile"]["mode"] == mode and rec["compile"]["fallback"] is None
        assert rec["config"]["train"]["compile"] == mode and rec["data_on_device"] is False
        assert m["speedup_vs_eager"] == pytest.approx(m["steps_per_s"] / by[backend, "none"]["metrics"]["steps_per_s"])
        assert m["speedup_vs_naive"] == pytest.approx(m["steps_per_s"] / by["naive", mode]["metrics"]["steps_per_s"])
        assert m["compile_s"] == pytest.approx(max(m["first_step_ms"] - m["ms_per_step"], 0) / 1e3)
    assert by["naive", "none"]["config_hash"] != by["naive", "default"]["config_hash"]  # speed records of each mode
    assert by["naive", "default"]["metrics"]["compile_s"] > 0  # tracing and compiling took the first step
    (eager,) = bench_train(path, ["naive"], steps=1, warmup=0, device="cpu")  # CPU default: eager only
    assert eager["compile"] == {"mode": "none", "requested": "none", "fallback": None}
    with pytest.raises(RunSetupError, match="train.compile must be one of auto, none, default, max, got 'fast'"):
        bench_train(path, ["naive"], device="cpu", compile_modes=["none", "fast"])


def test_sigterm_is_an_interrupt_within_the_block_only():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode; never reached
    assert signal.getsignal(signal.SIGTERM) is before


def test_bench_train_stopped_part_way_keeps_what_it_measured(tmp_path, monkeypatch, capsys):
    """`timeout` ends a bench with SIGTERM: the backends measured before it are stored (exit 130), the rest are not."""
    real, calls = bench_train_module._measure, []

    def stopped_at_the_second(*args, **kwargs):
        calls.append(args[3])  # the backend
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        return real(*args, **kwargs)

    monkeypatch.setattr(bench_train_module, "_measure", stopped_at_the_second)
    before, store = signal.getsignal(signal.SIGTERM), tmp_path / "store"
    argv = ["bench", "train", toy_config_path(tmp_path), "--attn", "naive,sdpa_math,naive", "--device", "cpu"]
    code = main([*argv, "--steps", "2", "--warmup", "1", "--results", str(store)])
    assert code == 130 and calls == ["naive", "sdpa_math"]
    (rec,) = load_records(store)
    assert rec["backend"] == "naive" and rec["status"] == "ok" and rec["metrics"]["speedup_vs_naive"] == 1.0
    assert "interrupted: keeping the 1 measurement(s) finished" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_bench_train_interrupted_before_any_measurement_stores_nothing(tmp_path, monkeypatch):
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_train_module, "_measure", stopped)
    store = tmp_path / "store"
    code = main(
        ["bench", "train", toy_config_path(tmp_path), "--attn", "naive", "--device", "cpu", "--results", str(store)]
    )
    assert code == 130 and load_records(store) == []
