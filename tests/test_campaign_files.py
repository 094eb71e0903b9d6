"""The campaign lines a device session runs (scripts/path_x_campaigns.txt, path_256_campaigns.txt, path_x_seeds.txt,
path_256_seeds.txt): each names a backend and settings that plan, and a line run `--from` the scripts' source (or, for
the seeds' Path-256 stages, its own Path-X chain; or the folder the line names, `--from FOLDER`) shares every stage
before its own with that committed state, so that a session trains only what the line changes (a preset edit that
broke the sharing would retrain Pathfinder-32 and Path-64, a third of a session, before anyone noticed)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

from attention_impls.registry import BACKENDS
from lra.campaign.plan import plan_stages
from lra.train.config import config_hash

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
_spec = importlib.util.spec_from_file_location("state_steps", SCRIPTS / "state_steps.py")
STATE_STEPS = importlib.util.module_from_spec(_spec)  # reads a ledger from a state folder or a packed one
_spec.loader.exec_module(STATE_STEPS)
FILES = [  # file, target, what its lines run --from: the script's source, none (chains of their own), or each line's
    # own Path-X chain campaigns/path-x-NAME (CAMPAIGN_FROM=own)
    ("path_x_campaigns.txt", "path-x", "source"),
    ("path_256_campaigns.txt", "path-256", "source"),
    ("path_x_seeds.txt", "path-x", "none"),
    ("path_256_seeds.txt", "path-256", "own"),
]


def source_state() -> Path:
    """The state folder that scripts/h200_session.sh names as its campaigns' --from source (SOURCE=...)."""
    found = re.search(r"^SOURCE=(\S+)", (SCRIPTS / "h200_session.sh").read_text(), re.MULTILINE)
    assert found, "scripts/h200_session.sh names no SOURCE"
    return ROOT / "campaigns" / found.group(1)


def campaign_lines(name: str) -> list[tuple[str, str, str | None, int, list[str]]]:
    """(name, backend, its own --from folder or None, seed, --set values) of each line that is not blank or a
    comment."""
    out = []
    for line in (SCRIPTS / name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        label, backend, *words = shlex.split(line)
        source = None
        if words[:1] == ["--from"]:  # the script reads a line's own source first, and only there
            source, words = words[1], words[2:]
        seed, sets = 0, []
        for flag, value in zip(words[::2], words[1::2], strict=True):
            assert flag in ("--set", "--seed"), f"{name}: {label} has {flag}; the script passes --set and --seed only"
            if flag == "--seed":
                seed = int(value)
            else:
                sets.append(value)
        out.append((label, backend, source, seed, sets))
    return out


def committed(name: str) -> Path:
    """campaigns/NAME as committed: packed (NAME.txz, as scripts/take_back.sh commits a chain) or a folder."""
    packed = ROOT / "campaigns" / f"{name}.txz"
    return packed if packed.is_file() else ROOT / "campaigns" / name


def line_state(label: str, runs_from: str, source: str | None) -> Path:
    """The committed state whose finished stages a line takes: its own --from folder while it is committed (once
    the line's chain has started, the chain holds them), else the script's source or the line's own Path-X chain."""
    if source is not None:
        own = committed(source)
        return own if own.exists() else committed(f"path-x-{label}")
    return committed(f"path-x-{label}") if runs_from == "own" else source_state()


def test_the_scripts_source_is_a_committed_finished_campaign():
    ledger = json.loads((source_state() / "campaign.json").read_text())
    assert ledger["stages"] and all(stage["status"] == "done" for stage in ledger["stages"].values())
    assert all((source_state() / task / "best.pt").is_file() for task in ledger["stages"])


def done_stages(state: Path) -> dict[str, str]:
    """{task: config hash} of the finished stages in a committed campaign state (a folder or packed)."""
    stages = STATE_STEPS.ledger(state)["stages"]
    return {task: stage["config_hash"] for task, stage in stages.items() if stage["status"] == "done"}


@pytest.mark.parametrize(("name", "target", "runs_from"), FILES)
def test_each_line_plans_and_shares_all_but_its_last_stage_with_its_source(name, target, runs_from):
    for label, backend, source, seed, sets in campaign_lines(name):
        assert backend in BACKENDS.names(), f"{name}: {label} names no backend ({backend})"
        stages = plan_stages(target, attn=backend, preset="curriculum", seed=seed, overrides=sets)
        assert stages[-1].task == target
        state = line_state(label, runs_from, source)
        assert state.exists(), f"{name}: {label} runs from {state}, which is not committed"
        done = done_stages(state)
        shared = [s.task for s in stages if done.get(s.task) == config_hash(s.config)]
        if runs_from == "none":  # a chain of its own: another seed shares nothing
            assert shared == [], f"{name}: {label} shares {shared} with the source, yet runs without it"
        else:  # only the last stage trains; the rest are taken from the source
            assert shared == [s.task for s in stages[:-1]], f"{name}: {label} shares {shared} with {state}"
