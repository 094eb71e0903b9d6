"""The training loop end to end on a toy task: learning, the run directory, resume, non-finite loss, refusals."""

from __future__ import annotations

import json

import pytest
import torch

from attention_impls import BACKENDS, AttentionBackend, Capabilities
from lra.core.errors import NonFiniteLossError, RunSetupError
from lra.train.checkpoint import LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.run import train
from tests.toy_task import toy_config_path

SHORT = ["train.steps=40", "train.eval_every=20"]


def run(tmp_path, backend="naive", overrides=(), **kw):
    cfg = load_config(toy_config_path(tmp_path), None, list(overrides))
    kw.setdefault("out_dir", tmp_path / "run")
    return train(cfg, backend, device="cpu", **kw)


def file_hashes(folder) -> dict[str, str]:
    import hashlib

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_toy_run_learns_and_writes_its_run_dir(tmp_path):
    summary = run(tmp_path)
    m = summary["metrics"]
    assert m["test_acc"] > m["majority_acc"] + 0.2
    run_dir = tmp_path / "run"
    for name in ("config.json", "metrics.jsonl", "summary.json", "last.pt", "best.pt"):
        assert (run_dir / name).is_file(), name
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history] == [40, 80, 120]
    written = json.loads((run_dir / "summary.json").read_text())
    assert written["config_hash"] == summary["config_hash"] and written["metrics"] == m
    assert written["history"] == [{k: h[k] for k in ("step", "val_acc", "val_loss", "time")} for h in history]
    assert m["val_acc"] == max(h["val_acc"] for h in history)  # the learning curve ends at the recorded best
    assert summary["task"] == "toy" and summary["backend"] == "naive" and summary["kind"] == "run"
    assert summary["steps"] == 120 and summary["torch"] == torch.__version__ and summary["device"].startswith("cpu")
    assert m["steps_per_s"] > 0 and m["tokens_per_s"] == pytest.approx(m["steps_per_s"] * 32 * 24)
    assert json.loads((run_dir / "config.json").read_text())["config_hash"] == summary["config_hash"]


def test_resume_after_interruption_gives_the_same_result(tmp_path):
    """Dropout 0.1 is on: a resumed run draws the same masks (seeded per step), so the weights are bit-identical."""
    sets = ["train.steps=60", "train.eval_every=20"]
    full = run(tmp_path, overrides=sets, out_dir=tmp_path / "a")
    partial = run(tmp_path, overrides=sets, out_dir=tmp_path / "b", stop_after=30)
    assert partial == {"stopped_at": 30, "run_dir": str(tmp_path / "b")}
    assert load_checkpoint(tmp_path / "b" / LAST)["step"] == 20  # the last checkpoint before the "kill"
    resumed = run(tmp_path, overrides=sets, out_dir=tmp_path / "b", resume=True)
    assert resumed["steps"] == full["steps"] == 60
    assert resumed["metrics"]["test_acc"] == full["metrics"]["test_acc"]
    assert resumed["metrics"]["test_loss"] == pytest.approx(full["metrics"]["test_loss"], abs=0, rel=1e-12)
    a, b = load_checkpoint(tmp_path / "a" / LAST)["model"], load_checkpoint(tmp_path / "b" / LAST)["model"]
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_run_dir_conflicts_are_clear_errors(tmp_path):
    run(tmp_path, overrides=SHORT, stop_after=25)
    with pytest.raises(RunSetupError, match=r"already holds a run; pass --resume"):
        run(tmp_path, overrides=SHORT)
    with pytest.raises(RunSetupError, match="different config"):
        run(tmp_path, overrides=[*SHORT, "train.lr=0.02"], resume=True)
    with pytest.raises(RunSetupError, match=r"has no checkpoint \(last.pt\)"):
        run(tmp_path, overrides=SHORT, out_dir=tmp_path / "empty", resume=True)
    assert not (tmp_path / "empty").exists()


