"""The campaign's ledger, `campaign.json` in its state folder: what the campaign is, where each stage stands, and
every session's device seconds. Written by `lra campaign` only (atomically, after every change), never by hand.

{"format": 1, "campaign": {target, attn, preset, seed, overrides}, "stages": {task: {index, status (pending,
running, done), steps, total_steps, config_hash, data_hashes, train_s, device_s, best_val_acc, test_acc, val_acc,
record}}, "sessions": [{n, started, host, device, time_limit_s, wall_s, ended, work: [{stage, from_step, to_step,
train_s, data_s, wall_s}]}], "totals": {device_s, train_s, device_hours}}

A session's `wall_s` is the whole command, from its start to its last write (data drawing, compilation and
evaluation included): the device was held all that time, so it is what a session costs in GPU-seconds. A session
killed before its end keeps `ended: "running"` and the seconds written at its last change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lra.core.atomic import write_json
from lra.core.errors import DataCorruptError, RunSetupError

LEDGER = "campaign.json"
FORMAT = 1


def read_ledger(state: Path) -> dict[str, Any] | None:
    """The ledger in `state`, or None when there is none yet; an unreadable one is a DataCorruptError."""
    path = state / LEDGER
    if not path.is_file():
        return None
    try:
        ledger = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataCorruptError(
            f"{path} cannot be read ({e}); restore it from git (it is committed with the state)"
        ) from None
    if ledger.get("format") != FORMAT:
        raise DataCorruptError(f"{path}: ledger format {ledger.get('format')!r}, this lra writes {FORMAT}")
    return ledger


def new_ledger(identity: dict[str, Any], stages: list[str]) -> dict[str, Any]:
    return {"format": FORMAT, "campaign": identity, "stages": {t: {"index": i} for i, t in enumerate(stages, 1)},
            "sessions": [], "totals": {}}  # fmt: skip


def check_identity(ledger: dict[str, Any], identity: dict[str, Any], state: Path) -> None:
    """Refuse to carry on a campaign with other options than it started with."""
    then = ledger["campaign"]
    diffs = [f"{k} {then.get(k)!r} (now {identity.get(k)!r})" for k in sorted(identity) if then.get(k) != identity[k]]
    if diffs:
        raise RunSetupError(
            f"{state} holds a campaign started with other options: {', '.join(diffs)}; run it with the options it "
            "started with (see its campaign.json), or give another --state"
        )


def write_ledger(state: Path, ledger: dict[str, Any]) -> None:
    """Sum the totals and write the ledger atomically."""
    sessions = ledger["sessions"]
    device_s = sum(s.get("wall_s") or 0.0 for s in sessions)
    train_s = sum(w.get("train_s") or 0.0 for s in sessions for w in s.get("work", []))
    inherited = sum(st.get("inherited_device_s") or 0.0 for st in ledger["stages"].values())
    ledger["totals"] = {
        "sessions": len(sessions),
        "device_s": round(device_s + inherited, 3),
        "train_s": round(train_s, 3),
        "device_hours": round((device_s + inherited) / 3600, 4),
    }
    for task, stage in ledger["stages"].items():
        work = [w for sess in sessions for w in sess.get("work", []) if w["stage"] == task]
        stage["device_s"] = round(sum(w.get("wall_s") or 0.0 for w in work) + overhead(sessions, task)
                                  + (stage.get("inherited_device_s") or 0.0), 3)  # fmt: skip
        stage["train_s"] = round(sum(w.get("train_s") or 0.0 for w in work), 3)
    write_json(state / LEDGER, ledger)


def overhead(sessions: list[dict[str, Any]], task: str) -> float:
    """The seconds of sessions that began at stage `task` spent outside any stage's work (start-up, the ledger, a
    session killed mid-stage before its work was written): each session's rest goes to the stage it began at."""
    rest = 0.0
    for sess in sessions:
        if sess.get("stage") == task:
            rest += max(0.0, (sess.get("wall_s") or 0.0) - sum(w.get("wall_s") or 0.0 for w in sess.get("work", [])))
    return rest


def stage_pace(ledger: dict[str, Any], task: str) -> tuple[float, float] | None:
    """How stage `task` has gone so far: (training steps per second, seconds a session spent on it besides training
    and drawing data: start-up, compiling, evaluations, checkpoints, the final test), over the sessions that stepped
    it. None before its first step. It prices the rest of the stage, on a device shared as it was then.
    A session killed mid-stage (its machine lost) wrote its steps but not its training seconds: its wall time less
    drawing counts as training (slower than the truth by its start-up; its steps over no seconds made the rate far
    too fast, session 24)."""
    sessions = ledger.get("sessions", [])
    work = [w for s in sessions for w in s.get("work", []) if w["stage"] == task and w["to_step"] > w["from_step"]]
    steps = sum(w["to_step"] - w["from_step"] for w in work)
    train_s = sum(training_s(w) for w in work)
    if steps <= 0 or train_s <= 0:
        return None
    besides = sum((w.get("wall_s") or 0.0) - training_s(w) - (w.get("data_s") or 0.0) for w in work)
    return steps / train_s, (besides + overhead(sessions, task)) / len(work)


def training_s(work: dict[str, Any]) -> float:
    """A session's training seconds on a stage; for one killed before it wrote them, its wall time less drawing."""
    return work.get("train_s") or max(0.0, (work.get("wall_s") or 0.0) - (work.get("data_s") or 0.0))


def device_s_before(ledger: dict[str, Any], task: str) -> float:
    """Device seconds of every stage before `task` (each session's overhead counted at the stage it began at)."""
    index = ledger["stages"][task]["index"]
    return round(sum(st.get("device_s") or 0.0 for st in ledger["stages"].values() if st["index"] < index), 3)
