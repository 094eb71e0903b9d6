"""The training display: the bar fits 80 columns whole, and its steps/s is the summary's (one window definition)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lra.train import display
from lra.train.config import load_config
from lra.train.display import Throughput, stats_text, train_progress
from lra.train.run import RunState, train
from tests.toy_task import toy_config_path


def _rendered_lines(progress, console: Console) -> list[str]:
    lines = console.render_lines(progress.get_renderable(), console.options, pad=False)
    return ["".join(segment.text for segment in line) for line in lines]


@pytest.mark.parametrize("done, total", [(400, 400), (31_200, 62_400)])
def test_training_bar_fits_80_columns_untruncated(done, total):
    console = Console(file=io.StringIO(), width=80, color_system=None)
    progress = train_progress(console=console)
    stats = stats_text(12.345, 0.567, 123.45)  # a wide case: two-digit loss, three-digit rate
    progress.add_task("train", total=total, completed=done, stats=stats)
    (line,) = _rendered_lines(progress, console)
    assert len(line.rstrip()) <= 80
    assert f"{done}/{total}" in line and stats in line and "…" not in line


def test_throughput_leaves_out_the_first_window_and_evaluation(monkeypatch):
    clock = iter([0.0, 10.0, 12.0, 14.0, 20.0, 25.0])
    monkeypatch.setattr(display.time, "perf_counter", lambda: next(clock))
    state = RunState()
    timer = Throughput(state)  # t = 0
    timer.close(5, final=False)  # t = 10: the first window (warm-up) is not timed
    assert timer.rate == pytest.approx(0.5) and state.timed_steps == 0
    timer.restart()  # t = 12, after an evaluation
    timer.close(5, final=False)  # t = 14
    timer.restart()  # t = 20
    timer.close(10, final=True)  # t = 25
    assert (state.timed_steps, state.step_time) == (15, pytest.approx(7.0))
    assert timer.rate == pytest.approx(15 / 7)


def test_a_run_that_ends_in_its_first_window_is_timed(monkeypatch):
    clock = iter([0.0, 4.0])
    monkeypatch.setattr(display.time, "perf_counter", lambda: next(clock))
    timer = Throughput(RunState())
    timer.close(8, final=True)
    assert timer.rate == pytest.approx(2.0)


def test_bar_steps_per_second_is_the_summary_figure(tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr("lra.train.run.stats_text", lambda loss, acc, rate: shown.append(rate) or "")
    cfg = load_config(toy_config_path(tmp_path), None, ["train.steps=30", "train.eval_every=10"])
    summary = train(cfg, "naive", device="cpu", out_dir=tmp_path / "run")
    assert len(shown) == 6  # log_every 5
    assert shown[-1] == summary["metrics"]["steps_per_s"] > 0
