"""One session of a campaign: find where the state folder says it stands, and carry it as far as the time allows.

For each stage in order: a finished one (its folder holds summary.json) is skipped; otherwise its data is drawn
when absent (all cores), then its run is resumed from `last.pt` or started from the previous stage's `best.pt`
(train.init_from, read from the state folder), and trained until it ends or the `TimeBudget` is nearly spent; the
next stage's data is drawn meanwhile on the idle cores (lra.campaign.prefetch). A stage that ends is tested,
recorded in the results store (its record carries a `campaign` block: the stage, the device seconds of the stages
before it and its own), and its `last.pt` deleted: what stays is small. A stage whose data could not be drawn in the
time left waits for the next session (a draw that outlasts its estimate is stopped at the time limit). A stage that
ended at chance stops the campaign (`chance_margin`): the next stage would start from a model that learned nothing,
and its hours would be spent for nothing.

The state folder then holds exactly what must be committed: `campaign.json` (lra.campaign.ledger), one folder per
stage begun (config.json with the split hashes, metrics.jsonl, best.pt; last.pt while it runs; summary.json once
done) and a `.gitignore` for the lock files. Nothing in it is edited by hand.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lra.campaign.ledger import check_identity, device_s_before, new_ledger, read_ledger, write_ledger
from lra.campaign.plan import Stage, plan_stages
from lra.campaign.prefetch import DRAW_LOG, LOG, Prefetch, prepare_command
from lra.core import locks
from lra.core.errors import RunSetupError
from lra.core.progress import console
from lra.core.signals import STOP
from lra.train.budget import TimeBudget, format_duration
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import config_hash
from lra.train.rundir import CONFIG, METRICS, SUMMARY, RunDir
from tasks import build_task

if TYPE_CHECKING:
    from lra.train.run import OnEval

LOCK = "campaign.lock"
GITIGNORE = "*.lock\n*.log\n"
# Core-seconds to draw one image at each resolution, to judge whether a stage's data fits the time left. Measured on
# the H200 machine (2026-12-04, drawing beside training): Pathfinder-32's 200,000 in 82 s on 16 cores (0.0066),
# Path-64's in 598 s on 14 (0.042), Path-X's in 353 s on 14 (0.025); 256 px from this project's 2-core VM (0.0075,
# which draws 128 px 1.3x faster than that machine), with a margin.
DRAW_CORE_S = {32: 0.01, 64: 0.046, 128: 0.03, 256: 0.015}
# The share of an image's draw that growing its target pair takes (docs/pathfinder.md): a split whose pairs were drawn
# ahead and carried (`lra data prepare --targets-only`) costs only the rest. Without it, a stage whose pairs had come
# with the call was judged by its draw from scratch (2026-12-05: Path-64 "needs ~11m43s", 2m40s left) and not begun.
TARGETS_SHARE = {64: 0.91, 128: 0.73, 256: 0.44}
START_S = 90.0  # a stage needs at least this long after its data: compilation, a first window, a checkpoint
KEPT = (CONFIG, METRICS, SUMMARY, BEST)  # a finished stage's files
SPARE_CORES = 2  # left to the training process (its data loading) while the next stage's data is drawn
CHANCE_SIGMAS = 4.0  # a stage's best validation accuracy must clear the majority class by this many standard errors


def draw_seconds(task, workers: int) -> float:
    """Seconds to draw what `task` lacks on `workers` processes: each split not cached at DRAW_CORE_S an image, less
    TARGETS_SHARE where its target pairs were drawn ahead."""
    details = task.info()["details"]
    per_image = DRAW_CORE_S.get(task.resolution, max(DRAW_CORE_S.values()))
    rest = 1.0 - TARGETS_SHARE.get(task.resolution, 0.0)
    cached, ahead = details.get("caches", {}), details.get("targets", {})
    core_s = 0.0
    for split, n in task.counts.items():
        if not cached.get(split):
            core_s += n * per_image * (rest if split in ahead else 1.0)
    return core_s / workers


def ended_early(otherwise: str) -> str:
    """How the ledger says a session ended before its work did: 'stopped (SIGTERM)' where a signal asked (STOP),
    else `otherwise` (the reason the caller knows: 'time limit', or 'stopped' by the run's own stop_after)."""
    return f"stopped ({STOP.signal})" if STOP.requested else otherwise


def chance_margin(majority: float, n: int) -> float:
    """How far above the majority class a best validation accuracy must be to count as learned: 4 standard errors
    of an accuracy at chance on n examples (the best of many evaluations exceeds 3 about once in 10 runs), at
    least one point."""
    return max(0.01, CHANCE_SIGMAS * math.sqrt(majority * (1 - majority) / max(1, n)))


@dataclass
class CampaignOptions:
    """What `lra campaign` was asked (the identity fields must stay the same over the campaign's sessions)."""

    target: str
    attn: str
    state: Path
    preset: str = "curriculum"
    seed: int = 0
    overrides: list[str] = field(default_factory=list)
    data_dir: str | None = None
    results: str | None = None
    device: str | None = None
    workers: int | None = None
    record: bool = True
    from_state: Path | None = None
    data_only: bool = False  # draw the current stage's data (when absent) and stop: a session's first command
    prefetch: bool = True  # draw the next stage's data while this one trains
    past_chance: bool = False  # go on from a stage that ended at chance

    def identity(self) -> dict[str, Any]:
        return {"target": self.target, "attn": self.attn, "preset": self.preset, "seed": self.seed,
                "overrides": list(self.overrides)}  # fmt: skip


def changed_hash(run: RunDir, stage: Stage) -> tuple[str, str] | None:
    """(then, now): the config hash the stage's run folder was trained with (its config.json) and the one today's
    plan gives, where they differ; None where they agree or the folder has no config.json."""
    try:
        then = json.loads((run.path / CONFIG).read_text(encoding="utf-8")).get("config_hash")
    except (OSError, ValueError):
        return None
    now = config_hash(stage.config)
    return None if then is None or then == now else (then, now)


def check_trained_as_planned(run: RunDir, stage: Stage, state: Path) -> None:
    """Refuse a finished stage that today's plan would train otherwise (the preset or a --set changed since it ran):
    the stages after it would build on a model this recipe never trained."""
    changed = changed_hash(run, stage) if run.finished else None
    if changed is not None:
        raise RunSetupError(
            f"{run.path}: stage {stage.index} {stage.task} finished with other settings (config hash {changed[0]}, "
            f"now {changed[1]}: the preset or a --set changed since it ran); give a new --state, with --from {state} "
            "to take the stages that still match"
        )


@contextlib.contextmanager
def owned(state: Path) -> Iterator[None]:
    """Hold the state folder's lock for the block: one session at a time."""
    fd = locks.try_lock(state / LOCK, "lra campaign")
    if fd is None:
        raise RunSetupError(f"{state} is in use by {locks.holder(state / LOCK)}; wait for it to end, then run again")
    try:
        yield
    finally:
        os.close(fd)


def run_campaign(opts: CampaignOptions, budget: TimeBudget | None = None) -> dict[str, Any]:
    """Carry the campaign one session further; returns the ledger as written."""
    stages = plan_stages(
        opts.target, attn=opts.attn, preset=opts.preset, seed=opts.seed, overrides=list(opts.overrides)
    )
    state = opts.state
    if opts.from_state is not None and read_ledger(state) is None:
        taken_stages(stages, opts.from_state)  # a source it cannot start from is refused before the folder is made
    state.mkdir(parents=True, exist_ok=True)
    with owned(state):
        (state / ".gitignore").write_text(GITIGNORE)
        ledger = read_ledger(state)
        if ledger is None:
            ledger = new_ledger(opts.identity(), [s.task for s in stages])
            if opts.from_state is not None:
                inherit(ledger, stages, state, opts.from_state)
        check_identity(ledger, opts.identity(), state)
        for stage in stages:
            check_trained_as_planned(RunDir(state / stage.task), stage, state)
        return Session(opts, stages, ledger, budget).run()


class Session:
    """This command's entry in the ledger, and the walk over the stages."""

    def __init__(self, opts: CampaignOptions, stages: list[Stage], ledger: dict[str, Any], budget) -> None:
        self.opts, self.stages, self.ledger, self.budget = opts, stages, ledger, budget
        self.clock = budget.clock if budget is not None else time.monotonic
        self.start = budget.start if budget is not None else self.clock()
        for old in ledger["sessions"]:
            if old.get("ended") == "running":
                old["ended"] = "killed"  # it never wrote its end: the seconds it wrote last stand
        current = next((s.task for s in stages if not self.dir(s).finished), stages[-1].task)
        self.entry: dict[str, Any] = {
            "n": len(ledger["sessions"]) + 1,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": socket.gethostname(),
            "attn": opts.attn,
            "stage": current,
            "time_limit_s": None if budget is None else budget.limit_s,
            "wall_s": 0.0,
            "ended": "running",
            "work": [],
        }
        ledger["sessions"].append(self.entry)
        self.save()

    def dir(self, stage: Stage) -> RunDir:
        return RunDir(self.opts.state / stage.task)

    def save(self) -> None:
        self.entry["wall_s"] = round(self.clock() - self.start, 3)
        write_ledger(self.opts.state, self.ledger)

    def run(self) -> dict[str, Any]:
        ended = "campaign done"
        try:
            for stage in self.stages:
                if STOP.requested:  # asked while the last stage ended: the next one waits for the next session
                    ended = ended_early("stopped")
                    break
                if self.dir(stage).finished:
                    self.settle(stage)
                    ended = self.gate(stage)
                else:
                    ended = self.draw_only(stage) if self.opts.data_only else self.work(stage)
                if ended is not None:
                    break
            else:
                ended = "campaign done"
        except BaseException as e:
            self.entry["ended"] = f"error: {type(e).__name__}"
            self.save()
            raise
        self.entry["ended"] = ended
        self.save()
        self.report()
        return self.ledger

    def gate(self, stage: Stage) -> str | None:
        """'at chance' when the finished `stage` has a next one and learned nothing (unless --past-chance)."""
        if stage is self.stages[-1] or self.opts.past_chance or not self.at_chance(stage):
            return None
        return "at chance"

    def at_chance(self, stage: Stage) -> bool:
        """Whether the finished `stage` learned nothing (its best validation accuracy within `chance_margin` of the
        majority class); says so, and what to do, when it did not."""
        metrics = json.loads((self.dir(stage).path / SUMMARY).read_text(encoding="utf-8"))["metrics"]
        best, majority = metrics["val_acc"], metrics["majority_acc"]
        n = int(stage.config.data.get("num_val") or 0)
        if best > majority + chance_margin(majority, n):
            return False
        nxt = self.stages[stage.index]
        console.print(
            f"[bold red]campaign stops[/]: stage {stage.index} {stage.task} ended at chance (best validation "
            f"{best:.2%}, majority class {majority:.2%}, {n:,} examples: within {chance_margin(majority, n):.2%}), "
            f"so stage {nxt.index} {nxt.task} would start from a model that learned nothing. Change the recipe (e.g. "
            f"--set {stage.task}:train.lr=...) in a new --state, or go on anyway with --past-chance",
            highlight=False,
            soft_wrap=True,
        )
        return True

    # ---- one stage
    def work(self, stage: Stage) -> str | None:
        """Draw, start or resume, train; None when the stage ended (go on), else why the session ends here."""
        task = build_task(stage.task, data_dir=self.opts.data_dir, **stage.config.data)
        started = self.clock()
        item = {"stage": stage.task, "from_step": self.progress(stage), "to_step": None, "train_s": 0.0,
                "data_s": 0.0, "wall_s": 0.0}  # fmt: skip
        draw = 0.0 if task.info()["ready"] else self.draw_estimate(task)
        if not self.fits(draw + START_S):
            left = max(0.0, self.budget.remaining())
            console.print(f"campaign: {stage.task} needs ~{format_duration(draw + START_S)} to start (its data "
                          f"{format_duration(draw)}), {format_duration(left)} are left: the next session starts it",
                          highlight=False)  # fmt: skip
            return "time limit"
        self.entry["work"].append(item)
        if draw and self.draw(stage, item, started) == "running":
            return ended_early("time limit")
        prefetch = self.prefetch_next(stage, item)
        try:
            out = self.train(stage, on_eval=lambda step, _model: self.note_progress(item, started, step))
            self.note_training(stage, out, item, started)
            if "stopped_at" in out:
                self.save()
                return "time limit" if "time_limit_s" in out else ended_early("stopped")
            self.finish(stage, out)
            if (ended := self.gate(stage)) is not None:
                return ended
            if prefetch is not None and self.await_prefetch(prefetch, item) == "running":
                return ended_early("time limit")
            return None
        finally:
            if prefetch is not None:
                prefetch.stop()
                if item["prefetch"]["ended"] == "running":
                    item["prefetch"] |= {"s": prefetch.seconds(), "ended": prefetch.outcome()}
                self.save()

    def draw(self, stage: Stage, item: dict[str, Any], started: float) -> str:
        """Draw this stage's data in a process of its own, stopped at the time limit (the estimate that let it start
        can be wrong on a slower or busier machine): 'done', or 'running' when stopped (nothing half-drawn is kept)."""
        workers = self.opts.workers or os.cpu_count() or 1
        cmd = prepare_command(stage.task, stage.config.data, workers=workers, data_dir=self.opts.data_dir)
        log = self.opts.state / DRAW_LOG.format(task=stage.task)
        console.print(f"campaign: drawing {stage.task}'s data on {workers} workers (log: {log})", highlight=False)
        drawing = Prefetch(stage.task, cmd, log)
        try:
            ended = drawing.wait(1e9 if self.budget is None else self.budget.remaining() - self.budget.margin())
        finally:  # the draw is a process group of its own: an interrupt (Ctrl-C) must not leave it running
            drawing.stop()
        item["data_s"] = round(self.clock() - started, 3)
        self.save()
        if ended == "failed":
            raise RunSetupError(f"campaign: drawing {stage.task}'s data failed; its log says why: {log}")
        if ended != "done":
            took = format_duration(item["data_s"])
            console.print(f"campaign: {stage.task}'s data was not drawn in the time left (stopped after {took}): the "
                          "next session draws it", highlight=False)  # fmt: skip
            return "running"
        return "done"

    def note_progress(self, item: dict[str, Any], started: float, step: int) -> None:
        """At each evaluation, this session's work so far in the ledger, written: a session killed mid-stage (the
        machine taken back) keeps its seconds up to its last evaluation instead of those of its start."""
        item |= {"to_step": step, "wall_s": round(self.clock() - started, 3)}
        self.save()

    def note_training(self, stage: Stage, out: dict[str, Any], item: dict[str, Any], started: float) -> None:
        """This session's work on `stage` and where the stage stands, in the ledger (not yet written)."""
        session = out.get("session") or (out.get("sessions") or [{}])[-1]
        item |= {"to_step": out.get("stopped_at", out.get("steps")), "train_s": session.get("train_s", 0.0)}
        item["wall_s"] = round(self.clock() - started, 3)
        entry = self.ledger["stages"][stage.task]
        entry |= {"status": "running", "steps": item["to_step"], "total_steps": stage.steps}
        entry |= {"config_hash": config_hash(stage.config), "data_hashes": self.data_hashes(stage)}

    def prefetch_next(self, stage: Stage, item: dict[str, Any]) -> Prefetch | None:
        """Start drawing the next stage's data on the spare cores, when it is missing and fits the time left."""
        if not self.opts.prefetch or stage is self.stages[-1]:
            return None
        nxt = self.stages[stage.index]
        task = build_task(nxt.task, data_dir=self.opts.data_dir, **nxt.config.data)
        if self.dir(nxt).finished or task.info()["ready"]:
            return None
        workers = max(1, (self.opts.workers or os.cpu_count() or 1) - SPARE_CORES)
        if not self.fits(self.draw_estimate(task, workers) + START_S):
            return None
        cmd = prepare_command(nxt.task, nxt.config.data, workers=workers, data_dir=self.opts.data_dir)
        log = self.opts.state / LOG.format(task=nxt.task)
        console.print(f"campaign: drawing {nxt.task}'s data on {workers} cores meanwhile (log: {log})", highlight=False)
        item["prefetch"] = {"stage": nxt.task, "workers": workers, "s": 0.0, "ended": "running"}
        return Prefetch(nxt.task, cmd, log)

    def await_prefetch(self, prefetch: Prefetch, item: dict[str, Any]) -> str:
        """Wait for the next stage's draw while the time allows: 'done', 'failed' (the next stage draws it again) or
        'running' (stopped for the time limit)."""
        left = 1e9 if self.budget is None else self.budget.remaining() - self.budget.margin() - START_S
        if left > 0 and prefetch.outcome() == "running":
            console.print(f"campaign: waiting for {prefetch.task}'s data (log: {prefetch.log})", highlight=False)
        ended = prefetch.wait(left)
        item["prefetch"] |= {"s": prefetch.seconds(), "ended": "stopped" if ended == "running" else ended}
        if ended == "failed":
            console.print(f"[yellow]campaign: drawing {prefetch.task}'s data beside the training failed[/] (see "
                          f"{prefetch.log}); it is drawn again at its start", highlight=False)  # fmt: skip
        return ended

    def draw_only(self, stage: Stage) -> str:
        """Draw the current stage's data when absent (`--data-only`), counted as that stage's work."""
        task = build_task(stage.task, data_dir=self.opts.data_dir, **stage.config.data)
        started, step = self.clock(), self.progress(stage)
        item = {"stage": stage.task, "from_step": step, "to_step": step, "train_s": 0.0, "data_s": 0.0, "wall_s": 0.0}
        self.entry["work"].append(item)
        if not task.info()["ready"]:
            task.prepare(workers=self.opts.workers or os.cpu_count() or 1)
        item["data_s"] = item["wall_s"] = round(self.clock() - started, 3)
        console.print(f"campaign: {stage.task}'s data is ready ({item['data_s']:.0f} s)", highlight=False)
        return "data only"

    def train(self, stage: Stage, on_eval: OnEval) -> dict[str, Any]:
        from lra.train.run import train

        rd = self.dir(stage)
        resume = rd.last.is_file()
        if not resume:
            for name in (CONFIG, METRICS, BEST, LAST):  # begun, then killed before its first checkpoint
                (rd.path / name).unlink(missing_ok=True)
        what = "resuming" if resume else f"starting{f' from {stage.init_from}' if stage.init_from else ''}"
        console.print(f"campaign: stage {stage.index}/{len(self.stages)} {stage.task}, {what}", highlight=False)
        return train(stage.config, self.opts.attn, out_dir=rd.path, resume=resume, data_dir=self.opts.data_dir,
                     device=self.opts.device, time_budget=self.budget, init_root=self.opts.state,
                     on_eval=on_eval)  # fmt: skip

    def finish(self, stage: Stage, summary: dict[str, Any]) -> None:
        """Record the finished stage (with its campaign block) and keep only its small files."""
        rd = self.dir(stage)
        entry = self.ledger["stages"][stage.task]
        entry |= {"status": "done", "steps": summary["steps"]}
        entry |= {k: summary["metrics"][k] for k in ("test_acc", "val_acc", "best_step")}
        self.save()  # the totals now hold this stage's seconds
        summary["campaign"] = self.block(stage)
        rd.write_summary(summary)
        if self.opts.record:
            from lra.results.store import save_record

            entry["record"] = save_record(summary, self.opts.results).name
        rd.last.unlink(missing_ok=True)
        self.save()

    def settle(self, stage: Stage) -> None:
        """A stage found finished (e.g. its last session was killed after the test): the ledger and files agree."""
        entry = self.ledger["stages"][stage.task]
        if entry.get("status") != "done":
            summary = json.loads((self.dir(stage).path / SUMMARY).read_text(encoding="utf-8"))
            entry |= {"status": "done", "steps": summary["steps"]}
            entry |= {k: summary["metrics"][k] for k in ("test_acc", "val_acc", "best_step")}
        self.dir(stage).last.unlink(missing_ok=True)

    def block(self, stage: Stage) -> dict[str, Any]:
        """The record's `campaign` block: where the stage sits and what the campaign had spent."""
        entry = self.ledger["stages"][stage.task]
        worked = [s for s in self.ledger["sessions"] if any(w["stage"] == stage.task for w in s["work"])]
        return {
            "name": self.opts.state.name,
            "target": self.opts.target,
            "stage": stage.index,
            "stages": [s.task for s in self.stages],
            "init_from": stage.init_from,
            "device_s_before": device_s_before(self.ledger, stage.task),
            "device_s": entry.get("device_s", 0.0),
            "sessions": len(worked),
        }

    # ---- helpers
    def progress(self, stage: Stage) -> int:
        rd = self.dir(stage)
        return int(load_checkpoint(rd.last)["step"]) if rd.last.is_file() else 0

    def data_hashes(self, stage: Stage) -> dict[str, str]:
        try:
            return json.loads((self.dir(stage).path / CONFIG).read_text(encoding="utf-8")).get("data_hashes", {})
        except (OSError, ValueError):
            return {}

    def fits(self, seconds: float) -> bool:
        return self.budget is None or seconds <= self.budget.remaining() - self.budget.margin()

    def draw_estimate(self, task, workers: int | None = None) -> float:
        """draw_seconds on `workers` (default: this machine's) processes, no more of them than it has cores."""
        return draw_seconds(task, min(workers or self.opts.workers or os.cpu_count() or 1, os.cpu_count() or 1))

    def report(self) -> None:
        totals = self.ledger["totals"]
        stage = next((s for s in self.stages if not self.dir(s).finished), None)
        where = (
            "every stage is done"
            if stage is None
            else (
                f"stage {stage.index}/{len(self.stages)} {stage.task} at step {self.progress(stage)} of {stage.steps}"
            )
        )
        files = sorted(p for p in self.opts.state.rglob("*") if p.is_file() and p.suffix not in (".lock", ".log"))
        size = sum(p.stat().st_size for p in files)
        console.print(
            f"[bold]campaign[/] {self.opts.state}: {where}; session {self.entry['n']} ({self.entry['ended']}, "
            f"{self.entry['wall_s']:.0f} s); {totals['device_hours']:.2f} device-hours in all. Commit the state "
            f"folder ({len(files)} files, {size / 2**20:.1f} MiB): git add {self.opts.state}",
            highlight=False,
            soft_wrap=True,
        )


def shared_stages(stages: list[Stage], source: Path) -> tuple[dict[str, Any], list[Stage]]:
    """The campaign in `source` (its ledger) and the leading stages of `stages` it finished with the same config:
    what `--from source` takes."""
    other = read_ledger(source)
    if other is None:
        raise RunSetupError(f"--from {source}: no campaign there ({source / 'campaign.json'} is missing)")
    shared = []
    for stage in stages:
        theirs = RunDir(source / stage.task)
        if not theirs.finished or other["stages"].get(stage.task, {}).get("config_hash") != config_hash(stage.config):
            break
        shared.append(stage)
    return other, shared


def taken_stages(stages: list[Stage], source: Path) -> tuple[dict[str, Any], list[Stage]]:
    """shared_stages, refusing a source that shares none: what `--from source` starts a new campaign with."""
    other, shared = shared_stages(stages, source)
    if not shared:
        raise RunSetupError(f"--from {source}: it has no finished stage this campaign shares (same task and config)")
    return other, shared


def inherit(ledger: dict[str, Any], stages: list[Stage], state: Path, source: Path) -> None:
    """Start a new campaign from another one's finished stages (`--from`): each leading stage that the other
    campaign finished with the same config is copied (its small files) with the device seconds it cost there."""
    other, shared = taken_stages(stages, source)
    for stage in shared:
        theirs = RunDir(source / stage.task)
        (state / stage.task).mkdir(parents=True, exist_ok=True)
        for name in KEPT:
            if (theirs.path / name).is_file():
                shutil.copy2(theirs.path / name, state / stage.task / name)
        entry = {k: v for k, v in other["stages"][stage.task].items() if k not in ("index", "device_s", "train_s")}
        ledger["stages"][stage.task] |= entry | {"inherited_from": str(source)}
        ledger["stages"][stage.task]["inherited_device_s"] = other["stages"][stage.task].get("device_s", 0.0)
    console.print(f"campaign: {', '.join(s.task for s in shared)} from {source}", highlight=False)
