"""Data-parallel training with two gloo processes on the CPU equals one process with the same global batch.

The processes meet through a file in the test's folder (torch's file:// rendezvous), not a TCP port: a port picked
free and bound later by the workers can be taken in between (by any other process on the machine), which made
these tests fail now and then under the full suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

from lra.train.checkpoint import LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.launch import strip_nproc
from tests.toy_task import toy_config_path

NO_DROPOUT = ["model.dropout=0.0", "train.steps=40", "train.eval_every=20"]


def _join(rank: int, world: int, rendezvous: str) -> None:
    """Join a gloo group of `world` processes through the file `rendezvous` (one fresh file per group)."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)


def _worker(rank: int, world: int, rendezvous: str, cfg_path: str, out_dir: str, sets, stop_after, resume) -> None:
    _join(rank, world, rendezvous)
    from lra.train import distributed as dist
    from lra.train.run import train

    try:
        train(load_config(cfg_path, None, sets), "naive", out_dir=out_dir, device="cpu", stop_after=stop_after,
              resume=resume)  # fmt: skip
    finally:
        dist.shutdown()
    dist.exit_worker(0)


def _spawn(world, tmp_path, name, stop_after=None, resume=False, sets=NO_DROPOUT):
    rendezvous = tmp_path / f"rendezvous-{name}-{len(list(tmp_path.glob('rendezvous-*')))}"
    args = (world, str(rendezvous), toy_config_path(tmp_path), str(tmp_path / name), sets, stop_after, resume)
    mp.spawn(_worker, args=args, nprocs=world, join=True)


def _single(tmp_path, name, stop_after=None, resume=False):
    from lra.train.run import train

    cfg = load_config(toy_config_path(tmp_path), None, NO_DROPOUT)
    return train(cfg, "naive", out_dir=tmp_path / name, device="cpu", stop_after=stop_after, resume=resume)


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
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_processes_equal_one_and_write_one_summary(tmp_path):
    _single(tmp_path, "one")
    _spawn(2, tmp_path, "two")
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)
    for h1, h2 in zip(_history(tmp_path / "one"), _history(tmp_path / "two"), strict=True):
        assert h1["step"] == h2["step"]
        assert h1["val_loss"] == pytest.approx(h2["val_loss"], rel=1e-4)
        assert h1["train_loss"] == pytest.approx(h2["train_loss"], rel=1e-4)
    one = json.loads((tmp_path / "one" / "summary.json").read_text())
    two = json.loads((tmp_path / "two" / "summary.json").read_text())  # rank 0 alone writes it
    assert (one["world_size"], two["world_size"]) == (1, 2) and two["steps"] == 40


@pytest.mark.slow
def test_compiled_steps_under_two_processes_equal_one_eager_process(tmp_path, monkeypatch):
    """DDP wraps the compiled step (it cannot be traced inside one graph); its gradient all-reduce still happens."""
    from lra.train.run import train

    monkeypatch.setenv("LRA_COMPILER", "aot_eager")  # inherited by the spawned workers
    sets = ["model.dropout=0.0", "train.steps=10", "train.eval_every=10"]
    _spawn(2, tmp_path, "two", sets=[*sets, "train.compile=default"])
    train(load_config(toy_config_path(tmp_path), None, sets), "naive", out_dir=tmp_path / "one", device="cpu")
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)
    two = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert two["world_size"] == 2 and two["compile"] == {"mode": "default", "requested": "default", "fallback": None}


@pytest.mark.slow
def test_resume_across_world_sizes(tmp_path):
    """Dropout is off, so one process on the global batch computes what two do on its halves (up to summation
    order): the continued run matches the reference. With dropout on, each rank draws its own masks (seeded by
    seed, rank and step), so a different world size trains on different masks and only the statistics agree."""
    _spawn(2, tmp_path, "run", stop_after=30)  # interrupted with 2 processes after the step-20 checkpoint
    assert load_checkpoint(tmp_path / "run" / LAST)["step"] == 20
    _single(tmp_path, "run", resume=True)  # finished by 1 process
    _single(tmp_path, "ref")
    a, b = _weights(tmp_path / "run"), _weights(tmp_path / "ref")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-5, msg=name)


def _dropout_worker(rank: int, world: int, rendezvous: str, cfg_path: str, out_dir: str) -> None:
    """Train 3 steps with dropout 0.5, saving the zero pattern of each step's first dropout call on this rank."""
    _join(rank, world, rendezvous)
    import torch.nn.functional as F

    from lra.train import distributed as dist
    from lra.train.run import train

    masks, real = [], F.dropout

    def dropout(x, p=0.5, training=True, inplace=False):
        out = real(x, p, training, inplace)
        if training and p > 0:
            masks.append(out == 0)
        return out

    F.dropout = dropout
    try:
        cfg = load_config(cfg_path, None, ["model.dropout=0.5", "train.steps=3", "train.eval_every=3"])
        train(cfg, "naive", out_dir=out_dir, device="cpu")
    finally:
        dist.shutdown()
    calls_per_step = len(masks) // 3
    torch.save([masks[i * calls_per_step] for i in range(3)], f"{out_dir}.masks.{rank}")
    dist.exit_worker(0)


