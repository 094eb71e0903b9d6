"""train.compile: the compiled step gives eager's loss and gradients (dropout on), evaluation does not depend on its
batch size, a backend that cannot be compiled falls back to eager with one line, and a compiled run resumes
bit-identically. On the CPU the compiler is AOTAutograd without inductor (LRA_COMPILER=aot_eager: the same graph
capture, custom ops and autograd, seconds instead of a minute per graph); one slow test runs inductor itself."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from attention_impls import BACKENDS
from attention_impls.naive import NaiveAttention
from lra.train.checkpoint import LAST, load_checkpoint
from lra.train.compiled import resolve_mode
from lra.train.config import config_hash, load_config
from lra.train.run import train
from lra.train.trainer import build_trainer
from tasks import build_task
from tests.reference import TEST_SEED
from tests.toy_task import toy_config_path

DROPOUT = ["model.dropout=0.1", "model.attention_dropout=0.1"]
CPU = torch.device("cpu")


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setenv("LRA_COMPILER", "aot_eager")


def _batches(task, count: int, batch: int, *, padded: bool):
    """`count` random batches of `task`'s shape; with `padded`, each sequence is cut to a random length (for pairs
    the second document only: one graph then has a padded and an unpadded encoder call)."""
    rng = np.random.default_rng(TEST_SEED)
    shape = (batch, 2, task.seq_len) if task.pair else (batch, task.seq_len)
    out = []
    for _ in range(count):
        tokens = rng.integers(1, task.vocab_size, size=shape)
        if padded:
            lengths = rng.integers(1, task.seq_len, size=shape[:-1])
            if task.pair:
                lengths[:, 0] = task.seq_len
            tokens[np.arange(task.seq_len) >= lengths[..., None]] = 0
        labels = rng.integers(0, task.num_classes, size=batch)
        out.append((torch.from_numpy(tokens), torch.from_numpy(labels)))
    return out


def _steps(cfg, task, backend: str, batches):
    """Losses of each step, the gradients of the first, and the weights after the last."""
    trainer = build_trainer(cfg, task, backend, CPU)
    losses, grads = [], None
    for tokens, labels in batches:
        losses.append(trainer.step(tokens, labels).loss)
        grads = grads or [p.grad.clone() for p in trainer.model.parameters()]
    return trainer, losses, grads, [p.detach().clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("task_name", ["listops", "retrieval"])  # one document; a pair (dual-tower head)
def test_compiled_step_matches_eager_on_the_tiny_presets(aot_eager, task_name):
    cfg = load_config(task_name, "tiny", [*DROPOUT, "data.max_length=64"])
    task = build_task(cfg.task, **cfg.data)
    batches = _batches(task, 2, 8, padded=True)
    runs = {}
    for mode in ("none", "default"):
        runs[mode] = _steps(cfg.with_settings([f"train.compile={mode}"]), task, "naive", batches)
    (eager, *want), (compiled, *got) = runs["none"], runs["default"]
    assert not eager.loss.compiled and compiled.loss.compiled and compiled.loss.fallback is None
    for a, b in zip(want, got, strict=True):  # losses, first gradients, final weights
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(y, x)
    assert want[0][0] != want[0][1]  # two different steps, not one repeated


def test_evaluation_does_not_depend_on_its_batch_size(tmp_path):
    cfg = load_config(toy_config_path(tmp_path))
    task = build_task(cfg.task, **cfg.data)
    val = task.load("val")  # 128 examples: 128 = 1 batch, 50 = 2 full and one padded to 50, 7 = 18 and a padded one
    results = []
    for size in (128, 50, 7):
        trainer = build_trainer(cfg, task, "naive", CPU)
        trainer.eval_batch_size = size
        results.append(trainer.evaluate(val))
        results.append(trainer.evaluate(val, limit=45))
    for got in results[2::2]:
        assert got["count"] == 128 and got["acc"] == results[0]["acc"]
        assert got["loss"] == pytest.approx(results[0]["loss"], rel=1e-6)
    for got in results[3::2]:
        assert got["count"] == 45 and got["acc"] == results[1]["acc"]
        assert got["loss"] == pytest.approx(results[1]["loss"], rel=1e-6)
    trainer = build_trainer(cfg, task, "naive", CPU)
    model = trainer.model.eval()
    with torch.no_grad():  # against the plain model on the whole split at once
        logits = model(torch.from_numpy(val.tokens.astype(np.int64)))
    labels = torch.from_numpy(val.labels.astype(np.int64))
    want = torch.nn.functional.cross_entropy(logits, labels).item()
    assert results[0]["acc"] == (logits.argmax(-1) == labels).float().mean().item()
    assert results[0]["loss"] == pytest.approx(want, rel=1e-6)


def test_default_eval_batch_is_four_training_batches(tmp_path):
    cfg = load_config(toy_config_path(tmp_path))
    task = build_task(cfg.task, **cfg.data)
    assert build_trainer(cfg, task, "naive", CPU).eval_batch_size == 4 * 32
    cfg = cfg.with_settings(["train.eval_batch_size=100"])
    assert build_trainer(cfg, task, "naive", CPU).eval_batch_size == 100


@pytest.mark.parametrize("mode", ["default", "max"])
def test_evaluation_out_of_memory_halves_the_batch_and_recompiles_under_cuda_graphs(tmp_path, aot_eager, mode):
    """An OOM inside a CUDA graph tree leaves it inconsistent (torch then asserts on the next recording, as an H100
    run did): with graphs on ("max", pretended here: the CPU has none) the retry runs freshly compiled code."""
    cfg = load_config(toy_config_path(tmp_path), overrides=["train.compile=default"])
    task = build_task(cfg.task, **cfg.data)
    val = task.load("val")
    want = build_trainer(cfg, task, "naive", CPU).evaluate(val)
    trainer = build_trainer(cfg, task, "naive", CPU)
    trainer.loss.mode = mode
    real, calls, before = trainer._evaluate, [], trainer.loss.fn

    def oom_once(feed, limit):
        calls.append(trainer.eval_batch_size)
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(feed, limit)

    trainer._evaluate = oom_once
    got = trainer.evaluate(val)
    assert calls == [128, 64]
    assert (trainer.loss.fn is not before) == (mode == "max")
    assert trainer.loss.compiled and got["count"] == want["count"] == 128 and got["acc"] == want["acc"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)


class _GraphBreakAttention(NaiveAttention):
    """Naive attention with a graph break: it cannot compile into one graph."""

    def forward(self, q, k, v, key_padding_mask=None):
        torch._dynamo.graph_break()
        return super().forward(q, k, v, key_padding_mask)


def test_a_backend_that_cannot_compile_falls_back_to_eager_in_one_line(tmp_path, aot_eager, capsys):
    cfg = load_config(toy_config_path(tmp_path), None, DROPOUT)
    task = build_task(cfg.task, **cfg.data)
    batches = _batches(task, 2, 8, padded=True)
    BACKENDS.register("_graph_break")(_GraphBreakAttention)
    try:
        trainer, *got = _steps(cfg.with_settings(["train.compile=default"]), task, "_graph_break", batches)
    finally:
        BACKENDS.unregister("_graph_break")
    _, *want = _steps(cfg.with_settings(["train.compile=none"]), task, "naive", batches)
    lines = [line for line in capsys.readouterr().err.splitlines() if "cannot be compiled" in line]
    assert len(lines) == 1 and "_graph_break" in lines[0] and "training eagerly" in lines[0]
    assert trainer.loss.effective() == {"mode": "none", "requested": "default", "fallback": trainer.loss.fallback}
    assert "graph_break" in trainer.loss.fallback.lower() or "graph break" in trainer.loss.fallback.lower()
    for a, b in zip(want, got, strict=True):  # the first step, retried eagerly, is eager's step
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x, y)


def test_compiled_run_resumes_bit_identically_and_records_its_mode(tmp_path, aot_eager):
    """Dropout 0.1 is on; the compiled step draws eager's masks of the per-step seed, so a resume repeats them."""
    sets = ["train.steps=30", "train.eval_every=10", "train.compile=default"]
    cfg = load_config(toy_config_path(tmp_path), None, sets)
    full = train(cfg, "naive", device="cpu", out_dir=tmp_path / "a")
    assert train(cfg, "naive", device="cpu", out_dir=tmp_path / "b", stop_after=15)["stopped_at"] == 15
    resumed = train(cfg, "naive", device="cpu", out_dir=tmp_path / "b", resume=True)
    assert resumed["metrics"]["test_loss"] == full["metrics"]["test_loss"]
    a, b = load_checkpoint(tmp_path / "a" / LAST)["model"], load_checkpoint(tmp_path / "b" / LAST)["model"]
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert full["compile"] == {"mode": "default", "requested": "default", "fallback": None}
    eager = train(load_config(toy_config_path(tmp_path), None, sets[:2]), "naive", device="cpu", out_dir=tmp_path / "c")
    assert eager["compile"]["mode"] == "none" and eager["config_hash"] == full["config_hash"]
    assert eager["metrics"]["test_loss"] == pytest.approx(full["metrics"]["test_loss"], rel=1e-5)


