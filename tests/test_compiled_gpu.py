"""train.compile on a CUDA GPU with inductor: default and max (CUDA graphs) give eager's losses and gradients with
dropout on (inductor draws eager's masks), CUDA graphs are not skipped, naive attention stays naive (inductor does
not rewrite it into SDPA), and a split on the device gives the host path's batches."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from lra.train.config import load_config
from lra.train.feed import DeviceSplit, HostSplit, TrainBatches, place_split
from lra.train.trainer import build_trainer
from tasks import build_task
from tasks._pathfinder.views import LazyImages, PixelTokens
from tasks.base import Split
from tests.reference import TEST_SEED

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")
SETS = ["model.dropout=0.1", "model.attention_dropout=0.1", "data.max_length=256"]


def _batches(task, count: int, batch: int):
    rng = np.random.default_rng(TEST_SEED)
    out = []
    for _ in range(count):
        tokens = rng.integers(1, task.vocab_size, size=(batch, task.seq_len))
        lengths = rng.integers(task.seq_len // 2, task.seq_len + 1, size=batch)
        tokens[np.arange(task.seq_len) >= lengths[:, None]] = 0
        labels = rng.integers(0, task.num_classes, size=batch)
        out.append((torch.from_numpy(tokens).to(CUDA), torch.from_numpy(labels).to(CUDA)))
    return out


def _run(cfg, task, backend, batches):
    trainer = build_trainer(cfg, task, backend, CUDA)
    losses, grads = [], None
    for tokens, labels in batches:
        losses.append(trainer.step(tokens, labels).loss)
        grads = grads or [p.grad.clone() for p in trainer.model.parameters()]
    ev = trainer.evaluate(Split(batches[0][0].cpu().numpy(), batches[0][1].cpu().numpy()))
    return trainer, torch.stack(losses), grads, ev


CASES = [("naive", "none"), ("flash", "none"), ("sdpa_mem_efficient", "none"), ("sdpa_flash", "bf16"),
         ("block_sparse_flash", "bf16")]  # fmt: skip


@functools.cache  # both tests below read one comparison per case
def _compare(backend: str, amp: str, mode: str):
    """Eager and compiled runs of the same four steps: (tolerances, eager results, compiled results)."""
    cfg = load_config("listops", "tiny", [*SETS, f"train.amp={amp}"])
    task = build_task(cfg.task, **cfg.data)
    batches = _batches(task, 4, 16)
    want = _run(cfg.with_settings(["train.compile=none"]), task, backend, batches)
    counters.clear()
    got = _run(cfg.with_settings([f"train.compile={mode}"]), task, backend, batches)
    assert got[0].loss.compiled and got[0].loss.fallback is None
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert counters["inductor"]["fuse_attention"] == 0  # naive stays materialised attention
    tol = dict(rtol=1e-4, atol=1e-5) if amp == "none" else dict(rtol=2e-2, atol=2e-3)
    return tol, want, got


def _naive_drifts(reason: str) -> list:
    """CASES with naive marked as a strict xfail: measured on the H200 (torch 2.11), compiled naive is not eager's
    on CUDA (on the CPU inductor matches eager); the cause is not found yet."""
    return [pytest.param(*CASES[0], marks=pytest.mark.xfail(strict=True, reason=reason)), *CASES[1:]]


@pytest.mark.parametrize("mode", ["default", "max"])
@pytest.mark.parametrize(
    "backend,amp",
    _naive_drifts(
        "fp32 first-step loss 2.3633 against eager's 2.3638 (2.3e-4 relative, above the 1e-4 tolerance; another"
        " dropout mask moves it ~1e-2) in both modes"
    ),
)
def test_compiled_first_step_matches_eager_on_cuda(backend, amp, mode):
    """The first step: same weights, same dropout masks, so the same loss and gradients up to rounding."""
    tol, (_, want_losses, want_grads, want_eval), (_, losses, grads, ev) = _compare(backend, amp, mode)
    torch.testing.assert_close(losses[0], want_losses[0], **tol)  # another dropout mask would differ by ~1e-2
    for got, want in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, want, **(tol if amp == "none" else dict(rtol=5e-2, atol=5e-3)))
    assert ev["acc"] == pytest.approx(want_eval["acc"], abs=1 / 16)  # one prediction may flip on rounding
    assert ev["loss"] == pytest.approx(want_eval["loss"], rel=tol["rtol"], abs=tol["atol"])


@pytest.mark.parametrize("mode", ["default", "max"])
@pytest.mark.parametrize(
    "backend,amp",
    _naive_drifts("the first step's 2.3e-4 grows to 7.7e-3 by the third, the size of another dropout mask"),
)
def test_compiled_steps_follow_eager_on_cuda(backend, amp, mode):
    """Four steps: the compiled run draws eager's dropout masks step after step."""
    tol, (_, want_losses, *_), (_, losses, *_) = _compare(backend, amp, mode)
    torch.testing.assert_close(losses, want_losses, **tol)


def test_split_on_the_gpu_gives_the_host_batches():
    rng = np.random.default_rng(TEST_SEED)
    tokens = rng.integers(0, 300, size=(1000, 64)).astype(np.int16)
    split = Split(tokens, rng.integers(0, 10, size=1000))
    layout = dict(batch_size=64, seed=5)
    device = TrainBatches(DeviceSplit(split, CUDA, pair=False, vocab_size=300), **layout)
    host = TrainBatches(HostSplit(split, CUDA, pair=False), **layout)  # pinned, prefetched
    for step in range(40):  # 15 steps per epoch: three epochs
        a, b = device(step), host(step)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.labels, b.labels) and a.padded == b.padded
    host.close()


def test_auto_placement_keeps_small_splits_on_the_gpu_but_not_drawn_ones():
    small = Split(np.ones((10, 6), np.int16), np.zeros(10))
    assert place_split(small, CUDA, placement="auto", pair=False, vocab_size=257).resident
    drawn = Split(PixelTokens(LazyImages(32, 14, "train", 0, 0, 100)), np.zeros(100))  # cache: false
    assert not place_split(drawn, CUDA, placement="auto", pair=False, vocab_size=257).resident


@pytest.mark.parametrize("backend", ["flash", "block_sparse_flash"])
def test_packed_steps_compile_with_cuda_graphs_and_follow_eager(backend):
    """model.pack_tokens on holey sequences (padding inside, as Pathfinder's black pixels): the compiled step
    (CUDA graphs, the device-side check of the pack) draws eager's dropout masks; nothing is skipped."""
    sets = [*SETS, "train.amp=bf16", "model.pack_tokens=true", "model.pool=mean_all"]
    cfg = load_config("listops", "tiny", sets)
    task = build_task(cfg.task, **cfg.data)
    rng = np.random.default_rng(TEST_SEED)
    batches = []
    for _ in range(3):
        tokens = rng.integers(1, task.vocab_size, size=(16, task.seq_len))
        tokens[rng.random(tokens.shape) < 0.6] = 0
        batches.append((torch.from_numpy(tokens).to(CUDA), torch.from_numpy(rng.integers(0, 10, 16)).to(CUDA)))
    length = max(int((t != 0).sum(1).max()) for t, _ in batches)
    runs = []
    for mode in ("none", "max"):
        counters.clear()
        trainer = build_trainer(cfg.with_settings([f"train.compile={mode}"]), task, backend, CUDA, pack_length=length)
        runs.append(torch.stack([trainer.step(t, y).loss for t, y in batches]))
        assert counters["inductor"]["cudagraph_skips"] == 0 and trainer.loss.fallback is None
    torch.testing.assert_close(runs[1], runs[0], rtol=2e-2, atol=2e-3)