def test_dropout_differs_per_rank_and_repeats_per_step(tmp_path):
    cfg = toy_config_path(tmp_path)
    for run in ("a", "b"):
        mp.spawn(_dropout_worker, args=(2, str(tmp_path / f"rdzv-{run}"), cfg, str(tmp_path / run)), nprocs=2)
    a0, a1, b0 = (torch.load(tmp_path / f"{run}.masks.{r}") for run, r in (("a", 0), ("a", 1), ("b", 0)))
    for step in range(3):
        assert a0[step].shape == a1[step].shape and a0[step].float().mean().item() == pytest.approx(0.5, abs=0.1)
        assert not torch.equal(a0[step], a1[step]), step  # rank 1 draws its own masks
        assert torch.equal(a0[step], b0[step]), step  # the same (seed, rank, step): the same masks
    assert not torch.equal(a0[0], a0[1])  # and each step its own


def test_global_batch_must_divide_among_processes():
    from lra.train.batches import batch_indices

    with pytest.raises(ValueError, match="does not divide"):
        batch_indices(0, 100, 30, seed=0, rank=0, world=4)
    parts = [batch_indices(3, 100, 32, seed=1, rank=r, world=4) for r in range(4)]
    whole = batch_indices(3, 100, 32, seed=1)
    assert sorted(sum((p.tolist() for p in parts), [])) == sorted(whole.tolist())


def test_a_worker_leaves_with_its_code_and_output_but_without_teardown():
    """exit_worker skips the interpreter's teardown (the atexit handler never prints) yet flushes what was printed."""
    script = (
        "import atexit, sys\n"
        "from lra.train.distributed import exit_worker\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "print('written', end='')\n"
        "sys.stderr.write('also written')\n"
        "exit_worker(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, "written", "also written")


def test_python_m_lra_leaves_through_exit_worker_only_in_a_rank():
    """`python -m lra` in a launcher's rank (WORLD_SIZE > 1) exits through exit_worker, elsewhere normally."""
    env = {**os.environ, "WORLD_SIZE": "2", "PYTHONPATH": os.getcwd()}
    hook = "import atexit; atexit.register(lambda: print('teardown ran'))"
    argv = [sys.executable, "-c", f"{hook}; import runpy; runpy.run_module('lra', run_name='__main__')", "list"]
    as_rank = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    env["WORLD_SIZE"] = "1"
    alone = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert as_rank.returncode == alone.returncode == 0
    assert "teardown ran" not in as_rank.stdout and "teardown ran" in alone.stdout
    assert as_rank.stdout.strip() == alone.stdout.replace("teardown ran", "").strip()


def test_strip_nproc():
    assert strip_nproc(["run", "listops", "--nproc", "2", "--attn", "naive"]) == ["run", "listops", "--attn", "naive"]
    assert strip_nproc(["run", "x", "--nproc=4"]) == ["run", "x"]


def _bench_worker(rank: int, world: int, rendezvous: str, cfg_path: str, out_file: str) -> None:
    _join(rank, world, rendezvous)
    from lra.bench.train import bench_train
    from lra.train import distributed as dist

    try:
        recs = bench_train(cfg_path, ["naive"], steps=3, warmup=1, device="cpu")
    finally:
        dist.shutdown()
    with open(f"{out_file}.{rank}", "w") as f:
        json.dump([{k: r[k] for k in ("status", "world_size", "metrics", "batch_size", "seq_len")} for r in recs], f)
    dist.exit_worker(0)


def test_bench_train_under_two_processes_counts_the_global_batch(tmp_path):
    cfg_path = toy_config_path(tmp_path)
    mp.spawn(_bench_worker, args=(2, str(tmp_path / "rdzv"), cfg_path, str(tmp_path / "recs")), nprocs=2, join=True)
    per_rank = [json.loads((tmp_path / f"recs.{r}").read_text()) for r in range(2)]
    for recs in per_rank:
        (rec,) = recs
        assert rec["status"] == "ok" and rec["world_size"] == 2
        m = rec["metrics"]
        assert m["tokens_per_s"] == pytest.approx(m["steps_per_s"] * 32 * 24)  # global batch 32, not 16 per rank
    # every rank reports the slowest rank's step time, so the ranks agree
    assert per_rank[0][0]["metrics"]["ms_per_step"] == per_rank[1][0]["metrics"]["ms_per_step"]
