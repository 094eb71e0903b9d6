"""`lra campaign` on tiny sizes: the stages from the presets' init_from chain, a session stopped on time, the next
one finishing the stage and moving on to the next with its positions upsampled (the same weights as a run started
by hand from that checkpoint), the ledger's seconds adding up to the records', and the refusals."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lra.campaign import drive
from lra.campaign.drive import CampaignOptions, chance_margin, run_campaign
from lra.campaign.ledger import LEDGER, stage_pace
from lra.campaign.plan import plan_stages, split_sets
from lra.campaign.prefetch import Prefetch, prepare_command
from lra.cli.main import main
from lra.core.errors import ConfigError, RunSetupError
from lra.results.store import load_records
from lra.train.budget import TimeBudget
from lra.train.checkpoint import BEST, LAST, load_checkpoint
from lra.train.config import load_config, resolve
from lra.train.run import train
from tasks import build_task
from tests.processes import wait_until_gone

SETS = ["model.pos_emb=learned", "data.num_train=48", "data.num_val=16", "data.num_test=16", "train.batch_size=8",
        "train.steps=12", "train.eval_every=6", "train.log_every=3", "train.warmup=2",
        "pathfinder:data.downsample=2", "path-64:data.downsample=2", "path-64:train.init_from=pathfinder"]  # fmt: skip


IGNORED = (".lock", ".log")  # the state's .gitignore keeps these out of a commit


class JumpClock:
    """Reads 0 until it has been read `reads` times, then an hour later: a budget that runs out mid-stage."""

    def __init__(self, reads: int) -> None:
        self.left = reads

    def __call__(self) -> float:
        self.left -= 1
        return 0.0 if self.left >= 0 else 3600.0


def options(tmp_path, **kw) -> CampaignOptions:
    base = dict(target="path-64", attn="naive", state=tmp_path / "state", preset="tiny", overrides=list(SETS),
                data_dir=str(tmp_path / "data"), results=str(tmp_path / "results"), device="cpu", past_chance=True,
                prefetch=False)  # fmt: skip
    return CampaignOptions(**{**base, **kw})


def test_the_curriculum_chain_comes_from_the_presets():
    stages = plan_stages("path-x", attn="flash", preset="curriculum", seed=3, overrides=["path-x:train.steps=100"])
    assert [(s.task, s.init_from) for s in stages] == [("pathfinder", None), ("path-64", "pathfinder"),
                                                      ("path-x", "path-64")]  # fmt: skip
    assert [s.steps for s in stages][-1] == 100 and all(s.config.train.seed == 3 for s in stages)
    model = stages[0].config.model
    assert (model.layers, model.dim, model.heads, model.pos_emb, model.pool) == (2, 64, 2, "learned", "mean_all")
    path_256 = plan_stages("path-256", attn="flash", preset="curriculum", seed=0, overrides=[])
    assert [(s.task, s.init_from) for s in path_256] == [("pathfinder", None), ("path-64", "pathfinder"),
                                                        ("path-x", "path-64"), ("path-256", "path-x")]  # fmt: skip
    assert path_256[-1].config.train.init_positions == "mirror"  # Path-X's table tiled (round 9)
    assert split_sets(["a.b=1", "path-x:c.d=2"]) == (["a.b=1"], {"path-x": ["c.d=2"]})
    with pytest.raises(ConfigError, match="builds another model"):
        plan_stages("path-x", attn="flash", preset="curriculum", seed=0, overrides=["path-x:model.layers=3"])
    with pytest.raises(ConfigError, match=r"model.pool: 'cls' vs 'mean_all'"):  # a CLS token is a weight
        plan_stages("path-x", attn="flash", preset="curriculum", seed=0, overrides=["path-x:model.pool=cls"])
    free = ["path-x:model.pool=mean", "path-x:model.dropout=0.0", "path-64:model.pack_tokens=false"]
    stages = plan_stages("path-x", attn="flash", preset="curriculum", seed=0, overrides=free)
    assert [(s.config.model.pool, s.config.model.dropout) for s in stages] == [
        ("mean_all", 0.1), ("mean_all", 0.1), ("mean", 0.0)]  # fmt: skip
    with pytest.raises(ConfigError, match="no stage of this campaign"):
        plan_stages("path-x", attn="flash", preset="curriculum", seed=0, overrides=["path-256:train.steps=5"])


def test_a_campaign_stops_on_time_resumes_and_moves_on_with_positions_upsampled(tmp_path, capsys):
    state = tmp_path / "state"
    prep = run_campaign(options(tmp_path, data_only=True))["sessions"][0]  # a session's first command: the data
    assert prep["ended"] == "data only" and [(w["stage"], w["to_step"]) for w in prep["work"]] == [("pathfinder", 0)]
    assert prep["work"][0]["data_s"] > 0 and not (state / "pathfinder").exists()
    first = run_campaign(options(tmp_path), TimeBudget(600.0, clock=JumpClock(12)))
    s1 = first["sessions"][1]
    assert s1["ended"] == "time limit" and [w["stage"] for w in s1["work"]] == ["pathfinder"]
    stopped_at = s1["work"][0]["to_step"]
    assert 0 < stopped_at < 12 and first["stages"]["pathfinder"]["status"] == "running"
    assert load_checkpoint(state / "pathfinder" / LAST)["step"] == stopped_at
    assert not (state / "path-64").exists()

    argv = ["campaign", "path-64", "--attn", "naive", "--state", str(state), "--preset", "tiny", "--device", "cpu",
            "--data-dir", str(tmp_path / "data"), "--results", str(tmp_path / "results"), "--past-chance",
            "--no-prefetch"]  # fmt: skip
    capsys.readouterr()
    assert main([*argv, "--dry-run", *[w for s in SETS for w in ("--set", s)]]) == 0  # where it resumes
    said = " ".join(capsys.readouterr().out.split())
    assert f"running, {stopped_at}/12 steps, last.pt at step {stopped_at} (it resumes there)" in said
    assert f"device-minutes to its end: {12 - stopped_at} steps at" in said  # priced from the stopped session
    assert main([*argv, *[w for s in SETS for w in ("--set", s)]]) == 0
    ledger = json.loads((state / LEDGER).read_text())
    s2 = ledger["sessions"][2]
    assert s2["ended"] == "campaign done"
    assert [(w["stage"], w["from_step"], w["to_step"]) for w in s2["work"]] == [
        ("pathfinder", stopped_at, 12), ("path-64", 0, 12)]  # fmt: skip
    assert all(ledger["stages"][t]["status"] == "done" for t in ("pathfinder", "path-64"))
    # What stays to commit: small files, no last.pt of a finished stage.
    kept = sorted(str(p.relative_to(state)) for p in state.rglob("*") if p.is_file() and p.suffix not in IGNORED)
    stage_files = ["best.pt", "config.json", "metrics.jsonl", "summary.json"]
    assert kept == [".gitignore", LEDGER, *[f"{t}/{f}" for t in ("path-64", "pathfinder") for f in stage_files]]

    # The ledger's seconds: the sessions' device seconds are spread over the stages, and its training seconds are
    # the records' (each record sums its run's sessions).
    records = {r["task"]: r for r in load_records(tmp_path / "results")}
    assert set(records) == {"pathfinder", "path-64"}
    totals, stages = ledger["totals"], ledger["stages"]
    assert totals["device_s"] == pytest.approx(sum(s["wall_s"] for s in ledger["sessions"]), abs=1e-3)
    assert totals["device_s"] == pytest.approx(sum(st["device_s"] for st in stages.values()), abs=1e-2)
    for task, rec in records.items():
        assert stages[task]["train_s"] == pytest.approx(rec["metrics"]["train_time_s"], abs=0.01)
        assert stages[task]["test_acc"] == rec["metrics"]["test_acc"]
    assert totals["train_s"] == pytest.approx(sum(r["metrics"]["train_time_s"] for r in records.values()), abs=0.02)
    block = records["path-64"]["campaign"]
    assert (block["stage"], block["stages"], block["init_from"]) == (2, ["pathfinder", "path-64"], "pathfinder")
    # (a snapshot taken when the stage ended: the session's last milliseconds count for the stage it began at)
    assert block["device_s_before"] == pytest.approx(stages["pathfinder"]["device_s"], abs=0.5)
    assert records["pathfinder"]["campaign"]["sessions"] == 3 and block["sessions"] == 1

    # Stage 2 started from stage 1's best checkpoint, its 16x16 positions upsampled to 32x32: a run started by hand
    # from that file ends with the same weights, bit for bit; one from scratch does not.
    pf_pos = load_checkpoint(state / "pathfinder" / BEST)["model"]["encoder.pos"]
    stage_config = records["path-64"]["config"]
    assert pf_pos.shape == (1, 256, 32)
    by_hand = {**stage_config, "train": {**stage_config["train"], "init_from": str(state / "pathfinder" / BEST)}}
    scratch = {**stage_config, "train": {**stage_config["train"], "init_from": None}}
    ours = load_checkpoint(state / "path-64" / BEST)["model"]
    for config, same in ((by_hand, True), (scratch, False)):
        out = tmp_path / ("by-hand" if same else "scratch")
        train(resolve(config), "naive", device="cpu", out_dir=out, data_dir=tmp_path / "data")
        theirs = load_checkpoint(out / BEST)["model"]
        assert theirs["encoder.pos"].shape == (1, 1024, 32)
        assert all(torch.equal(ours[k], theirs[k]) for k in ours) is same

    # A third session has nothing left to do; other options on the same state are refused.
    done = run_campaign(options(tmp_path))
    assert done["sessions"][-1]["ended"] == "campaign done" and done["sessions"][-1]["work"] == []
    with pytest.raises(RunSetupError, match="started with other options: attn 'naive'"):
        run_campaign(options(tmp_path, attn="flash"))

    # `--from`: a new campaign takes the finished stages it shares, with what they cost; its dry run says so first
    # and writes nothing.
    capsys.readouterr()
    assert main([*argv[:5], str(tmp_path / "other"), *argv[6:], "--from", str(state), "--dry-run",
                 *[w for s in SETS for w in ("--set", s)]]) == 0  # fmt: skip
    said = " ".join("".join(capsys.readouterr()).split())
    assert said.count(f"done in {state} (taken from there at the start), 12/12 steps") == 2
    assert not (tmp_path / "other").exists()
    other = run_campaign(options(tmp_path, state=tmp_path / "other", from_state=state))
    assert all(other["stages"][t]["inherited_from"] == str(state) for t in ("pathfinder", "path-64"))
    assert other["totals"]["device_s"] >= ledger["stages"]["pathfinder"]["device_s"] + stages["path-64"]["device_s"]
    assert (tmp_path / "other" / "path-64" / BEST).is_file() and other["sessions"][-1]["work"] == []


def test_a_stage_pace_is_its_training_rate_and_what_a_session_spends_besides():
    # Seed 2's Path-256 ledger of session 22 (rounded), and a later session that resumed it after a 30 s start-up
    # outside any stage's work. By hand: 1,230 + 23,730 = 24,960 steps in 1,212 + 60 training seconds; besides,
    # (1,388.7 - 1,212) and (100 - 60 - 5 of drawing) in the work, plus the 30 s start-up, over 2 sessions.
    def work(stage, from_step, to_step, train_s, data_s, wall_s):
        return {"stage": stage, "from_step": from_step, "to_step": to_step, "train_s": train_s, "data_s": data_s,
                "wall_s": wall_s}  # fmt: skip

    ledger = {"sessions": [
        {"stage": "path-256", "wall_s": 1389.0, "work": [work("path-256", 0, 23730, 1212.0, 0.0, 1388.7)]},
        {"stage": "path-256", "wall_s": 130.0,
         "work": [work("path-256", 23730, 24960, 60.0, 5.0, 100.0), work("other", 0, 0, 0.0, 0.0, 0.0)]},
    ]}  # fmt: skip
    rate, besides = stage_pace(ledger, "path-256")
    assert rate == pytest.approx(24960 / 1272)
    assert besides == pytest.approx((176.7 + 35.0 + (0.3 + 30.0)) / 2)
    assert stage_pace(ledger, "other") is None and stage_pace({"sessions": []}, "path-256") is None

    # A session killed mid-stage wrote its steps, not its training seconds (flash-s1's session 1 in session 24: 5,616
    # steps, train_s 0, 973 s of wall time): its wall time less drawing counts as training, nothing as besides.
    killed = {"stage": "path-x", "wall_s": 973.3, "work": [work("path-x", 0, 5616, 0.0, 3.0, 973.0)]}
    rate, besides = stage_pace({"sessions": [killed]}, "path-x")
    assert rate == pytest.approx(5616 / 970.0) and besides == pytest.approx(0.3)
    resumed = {"stage": "path-x", "wall_s": 70.5, "work": [work("path-x", 5616, 5620, 24.2, 0.0, 70.3)]}
    rate, besides = stage_pace({"sessions": [killed, resumed]}, "path-x")
    assert rate == pytest.approx(5620 / (970.0 + 24.2))
    assert besides == pytest.approx((0.0 + (70.3 - 24.2) + 0.3 + 0.2) / 2)


def test_a_misspelt_backend_is_refused_before_the_state_folder_is_written(tmp_path, capsys):
    # A state folder started under a wrong name would refuse the corrected command ("started with other options").
    state = tmp_path / "state"
    for extra in ([], ["--dry-run"]):
        argv = ["campaign", "path-64", "--attn", "flsh", "--state", str(state), "--preset", "tiny", "--device", "cpu"]
        assert main([*argv, *extra]) == 2
        assert "unknown attention backend 'flsh' (did you mean 'flash'?)" in capsys.readouterr().err
        assert not state.exists()


def test_a_source_it_cannot_start_from_is_refused_before_the_state_folder_is_written(tmp_path, capsys):
    # As a misspelt backend: a folder left behind would hold a lock and no ledger, for nobody.
    source = tmp_path / "source"  # a campaign with no finished stage yet
    source.mkdir()
    (source / "campaign.json").write_text(json.dumps({"format": 1, "stages": {}, "sessions": []}))
    state = tmp_path / "state"
    for where, said in ((tmp_path / "none", "no campaign there"), (source, "no finished stage this campaign shares")):
        argv = ["campaign", "path-64", "--attn", "naive", "--state", str(state), "--preset", "tiny", "--device", "cpu",
                "--from", str(where), *[w for s in SETS for w in ("--set", s)]]  # fmt: skip
        assert main(argv) == 2
        assert said in capsys.readouterr().err
        assert not state.exists()


def test_the_chance_margin_is_four_standard_errors_and_at_least_a_point():
    assert chance_margin(0.5, 20_000) == pytest.approx(4 * (0.25 / 20_000) ** 0.5)  # 1.41 points
    assert chance_margin(0.5, 1_000_000) == 0.01
    # The pilots of docs/path_x_campaign.md: LRA's model at 50.84% best validation against a 50.47% majority class
    # learned nothing; Xiong et al.'s at 66.37% did.
    assert 0.5084 <= 0.5047 + chance_margin(0.5047, 20_000) < 0.6637


def test_a_stage_at_chance_stops_the_campaign_unless_told_to_go_on(tmp_path, capsys):
    # 12 steps on 48 images learn nothing that 16 validation images could show (the margin is 50 points there).
    stopped = run_campaign(options(tmp_path, past_chance=False))
    assert stopped["sessions"][-1]["ended"] == "at chance" and stopped["stages"]["pathfinder"]["status"] == "done"
    assert not (tmp_path / "state" / "path-64").exists()
    assert "ended at chance" in capsys.readouterr().err
    again = run_campaign(options(tmp_path, past_chance=False))  # the finished stage is gated again, nothing is run
    assert again["sessions"][-1]["ended"] == "at chance" and again["sessions"][-1]["work"] == []
    done = run_campaign(options(tmp_path, past_chance=True))
    assert done["sessions"][-1]["ended"] == "campaign done" and done["stages"]["path-64"]["status"] == "done"


def test_the_next_stage_data_is_drawn_while_a_stage_trains(tmp_path):
    ledger = run_campaign(options(tmp_path, prefetch=True))
    first, second = ledger["sessions"][0]["work"]
    assert first["stage"] == "pathfinder" and first["data_s"] > 0
    assert first["prefetch"]["stage"] == "path-64" and first["prefetch"]["ended"] == "done"
    assert second["stage"] == "path-64" and second["data_s"] == 0.0  # drawn by then
    assert (tmp_path / "state" / "prefetch-path-64.log").is_file()
    assert "*.log" in (tmp_path / "state" / ".gitignore").read_text()  # the log is not part of the state


def test_a_stopped_draw_ends_its_processes_and_leaves_no_cache(tmp_path):
    data = load_config("path-x", "tiny", ["data.num_train=4000"]).data
    cmd = prepare_command("path-x", data, workers=2, data_dir=str(tmp_path / "data"))
    draw = Prefetch("path-x", cmd, tmp_path / "draw.log")
    assert draw.wait(4.0) == "running"  # 4,000 images at 128 px take minutes here
    draw.stop()
    assert draw.outcome() == "stopped"
    wait_until_gone(draw.proc.pid, timeout=10.0)  # no worker of its group is left (dead ones may wait to be reaped)
    assert not build_task("path-x", data_dir=str(tmp_path / "data"), **data).info()["ready"]


ROOT = Path(__file__).resolve().parents[1]
# A campaign's first session, ended as a machine taken back ends it (no exception, no cleanup) right after the
# ledger took its first evaluation
KILLED_AT_FIRST_EVAL = """
import os, sys
from pathlib import Path
from lra.campaign import drive
from tests.test_campaign import options

