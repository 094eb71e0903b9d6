"""The training loop end to end on a toy task: learning, the run directory, resume, non-finite loss, refusals; the
Trainer's onecycle lr and beta1 (against torch's OneCycleLR) and its fp16 loss scaling (on the CPU's GradScaler)."""

from __future__ import annotations

import json

import pytest
import torch

from attention_impls import BACKENDS, AttentionBackend, Capabilities
from lra.core.errors import NonFiniteLossError, RunSetupError
from lra.model import build_model
from lra.train.checkpoint import LAST, load_checkpoint, save_checkpoint
from lra.train.config import load_config
from lra.train.device import wants_loss_scaling
from lra.train.run import train
from lra.train.trainer import Trainer, build_trainer
from tasks import build_task
from tests.reference import onecycle_reference
from tests.toy_task import toy_config_path

SHORT = ["train.steps=40", "train.eval_every=20"]
CPU = torch.device("cpu")


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
    with pytest.raises(RunSetupError, match=r"started with other settings: train.lr=0.01 \(now 0.02\)"):
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


def toy_trainer(tmp_path, overrides=(), **kw) -> Trainer:
    """A Trainer on the toy task's model, built as build_trainer does but with Trainer's own keywords (`autocast`,
    `loss_scaling`) free: the CPU tests reach the fp16 loss-scaling path this way."""
    cfg = load_config(toy_config_path(tmp_path), None, list(overrides))
    task = build_task(cfg.task, **cfg.data)
    torch.manual_seed(cfg.train.seed)
    shape = dict(vocab_size=task.vocab_size, seq_len=task.seq_len, num_classes=task.num_classes, pair=task.pair)
    model = build_model(cfg, "naive", **shape)
    kw.setdefault("autocast", None)
    return Trainer(model, cfg.train, device=CPU, **kw)


def toy_batches(tmp_path, count: int):
    task = build_task("toy")
    train_split = task.load("train")
    tokens = torch.from_numpy(train_split.tokens.astype("int64"))
    labels = torch.from_numpy(train_split.labels.astype("int64"))
    return [(tokens[i * 32 : (i + 1) * 32], labels[i * 32 : (i + 1) * 32]) for i in range(count)]


def weights(trainer: Trainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.model.parameters()]


def test_trainer_applies_onecycle_lr_and_beta1_to_every_group(tmp_path):
    """At steps 1, warmup, warmup + 1 and the last, each AdamW group steps with OneCycleLR's lr and beta1; the
    configured betas[0] (0.9) is overridden, betas[1] kept."""
    lr, warmup, steps = 0.01, 7, 20
    sets = ["train.schedule=onecycle", f"train.warmup={warmup}", f"train.steps={steps}", f"train.lr={lr}"]
    cfg = load_config(toy_config_path(tmp_path), None, sets)
    trainer = build_trainer(cfg, build_task("toy"), "naive", CPU)
    want = onecycle_reference(lr, warmup, steps)
    seen = {}
    for step, (tokens, labels) in enumerate(toy_batches(tmp_path, steps), 1):
        trainer.step(tokens, labels)  # the groups keep what this step's AdamW update used until the next step
        seen[step] = [(g["lr"], *g["betas"]) for g in trainer.optimizer.param_groups]
    assert trainer.global_step == steps and len(trainer.optimizer.param_groups) == 2
    for step in (1, warmup, warmup + 1, steps):
        want_lr, want_beta1 = want[step - 1]
        for got_lr, got_beta1, beta2 in seen[step]:
            assert got_lr == pytest.approx(want_lr, rel=1e-12, abs=1e-14 * lr), step
            assert got_beta1 == pytest.approx(want_beta1, rel=1e-12), step
            assert beta2 == 0.98  # train.betas[1], the toy config's default
    assert seen[1][0][:2] == pytest.approx((lr / 25, 0.95)) and seen[warmup][0][:2] == pytest.approx((lr, 0.85))


def test_other_schedules_keep_the_configured_betas(tmp_path):
    trainer = toy_trainer(tmp_path, ["train.betas=[0.8, 0.9]"])  # cosine
    for tokens, labels in toy_batches(tmp_path, 2):
        trainer.step(tokens, labels)
    assert [g["betas"] for g in trainer.optimizer.param_groups] == [(0.8, 0.9), (0.8, 0.9)]


def test_loss_scaling_is_on_by_default_for_fp16_on_cuda_only(tmp_path):
    cuda = torch.device("cuda")
    assert wants_loss_scaling(cuda, torch.float16)
    assert not any(wants_loss_scaling(cuda, dtype) for dtype in (torch.bfloat16, None))
    assert not any(wants_loss_scaling(CPU, dtype) for dtype in (torch.float16, torch.bfloat16, None))
    for autocast in (torch.float16, torch.bfloat16, None):  # on the CPU, the numerics study's fp16 stays unscaled
        trainer = toy_trainer(tmp_path, autocast=autocast)
        assert trainer.scaler is None and "scaler" not in trainer.state_dict()
    assert isinstance(toy_trainer(tmp_path, loss_scaling=True).scaler, torch.amp.GradScaler)


