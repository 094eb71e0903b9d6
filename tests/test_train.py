"""The training loop end to end on a toy task: learning, records, resume, non-finite loss, run-directory rules."""

from __future__ import annotations

import json

import pytest
import torch

from attention_impls import BACKENDS, AttentionBackend, Capabilities
from lra.results.store import load_records
from lra.train.checkpoint import LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.run import NonFiniteLossError, RunSetupError, train
from tests.toy_task import toy_config_path


def run(tmp_path, backend="naive", overrides=(), **kw):
    cfg = load_config(toy_config_path(tmp_path), None, list(overrides))
    kw.setdefault("out_dir", tmp_path / "run")
    return train(cfg, backend, device="cpu", results_store=tmp_path / "results", **kw)


def test_toy_run_learns_and_writes_run_dir_and_record(tmp_path):
    summary = run(tmp_path)
    m = summary["metrics"]
    assert m["test_acc"] > m["majority_acc"] + 0.2
    run_dir = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "summary.json", "last.pt", "best.pt"):
        assert (run_dir / name).is_file(), name
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [40, 80, 120]
    recs = load_records(tmp_path / "results")
    assert len(recs) == 1
    rec = recs[0]
    assert rec["task"] == "toy" and rec["backend"] == "naive" and rec["kind"] == "run"
    assert rec["config_hash"] == summary["config_hash"] and rec["torch"] == torch.__version__
    assert rec["metrics"]["steps_per_s"] > 0 and rec["device"].startswith("cpu")


def test_resume_after_interruption_gives_the_same_result(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = run(tmp_path / "a", out_dir=tmp_path / "a" / "run")
    partial = run(tmp_path / "b", out_dir=tmp_path / "b" / "run", stop_after=50)
    assert partial["stopped_at"] == 50
    assert load_checkpoint(tmp_path / "b" / "run" / LAST)["state"]["step"] == 40  # last checkpoint before the kill
    resumed = run(tmp_path / "b", out_dir=tmp_path / "b" / "run", resume=True)
    assert resumed["steps"] == full["steps"] == 120
    assert resumed["metrics"]["test_acc"] == full["metrics"]["test_acc"]
    assert resumed["metrics"]["test_loss"] == pytest.approx(full["metrics"]["test_loss"], abs=0, rel=1e-12)
    a = load_checkpoint(tmp_path / "a" / "run" / LAST)["model"]
    b = load_checkpoint(tmp_path / "b" / "run" / LAST)["model"]
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_run_dir_conflicts_are_clear_errors(tmp_path):
    run(tmp_path, stop_after=45)
    with pytest.raises(RunSetupError, match="--resume"):
        run(tmp_path)
    with pytest.raises(RunSetupError, match="different config"):
        run(tmp_path, overrides=["train.lr=0.02"], resume=True)
    with pytest.raises(RunSetupError, match="no checkpoint"):
        run(tmp_path, out_dir=tmp_path / "empty", resume=True)


class _PoisonedAttention(AttentionBackend):
    """Naive-shaped test backend that returns inf from its 46th training call on."""

    capabilities = Capabilities(devices=("cpu",))
    calls = 0

    def forward(self, q, k, v, key_padding_mask=None):
        if self.training:
            type(self).calls += 1
        out = torch.softmax(q @ k.transpose(-1, -2) * self.scale, -1) @ v
        return out * float("inf") if type(self).calls > 45 else out


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    BACKENDS.register("_poisoned")(_PoisonedAttention)
    try:
        _PoisonedAttention.calls = 0
        with pytest.raises(NonFiniteLossError, match="loss became"):
            run(tmp_path, backend="_poisoned")
        ckpt = load_checkpoint(tmp_path / "run" / LAST)
        assert ckpt["state"]["step"] == 40
        assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())
        assert not (tmp_path / "run" / "summary.json").exists()
    finally:
        BACKENDS.unregister("_poisoned")


def test_backend_that_cannot_run_here_is_refused_up_front(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(RunSetupError, match="runs only on cuda"):
        run(tmp_path, backend="sdpa_flash")
