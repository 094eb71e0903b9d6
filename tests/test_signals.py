"""A signal asks a training run to stop: `stop_on_terminate`'s handlers, a run stopped by SIGTERM at an evaluation and
resumed ending exactly as an uninterrupted one (bit for bit on the CPU), a campaign session asked by SIGUSR1 ending
with its stage saved and the ledger saying so, and `lra run` as a process stopped by SIGTERM telling how to resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lra.campaign import drive
from lra.campaign.drive import run_campaign
from lra.core.signals import STOP, stop_on_terminate
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import load_config
from lra.train.run import train
from tests.test_campaign import options
from tests.toy_task import toy_config_path

ROOT = Path(__file__).resolve().parents[1]
SETS = ["train.steps=60", "train.eval_every=20", "train.log_every=5"]


def run(tmp_path, out, **kw):
    cfg = load_config(toy_config_path(tmp_path), None, SETS)
    return train(cfg, "naive", device="cpu", out_dir=tmp_path / out, **kw)


def lines(path: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k != "time"} for x in path.read_text().splitlines()]


def test_the_first_signal_asks_a_second_sigterm_interrupts_and_the_handlers_come_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    with pytest.raises(KeyboardInterrupt), stop_on_terminate() as stop:
        assert stop is STOP and not stop.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.signal == "SIGUSR1"
        os.kill(os.getpid(), signal.SIGUSR1)  # asking again changes nothing
        assert stop.signal == "SIGUSR1"
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal that is SIGTERM: stop now
    assert {sig: signal.getsignal(sig) for sig in before} == before and not STOP.requested


def test_a_run_stopped_by_sigterm_saves_where_it_stopped_and_resumes_as_an_uninterrupted_run(tmp_path):
    full = run(tmp_path, "a")
    asked = []

    def signal_at_first_eval(step, _model):
        if not asked:
            asked.append(step)
            os.kill(os.getpid(), signal.SIGTERM)

    with stop_on_terminate():
        stopped = run(tmp_path, "b", on_eval=signal_at_first_eval)
    assert asked == [20]
    assert stopped["stopped_at"] == 20 and stopped["stopped_by"] == "SIGTERM" and "time_limit_s" not in stopped
    assert (stopped["session"]["from_step"], stopped["session"]["to_step"]) == (0, 20)
    ckpt = load_checkpoint(tmp_path / "b" / LAST)
    assert ckpt["step"] == 20 and [s["to_step"] for s in ckpt["state"]["sessions"]] == [20]
    resumed = run(tmp_path, "b", resume=True)
    assert resumed["steps"] == full["steps"] == 60
    assert lines(tmp_path / "b" / "metrics.jsonl") == lines(tmp_path / "a" / "metrics.jsonl")
    assert resumed["metrics"]["test_loss"] == full["metrics"]["test_loss"]
    for name in (LAST, BEST):
        a, b = load_checkpoint(tmp_path / "a" / name)["model"], load_checkpoint(tmp_path / "b" / name)["model"]
        assert all(torch.equal(a[key], b[key]) for key in a), name
    assert [(s["from_step"], s["to_step"]) for s in resumed["sessions"]] == [(0, 20), (20, 60)]


def test_a_campaign_session_asked_to_stop_saves_its_stage_and_the_next_session_finishes(tmp_path, monkeypatch):
    note = drive.Session.note_progress

    def note_then_ask(self, item, started, step):
        note(self, item, started, step)
        if item["stage"] == "path-64" and step == 6:
            os.kill(os.getpid(), signal.SIGUSR1)

    monkeypatch.setattr(drive.Session, "note_progress", note_then_ask)
    with stop_on_terminate():
        ledger = run_campaign(options(tmp_path))
    session = ledger["sessions"][0]
    assert session["ended"] == "stopped (SIGUSR1)"
    assert [(w["stage"], w["from_step"], w["to_step"]) for w in session["work"]] == [("pathfinder", 0, 12),
                                                                                    ("path-64", 0, 6)]  # fmt: skip
    assert load_checkpoint(tmp_path / "state" / "path-64" / LAST)["step"] == 6
    monkeypatch.setattr(drive.Session, "note_progress", note)
    ledger = run_campaign(options(tmp_path))  # no signal: it resumes at step 6 and finishes
    second = ledger["sessions"][1]
    assert second["ended"] == "campaign done" and [(w["stage"], w["from_step"], w["to_step"]) for w in
                                                   second["work"]] == [("path-64", 6, 12)]  # fmt: skip


# `lra run` of the toy task for many steps, in a process of its own; the test sends SIGTERM once its run folder is there
RUN = """
import sys
import tests.toy_task  # registers the task
from lra.cli.main import main
sys.exit(main(["run", sys.argv[1], "--attn", "naive", "--device", "cpu", "--out", sys.argv[2], "--no-record",
               "--set", "train.steps=100000", "--set", "train.eval_every=50000", "--set", "train.log_every=5"]))
"""


def test_lra_run_stopped_by_sigterm_exits_cleanly_and_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    config = toy_config_path(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(config), str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (out / "config.json").is_file() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[0][-2000:]
    proc.send_signal(signal.SIGTERM)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, text[-2000:]
    step = load_checkpoint(out / LAST)["step"]
    assert 0 < step < 100000 and step % 5 == 0
    assert f"stopped at step {step} of 100000 as SIGTERM asked" in " ".join(text.split())
    assert "--resume" in text and str(out) in " ".join(text.split())