@pytest.mark.parametrize("grad_clip", [0.0, 1.0])
def test_a_scaled_step_takes_the_unscaled_update_when_nothing_overflows(tmp_path, grad_clip):
    """fp32, scale 2^16: scaling and unscaling are exact, so the updates agree to rounding. AdamW's eps (1e-2 here,
    near the gradients' size) makes the update depend on the gradients' scale, so a missing unscale (before clipping
    or at all) would show."""
    sets = ["train.eps=1e-2", f"train.grad_clip={grad_clip}"]
    plain, scaled = toy_trainer(tmp_path, sets), toy_trainer(tmp_path, sets, loss_scaling=True)
    start = weights(plain)
    for tokens, labels in toy_batches(tmp_path, 3):
        assert scaled.step(tokens, labels).loss.item() == plain.step(tokens, labels).loss.item()
        for a, b in zip(plain.model.parameters(), scaled.model.parameters(), strict=True):
            torch.testing.assert_close(b.grad, a.grad)  # unscaled in place before the update
    for a, b, s in zip(weights(plain), weights(scaled), start, strict=True):
        assert not torch.equal(a, s)
        torch.testing.assert_close(b, a)
    assert scaled.scaler.get_scale() == 2.0**16 and scaled.state_dict()["scaler"]["_growth_tracker"] == 3


def test_an_overflowing_fp16_step_is_skipped_but_counted(tmp_path):
    """fp16 autocast on the CPU with a scale of 2^40: the scaled gradients overflow fp16, so AdamW does not step, the
    scale halves, and the step still counts (the next one takes the schedule's next lr)."""
    trainer = toy_trainer(tmp_path, autocast=torch.float16, loss_scaling=True)
    trainer.scaler.load_state_dict({**trainer.scaler.state_dict(), "scale": 2.0**40})
    start = weights(trainer)
    (tokens, labels), second = toy_batches(tmp_path, 2)
    loss = trainer.step(tokens, labels).loss
    assert torch.isfinite(loss) and trainer.global_step == 1
    assert all(torch.equal(a, b) for a, b in zip(weights(trainer), start, strict=True))
    assert trainer.scaler.get_scale() == 2.0**39
    trainer.scaler.load_state_dict({**trainer.scaler.state_dict(), "scale": 2.0**8})
    trainer.step(*second)
    assert trainer.global_step == 2 and not torch.equal(weights(trainer)[0], start[0])
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 2 / 10)  # cosine warm-up, step 2 of 10


def test_scaler_state_round_trips_and_checkpoints_without_it_load(tmp_path):
    """A resumed scaled run continues exactly (scale and growth tracker restored); a checkpoint from before loss
    scaling (no 'scaler' key) loads into a fresh scaler."""
    first, later = toy_batches(tmp_path, 3)[:2], toy_batches(tmp_path, 3)[2]
    a = toy_trainer(tmp_path, loss_scaling=True)
    a.scaler.load_state_dict({**a.scaler.state_dict(), "scale": 2.0**10})
    for batch in first:
        a.step(*batch)
    save_checkpoint(tmp_path / LAST, a.state_dict())  # as a run writes it (a copy: state_dict() shares tensors)
    state = load_checkpoint(tmp_path / LAST)
    assert state["scaler"] == {**a.scaler.state_dict(), "scale": 2.0**10, "_growth_tracker": 2}
    b = toy_trainer(tmp_path, loss_scaling=True)
    assert b.scaler.state_dict() != state["scaler"]
    b.load_state_dict(state)
    assert b.scaler.state_dict() == state["scaler"] and b.global_step == 2
    a.step(*later)
    b.step(*later)
    assert all(torch.equal(x, y) for x, y in zip(weights(a), weights(b), strict=True))
    assert b.state_dict()["scaler"] == a.state_dict()["scaler"]
    old = {k: v for k, v in state.items() if k != "scaler"}
    c = toy_trainer(tmp_path, loss_scaling=True)
    c.load_state_dict(old)
    assert c.global_step == 2 and c.scaler.get_scale() == 2.0**16  # a fresh scaler
    unscaled = toy_trainer(tmp_path)
    unscaled.load_state_dict(state)  # a scaled run's checkpoint resumed without scaling ignores the key
    assert unscaled.global_step == 2


@pytest.mark.parametrize("backend", ["naive", "performer", "linformer"])
def test_record_says_whether_attention_dropout_was_applied(tmp_path, backend, capsys):
    """With model.attention_dropout > 0, naive applies it; performer (no attention matrix) and linformer (its
    reference code has none) train without it: the summary says attention_dropout_applied false and the run prints
    one line naming the backend. With p = 0 the field is None (none was asked for)."""
    steps = ["train.steps=2", "train.eval_every=2"]
    summary = run(tmp_path, backend, [*steps, "model.attention_dropout=0.1"], out_dir=tmp_path / "p")
    printed = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
    applies = backend == "naive"
    assert summary["attention_dropout_applied"] is applies
    assert printed.count("is not applied") == (0 if applies else 1)
    assert applies or f"attention dropout 0.1 (model.attention_dropout) is not applied: {backend!r}" in printed
    if backend == "performer":
        assert run(tmp_path, backend, steps, out_dir=tmp_path / "zero")["attention_dropout_applied"] is None
