"""`--time-limit`: durations, the pacing rule, and a run stopped on time then resumed ending exactly as an
uninterrupted run (same loss history, same weights and optimizer state, bit for bit on the CPU)."""

from __future__ import annotations

import json

import pytest
import torch

from lra.core.errors import ConfigError
from lra.train.budget import Pacer, TimeBudget, format_duration, parse_duration
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.run import train
from tests.toy_task import toy_config_path

SETS = ["train.steps=60", "train.eval_every=20", "train.log_every=5"]


class FakeClock:
    """A clock that moves `tick` seconds each time it is read (the loop reads it a fixed number of times per step
    window, so the run stops at the same point on every machine)."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def run(tmp_path, out, **kw):
    cfg = load_config(toy_config_path(tmp_path), None, SETS)
    return train(cfg, "naive", device="cpu", out_dir=tmp_path / out, **kw)


@pytest.mark.parametrize(("text", "seconds"), [("25m", 1500), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400),
                                               ("600", 600), (" 2M ", 120)])  # fmt: skip
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "25 m", "5x", "0", "0m", "1m-3s"])
def test_bad_durations_are_clear_errors(text):
    with pytest.raises(ConfigError, match="--time-limit"):
        parse_duration(text)


def test_format_duration():
    assert [format_duration(s) for s in (1500, 5430, 42.4, 0)] == ["25m", "1h30m30s", "42s", "0s"]


def test_pacer_needs_the_steps_the_evaluation_and_the_test():
    clock = FakeClock(0.0)
    budget = TimeBudget(100.0, clock=clock)
    pacer = Pacer(budget, eval_steps=4, test_steps=8)
    pacer.window(10, 30.0)  # first window: 3 s/step, compilation included
    pacer.window(10, 10.0)  # then 1 s/step: the first window's extra 20 s is the compile guess
    assert pacer.step_s == 1.0 and pacer.first_extra == 20.0
    pacer.saved(2.0)
    assert pacer.needed(10, evaluates=False, final=False) == pytest.approx(1.25 * 12)
    assert pacer.needed(10, evaluates=True, final=False) == pytest.approx(1.25 * (12 + 4 + 20))
    pacer.evaluation(2.0)  # measured: 0.5 s per evaluation step
    assert pacer.needed(10, evaluates=True, final=True) == pytest.approx(1.25 * (12 + 2 + 8 * 0.5))
    assert pacer.fits(10, evaluates=False, final=False)  # 15 s of the 98 left
    clock.now = 82.0
    assert pacer.fits(10, evaluates=False, final=False)  # 15 s of 18 left less the 2 s margin
    clock.now = 84.0
    assert not pacer.fits(10, evaluates=False, final=False)  # 15 s > 16 left less the margin


def test_a_run_stopped_on_time_and_resumed_ends_as_an_uninterrupted_one(tmp_path):
    full = run(tmp_path, "a")
    clock = FakeClock(1.0)
    budget = TimeBudget(40.0, clock=clock)
    stopped = run(tmp_path, "b", time_budget=budget)
    step = stopped["stopped_at"]
    assert stopped["run_dir"] == str(tmp_path / "b") and stopped["time_limit_s"] == 40.0
    assert (stopped["session"]["from_step"], stopped["session"]["to_step"]) == (0, step)
    assert 0 < step < 60 and step % 5 == 0 and step % 20 != 0  # mid-way between evaluations
    assert budget.elapsed() <= budget.limit_s + clock.tick  # it left within the budget (this reading ticks too)
    ckpt = load_checkpoint(tmp_path / "b" / LAST)
    assert ckpt["step"] == step  # saved where it stopped, not at the last evaluation
    assert [s["to_step"] for s in ckpt["state"]["sessions"]] == [step]
    resumed = run(tmp_path, "b", resume=True)
    assert resumed["steps"] == full["steps"] == 60
    strip = lambda hist: [{k: v for k, v in h.items() if k != "time"} for h in hist]  # noqa: E731
    lines = lambda out: [json.loads(x) for x in (tmp_path / out / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert strip(lines("b")) == strip(lines("a"))  # train loss/acc of every window, val loss/acc: exactly equal
    assert resumed["metrics"]["test_loss"] == full["metrics"]["test_loss"]
    for name in (LAST, BEST):
        a, b = load_checkpoint(tmp_path / "a" / name), load_checkpoint(tmp_path / "b" / name)
        for key in a["model"]:
            assert torch.equal(a["model"][key], b["model"][key]), (name, key)
    opt_a = load_checkpoint(tmp_path / "a" / LAST)["optimizer"]
    opt_b = load_checkpoint(tmp_path / "b" / LAST)["optimizer"]
    for pid, st in opt_a["state"].items():
        for key, value in st.items():
            assert torch.equal(value, opt_b["state"][pid][key]), (pid, key)
    sessions = resumed["sessions"]
    assert [(s["from_step"], s["to_step"]) for s in sessions] == [(0, step), (step, 60)]
    assert sum(s["train_s"] for s in sessions) == pytest.approx(resumed["metrics"]["train_time_s"], abs=0.01)


def test_no_time_left_stops_after_the_first_window(tmp_path):
    budget = TimeBudget(1e-3)  # the real clock: gone before the first window ends
    stopped = run(tmp_path, "c", time_budget=budget)
    assert stopped["stopped_at"] == 5 and load_checkpoint(tmp_path / "c" / LAST)["step"] == 5