def test_modes_resolve_per_device_and_stay_out_of_the_config_hash(tmp_path):
    assert resolve_mode("auto", CPU) == "none" and resolve_mode("max", CPU) == "default"
    assert resolve_mode("auto", torch.device("cuda")) == "max" and resolve_mode("default", torch.device("cuda"))
    base = load_config(toy_config_path(tmp_path))
    speed = ["train.compile=max", "train.eval_batch_size=7", "train.data_placement=host"]
    assert config_hash(load_config(toy_config_path(tmp_path), None, speed)) == config_hash(base)
    assert config_hash(load_config(toy_config_path(tmp_path), None, ["train.lr=0.02"])) != config_hash(base)


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") or shutil.which("c++")), reason="inductor on the CPU needs a C++ compiler")
def test_inductor_step_draws_eager_dropout(tmp_path):
    """Inductor itself (on the CPU): with its own RNG the dropout masks, hence the loss, would differ from eager's."""
    cfg = load_config(toy_config_path(tmp_path), None, ["model.dropout=0.3", "model.attention_dropout=0.3"])
    task = build_task(cfg.task, **cfg.data)
    batches = _batches(task, 1, 16, padded=True)
    _, (want_loss,), want_grads, _ = _steps(cfg.with_settings(["train.compile=none"]), task, "naive", batches)
    trainer, (loss,), grads, _ = _steps(cfg.with_settings(["train.compile=default"]), task, "naive", batches)
    assert trainer.loss.compiled and trainer.loss.fallback is None
    torch.testing.assert_close(loss, want_loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_block_sparse_flash_compiles_from_a_cold_start(aot_eager):
    """Its block lists need a data-dependent width that a graph cannot trace: the trainer builds them before it
    compiles, so the first step is already compiled (no eager fallback) and gives eager's losses."""
    sets = ["attention.block_sparse_flash.block=16", "attention.block_sparse_flash.fallback=kernel", "model.layers=1"]
    cfg = load_config("listops", "tiny", [*DROPOUT, *sets, "data.max_length=48", "model.dim=32", "model.heads=2"])
    task = build_task(cfg.task, **cfg.data)
    batches = _batches(task, 2, 2, padded=True)
    runs = {}
    for mode in ("none", "default"):
        runs[mode] = _steps(cfg.with_settings([f"train.compile={mode}"]), task, "block_sparse_flash", batches)
    (_, want, *_), (compiled, got, *_) = runs["none"], runs["default"]
    assert compiled.loss.compiled and compiled.loss.fallback is None
    torch.testing.assert_close(got, want)
