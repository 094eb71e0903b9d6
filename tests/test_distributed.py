"""Data-parallel training with two gloo processes on the CPU equals one process with the same global batch."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from lra.results.store import load_records
from lra.train.checkpoint import LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.launch import strip_nproc
from tests.toy_task import toy_config_path

NO_DROPOUT = ["model.dropout=0.0", "train.steps=40", "train.eval_every=20"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, cfg_path: str, out_dir: str, store: str, stop_after, resume) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    from lra.train import distributed as dist
    from lra.train.run import train

    dist.init_from_env("cpu")
    try:
        cfg = load_config(cfg_path, None, NO_DROPOUT)
        train(cfg, "naive", out_dir=out_dir, device="cpu", results_store=store, stop_after=stop_after, resume=resume)
    finally:
        dist.shutdown()


def _spawn(world, tmp_path, name, stop_after=None, resume=False):
    cfg_path = toy_config_path(tmp_path)
    args = (world, _free_port(), cfg_path, str(tmp_path / name), str(tmp_path / "store"), stop_after, resume)
    mp.spawn(_worker, args=args, nprocs=world, join=True)


def _single(tmp_path, name, stop_after=None, resume=False):
    from lra.train.run import train

    cfg = load_config(toy_config_path(tmp_path), None, NO_DROPOUT)
    return train(
        cfg,
        "naive",
        out_dir=tmp_path / name,
        device="cpu",
        results_store=tmp_path / "store",
        stop_after=stop_after,
        resume=resume,
    )


def _weights(path):
    """Weights of the final checkpoint, less the key-projection bias.

    Softmax is invariant to a bias added to every key, so that bias's gradient is rounding noise (~1e-10) which
    Adam normalises into full-size steps: it differs between any two summation orders, one process or two.
    """
    state = dict(load_checkpoint(path / LAST)["model"])
    for name, value in list(state.items()):
        if name.endswith("attn.qkv.bias"):
            third = value.shape[0] // 3
            state[name] = torch.cat([value[:third], value[2 * third :]])
    return state


def _history(path):
    import json

    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_processes_equal_one_and_write_one_record(tmp_path):
    _single(tmp_path, "one")
    _spawn(2, tmp_path, "two")
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)
    for h1, h2 in zip(_history(tmp_path / "one"), _history(tmp_path / "two"), strict=True):
        assert h1["step"] == h2["step"]
        assert h1["val_loss"] == pytest.approx(h2["val_loss"], rel=1e-4)
        assert h1["train_loss"] == pytest.approx(h2["train_loss"], rel=1e-4)
    records = load_records(tmp_path / "store")
    assert len(records) == 2  # one per run: the two-process run wrote exactly one
    assert sorted(r["world_size"] for r in records) == [1, 2]


@pytest.mark.slow
def test_resume_across_world_sizes(tmp_path):
    _spawn(2, tmp_path, "run", stop_after=30)  # interrupted with 2 processes after the step-20 checkpoint
    assert load_checkpoint(tmp_path / "run" / LAST)["state"]["step"] == 20
    _single(tmp_path, "run", resume=True)  # finished by 1 process
    _single(tmp_path, "ref")
    a, b = _weights(tmp_path / "run"), _weights(tmp_path / "ref")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


def test_global_batch_must_divide_among_processes():
    from lra.train.batches import batch_indices

    with pytest.raises(ValueError, match="does not divide"):
        batch_indices(0, 100, 30, seed=0, rank=0, world=4)
    parts = [batch_indices(3, 100, 32, seed=1, rank=r, world=4) for r in range(4)]
    whole = batch_indices(3, 100, 32, seed=1)
    assert sorted(sum((p.tolist() for p in parts), [])) == sorted(whole.tolist())


def test_strip_nproc():
    assert strip_nproc(["run", "listops", "--nproc", "2", "--attn", "naive"]) == ["run", "listops", "--attn", "naive"]
    assert strip_nproc(["run", "x", "--nproc=4"]) == ["run", "x"]


def _bench_worker(rank: int, world: int, port: int, cfg_path: str, out_file: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    torch.set_num_threads(1)
    import json

    from lra.bench.train import bench_train
    from lra.train import distributed as dist

    dist.init_from_env("cpu")
    try:
        recs = bench_train(cfg_path, ["naive"], steps=3, warmup=1, device="cpu")
    finally:
        dist.shutdown()
    with open(f"{out_file}.{rank}", "w") as f:
        json.dump([{k: r[k] for k in ("status", "world_size", "metrics", "batch_size", "seq_len")} for r in recs], f)


def test_bench_train_under_two_processes_counts_the_global_batch(tmp_path):
    import json

    cfg_path = toy_config_path(tmp_path)
    mp.spawn(_bench_worker, args=(2, _free_port(), cfg_path, str(tmp_path / "recs")), nprocs=2, join=True)
    per_rank = [json.loads((tmp_path / f"recs.{r}").read_text()) for r in range(2)]
    for recs in per_rank:
        (rec,) = recs
        assert rec["status"] == "ok" and rec["world_size"] == 2
        m = rec["metrics"]
        assert m["tokens_per_s"] == pytest.approx(m["steps_per_s"] * 32 * 24)  # global batch 32, not 16 per rank
    # every rank reports the slowest rank's step time, so the ranks agree
    assert per_rank[0][0]["metrics"]["ms_per_step"] == per_rank[1][0]["metrics"]["ms_per_step"]