note = drive.Session.note_progress


def note_then_die(self, item, started, step):
    note(self, item, started, step)
    os._exit(9)


drive.Session.note_progress = note_then_die
drive.run_campaign(options(Path(sys.argv[1])))
"""


def test_a_session_killed_mid_stage_keeps_its_seconds_up_to_its_last_evaluation(tmp_path):
    child = subprocess.run([sys.executable, "-c", KILLED_AT_FIRST_EVAL, str(tmp_path)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert child.returncode == 9, child.stderr[-2000:]
    killed = json.loads((tmp_path / "state" / LEDGER).read_text(encoding="utf-8"))["sessions"][0]
    assert killed["ended"] == "running" and [(w["stage"], w["to_step"]) for w in killed["work"]] == [("pathfinder", 6)]
    assert killed["wall_s"] >= killed["work"][0]["wall_s"] > killed["work"][0]["data_s"] > 0
    ledger = run_campaign(options(tmp_path))  # the next session resumes and finishes
    first, second = ledger["sessions"]
    assert first == {**killed, "ended": "killed"} and second["ended"] == "campaign done"
    assert ledger["totals"]["device_s"] == pytest.approx(first["wall_s"] + second["wall_s"], abs=2e-3)
    pathfinder_work = [w["wall_s"] for s in ledger["sessions"] for w in s["work"] if w["stage"] == "pathfinder"]
    assert ledger["stages"]["pathfinder"]["device_s"] >= sum(pathfinder_work) >= killed["work"][0]["wall_s"]


def test_a_draw_estimate_counts_the_splits_still_to_draw_and_only_the_rest_where_target_pairs_came(tmp_path):
    """Path-64 with 24 training and 8 + 8 held-out images: from scratch every image costs DRAW_CORE_S; with the
    held-out splits' target pairs drawn ahead (as a call carries them) those cost 9% of that; a split already drawn
    costs nothing."""
    sets = ["data.num_val=8", "data.num_test=8", "data.downsample=2"]
    data_dir = str(tmp_path / "data")
    full = build_task("path-64", data_dir=data_dir, **load_config("path-64", "tiny", ["data.num_train=24", *sets]).data)
    core_s = drive.DRAW_CORE_S[64]
    assert drive.draw_seconds(full, workers=2) == pytest.approx(40 * core_s / 2)
    held_out = load_config("path-64", "tiny", ["data.num_train=0", *sets]).data
    build_task("path-64", data_dir=data_dir, **held_out).prepare_targets(workers=1)
    assert drive.draw_seconds(full, workers=2) == pytest.approx((24 + 16 * (1 - 0.91)) * core_s / 2)
    build_task("path-64", data_dir=data_dir, **held_out).prepare(workers=1)
    assert drive.draw_seconds(full, workers=2) == pytest.approx(24 * core_s / 2)


def test_a_stage_draw_that_outlasts_its_estimate_is_stopped_at_the_time_limit(tmp_path, monkeypatch, capsys):
    """The estimate let the draw start (here: told it is instant); the draw takes longer (20,000 images, over 30 s
    on 2 workers), and the session ends on time with nothing half-drawn and the stage not begun."""
    monkeypatch.setattr(drive, "DRAW_CORE_S", dict.fromkeys(drive.DRAW_CORE_S, 1e-9))
    monkeypatch.setattr(drive, "START_S", 0.0)
    opts = options(tmp_path, workers=2, overrides=[*SETS, "pathfinder:data.num_train=20000"])
    began = time.monotonic()
    ledger = run_campaign(opts, TimeBudget(6.0))
    assert time.monotonic() - began < 20.0
    session = ledger["sessions"][0]
    assert session["ended"] == "time limit" and [w["stage"] for w in session["work"]] == ["pathfinder"]
    assert 3.0 < session["work"][0]["data_s"] < 10.0
    data = load_config("pathfinder", "tiny", ["data.num_train=20000", "data.num_val=16", "data.num_test=16",
                                              "data.downsample=2"]).data  # fmt: skip
    assert not build_task("pathfinder", data_dir=str(tmp_path / "data"), **data).info()["ready"]
    assert not (tmp_path / "state" / "pathfinder").exists()
    assert "not drawn in the time left" in capsys.readouterr().err


def test_a_finished_stage_that_the_preset_now_trains_otherwise_is_refused_and_nothing_is_touched(tmp_path, monkeypatch):
    one_stage = dict(target="pathfinder", overrides=[s for s in SETS if not s.startswith("path-64:")])
    run_campaign(options(tmp_path, **one_stage))
    state = tmp_path / "state"
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and p.suffix not in IGNORED}

    def edited_preset(target, **kw):  # what a changed preset does: same options, another stage config
        return plan_stages(target, **{**kw, "overrides": [*kw["overrides"], "pathfinder:train.lr=0.0123"]})

    monkeypatch.setattr(drive, "plan_stages", edited_preset)
    with pytest.raises(RunSetupError, match=r"stage 1 pathfinder finished with other settings \(config hash \w+, now"):
        run_campaign(options(tmp_path, **one_stage))
    assert {p: p.read_bytes() for p in state.rglob("*") if p.is_file() and p.suffix not in IGNORED} == before