def test_resume_of_a_finished_run_says_so_and_writes_nothing(tmp_path):
    run(tmp_path, overrides=SHORT)
    before = file_hashes(tmp_path / "run")
    with pytest.raises(RunSetupError, match=r"is finished \(summary.json is there\); nothing to resume"):
        run(tmp_path, overrides=SHORT, resume=True)
    root = tmp_path / "runs"
    by_name = run(tmp_path, overrides=SHORT, out_dir=None, runs_root=root)
    with pytest.raises(RunSetupError, match=r"no unfinished run of toy / naive .*the newest, .*, is finished"):
        run(tmp_path, overrides=SHORT, out_dir=None, runs_root=root, resume=True)
    assert file_hashes(tmp_path / "run") == before
    assert sorted(p.name for p in (root / "toy").iterdir()) == [by_name["run_dir"].rsplit("/", 1)[1]]


def test_default_run_dir_is_outside_the_checkout(tmp_path, monkeypatch):
    from lra.train.rundir import default_runs_root

    monkeypatch.delenv("LRA_RUNS", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_runs_root() == tmp_path / "xdg" / "lra" / "runs"
    monkeypatch.setenv("LRA_RUNS", str(tmp_path / "mine"))
    summary = run(tmp_path, overrides=["train.steps=5", "train.eval_every=5", "train.seed=3"], out_dir=None)
    run_dir = tmp_path / "mine" / "toy" / summary["run_dir"].rsplit("/", 1)[1]
    assert summary["run_dir"] == str(run_dir) and run_dir.name.startswith("naive-default-s3-")
    assert (run_dir / "summary.json").is_file()


def test_runs_started_together_get_their_own_directories(tmp_path, monkeypatch):
    """Four runs of one config started in the same second: four directories, four summaries."""
    from concurrent.futures import ThreadPoolExecutor

    from lra.train import rundir

    monkeypatch.setattr(rundir, "start_stamp", lambda: "20260101-120000")
    cfg = load_config(toy_config_path(tmp_path), None, ["train.steps=4", "train.eval_every=4"])
    root = tmp_path / "runs"
    with ThreadPoolExecutor(4) as pool:
        summaries = list(pool.map(lambda _: train(cfg, "naive", device="cpu", runs_root=root), range(4)))
    base = "naive-default-s0-20260101-120000"
    names = [base, f"{base}-2", f"{base}-3", f"{base}-4"]
    assert sorted(s["run_dir"] for s in summaries) == [str(root / "toy" / n) for n in names]
    assert sorted(p.name for p in (root / "toy").iterdir()) == names
    for s in summaries:
        assert json.loads((root / "toy" / s["run_dir"] / "summary.json").read_text())["run_dir"] == s["run_dir"]


class _PoisonedAttention(AttentionBackend):
    """Naive-shaped test backend that returns inf from its 26th training call on."""

    capabilities = Capabilities(devices=("cpu",))
    calls = 0

    def forward(self, q, k, v, key_padding_mask=None):
        if self.training:
            type(self).calls += 1
        out = torch.softmax(q @ k.transpose(-1, -2) * self.scale, -1) @ v
        return out * float("inf") if type(self).calls > 25 else out


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    BACKENDS.register("_poisoned")(_PoisonedAttention)
    try:
        _PoisonedAttention.calls = 0
        with pytest.raises(NonFiniteLossError, match=r"loss became (nan|inf) between steps 26 and 30.*last.pt"):
            run(tmp_path, backend="_poisoned", overrides=SHORT)
        ckpt = load_checkpoint(tmp_path / "run" / LAST)
        assert ckpt["step"] == 20
        assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())
        assert not (tmp_path / "run" / "summary.json").exists()
    finally:
        BACKENDS.unregister("_poisoned")


def test_backend_that_cannot_run_here_is_refused_up_front(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(RunSetupError, match="runs only on cuda"):
        run(tmp_path, backend="sdpa_flash")
    with pytest.raises(RunSetupError, match="CUDA is not available on this machine; use cpu"):
        train(load_config(toy_config_path(tmp_path)), "naive", device="cuda", out_dir=tmp_path / "gpu")
    assert not (tmp_path / "run").exists() and not (tmp_path / "gpu").exists()


def test_init_from_a_missing_run_is_a_clear_error(tmp_path):
    with pytest.raises(RunSetupError, match=r"no checkpoint at .*nowhere"):
        run(tmp_path, overrides=[f"train.init_from={tmp_path / 'nowhere'}"])
