"""scripts/take_back.sh: a device call's campaign state comes home and is committed, unless it went back; and
scripts/carry_state.sh: a kept Path-256 state packed and committed, for a resume on a new machine."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "take_back.sh"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("bash") is None, reason="needs git, bash")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env=os.environ | GIT_ENV, check=True, capture_output=True, text=True
    ).stdout


def state(folder: Path, steps: dict[str, int], checkpoint: bytes) -> None:
    """A campaign state folder: a ledger with these steps per stage and one checkpoint file."""
    (folder / "pathfinder").mkdir(parents=True)
    ledger = {"stages": {task: {"steps": n} for task, n in steps.items()}, "sessions": []}
    (folder / "campaign.json").write_text(json.dumps(ledger))
    (folder / "pathfinder" / "best.pt").write_bytes(checkpoint)


def call_files(
    tmp: Path,
    name: str,
    steps: dict[str, int],
    checkpoint: bytes,
    campaigns: tuple[str, ...] = ("path-x-t",),
    kind: str = "txz",
    records: dict[str, str] | None = None,
) -> Path:
    """A call's files_at folder holding back.txz (h200_session.sh's archive; back.tgz with kind="tgz", as calls made
    before 2026-12-06 wrote it) with campaigns/path-x-t (or these campaigns) in it, and results/NAME.json naming
    each of `records`' commits."""
    staged = tmp / f"staged-{name}"
    for campaign in campaigns:
        state(staged / "campaigns" / campaign, steps, checkpoint)
    (staged / "results").mkdir()
    for record, commit in (records or {}).items():
        (staged / "results" / f"{record}.json").write_text(json.dumps({"kind": "run", "git_commit": commit}))
    (staged / "results" / "cut.json").write_text('{"kind": "ru')  # a record cut short: no commit to read
    files_at = tmp / name
    files_at.mkdir()
    with tarfile.open(files_at / f"back.{kind}", "w:xz" if kind == "txz" else "w:gz") as tar:
        tar.add(staged / "campaigns", arcname="campaigns")
        tar.add(staged / "results", arcname="results")
    return files_at


def committed(repo: Path, name: str = "path-x-t") -> dict[str, bytes]:
    """{path under the state folder: bytes} of the state take_back.sh committed packed, campaigns/NAME.txz."""
    with tarfile.open(repo / "campaigns" / f"{name}.txz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    assert all(path.startswith(f"{name}/") for path in files), f"packed under another name: {sorted(files)}"
    return {path.removeprefix(f"{name}/"): data for path, data in files.items()}


def sweep_call_files(tmp: Path, name: str, runs: dict[str, bytes], *, swept: bool = True) -> Path:
    """A `baselines` call's files_at folder: back.txz with results/, the sweep's log (logs/sweep-*.log, as
    h200_session.sh writes it) and sweeps/RUN/last.pt for each of `runs`; swept=False: a call of another phase, which
    ran no sweep (no log)."""
    staged, folder = tmp / f"staged-{name}", tmp / name
    (staged / "results").mkdir(parents=True)
    (staged / "logs").mkdir()
    (staged / "logs" / "gpu.log").write_text("100 %\n")
    if swept:
        (staged / "logs" / "sweep-text-linformer-0-2.log").write_text("12 runs\n")
    for run, checkpoint in runs.items():
        (staged / "sweeps" / run).mkdir(parents=True)
        (staged / "sweeps" / run / "last.pt").write_bytes(checkpoint)
    folder.mkdir()
    with tarfile.open(folder / "back.txz", "w:xz") as tar:
        for part in ("results", "logs", "sweeps"):
            if (staged / part).exists():
                tar.add(staged / part, arcname=part)
    return folder


def take_back(repo: Path, files_at: Path, *carry: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), str(files_at), *carry], cwd=repo, env=os.environ | GIT_ENV, capture_output=True, text=True
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("x\n")
    (repo / ".gitignore").write_text("/.device/\n")  # as the project's
    git(repo, "add", "README", ".gitignore")
    git(repo, "commit", "-q", "-m", "start")
    return repo


def test_a_call_s_state_is_committed_and_one_that_went_back_is_refused(repo, tmp_path):
    ahead = call_files(tmp_path, "1", {"pathfinder": 37440, "path-64": 100}, b"ahead")
    done = take_back(repo, ahead)
    assert done.returncode == 0, done.stderr
    assert committed(repo)["pathfinder/best.pt"] == b"ahead"
    assert not (repo / "campaigns/path-x-t").exists()
    assert git(repo, "status", "--porcelain") == ""
    assert "campaigns/path-x-t.txz" in git(repo, "show", "--name-only", "HEAD")
    assert git(repo, "log", "-1", "--format=%s").strip() == "campaign state after a device call (1)"

    behind = call_files(tmp_path, "2", {"pathfinder": 900}, b"behind")  # a bare machine that started afresh
    refused = take_back(repo, behind)
    assert refused.returncode == 0
    assert "behind the committed one" in refused.stderr
    assert committed(repo)["pathfinder/best.pt"] == b"ahead"
    assert len(git(repo, "log", "--oneline").splitlines()) == 2


def test_a_state_committed_as_a_folder_is_replaced_by_its_packed_successor_only_when_that_is_ahead(repo, tmp_path):
    """States were committed as folders until 2026-12-06: the folder is the committed state to compare with, and the
    commit that packs its successor removes it. Two chains of one call come home in one commit."""
    state(repo / "campaigns/path-x-a", {"pathfinder": 37440, "path-x": 500}, b"folder")
    git(repo, "add", "campaigns")
    git(repo, "commit", "-q", "-m", "a state committed as a folder")
    behind = take_back(repo, call_files(tmp_path, "1", {"pathfinder": 37440, "path-x": 499}, b"x", ("path-x-a",)))
    assert "skipping path-x-a: the archive's state is behind" in behind.stderr
    assert (repo / "campaigns/path-x-a/pathfinder/best.pt").read_bytes() == b"folder"
    assert not (repo / "campaigns/path-x-a.txz").exists()

    ahead = call_files(tmp_path, "2", {"pathfinder": 37440, "path-x": 900}, b"ahead", ("path-x-a", "path-x-b"))
    done = take_back(repo, ahead)
    assert done.returncode == 0, done.stderr
    assert committed(repo, "path-x-a")["pathfinder/best.pt"] == b"ahead"
    assert committed(repo, "path-x-b")["pathfinder/best.pt"] == b"ahead"
    assert not (repo / "campaigns/path-x-a").exists()
    assert git(repo, "status", "--porcelain") == ""
    changed = git(repo, "show", "--name-status", "--format=", "HEAD").splitlines()
    folder = ["D\tcampaigns/path-x-a/campaign.json", "D\tcampaigns/path-x-a/pathfinder/best.pt"]
    assert sorted(changed) == ["A\tcampaigns/path-x-a.txz", "A\tcampaigns/path-x-b.txz", *folder]
    # and the packed state is the committed one from then on
    behind = take_back(repo, call_files(tmp_path, "3", {"pathfinder": 37440, "path-x": 800}, b"x", ("path-x-a",)))
    assert "skipping path-x-a" in behind.stderr and committed(repo, "path-x-a")["pathfinder/best.pt"] == b"ahead"


def test_a_packed_state_is_small_where_its_checkpoints_share_a_table_and_unpacks_whole(repo, tmp_path):
    """A Path-X state's best.pt and last.pt share the frozen position table: packed, it is one copy."""
    table = random.Random(1).randbytes(1 << 20) * 3  # 3 MiB: 1 MiB of incompressible bytes tiled three times
    files_at = call_files(tmp_path, "1", {"pathfinder": 37440, "path-x": 10}, b"best" + table)
    staged = tmp_path / "staged-1/campaigns"  # what call_files packed, with last.pt added
    (staged / "path-x-t/pathfinder/last.pt").write_bytes(b"last" + table)
    with tarfile.open(files_at / "back.txz", "w:xz") as tar:
        tar.add(staged, arcname="campaigns")

    assert take_back(repo, files_at).returncode == 0
    assert (repo / "campaigns/path-x-t.txz").stat().st_size < 1.2 * (1 << 20)  # of six copies of the MiB, one
    dest = tmp_path / "machine-campaigns"
    unpacked = subprocess.run([sys.executable, str(SCRIPT.with_name("unpack_carry.py")), str(dest),
                               str(repo / "campaigns/path-x-t.txz")], capture_output=True, text=True)  # fmt: skip
    assert unpacked.returncode == 0, unpacked.stderr
    assert (dest / "path-x-t/pathfinder/last.pt").read_bytes() == b"last" + table
    assert (dest / "path-x-t/pathfinder/best.pt").read_bytes() == b"best" + table


@pytest.mark.skipif(shutil.which("numfmt") is None, reason="carry_size.sh needs numfmt")
def test_it_says_what_the_next_call_carries_and_when_that_is_over(repo, tmp_path):
    done = take_back(repo, call_files(tmp_path, "1", {"pathfinder": 37440}, b"s"))
    assert done.returncode == 0 and "of a call's 64MiB" in done.stderr and "refused" not in done.stderr
    with open(repo / "big.bin", "wb") as f:  # sparse: 65 MiB by its size (carry_size counts that), nothing written
        f.truncate(65 << 20)
    over = take_back(repo, call_files(tmp_path, "2", {"pathfinder": 37440, "path-64": 10}, b"s"))
    assert over.returncode == 0, over.stderr  # the state still comes home and is committed
    assert "over by" in over.stderr and "the next call would be refused" in over.stderr
    assert "campaigns/path-x-t.txz" in git(repo, "show", "--name-only", "HEAD")


def test_a_record_naming_a_commit_the_repository_lacks_is_flagged(repo, tmp_path):
    """COMMIT is typed into each device call by hand; session 23 typed 835d8b7c for 835d8b7."""
    head = git(repo, "rev-parse", "HEAD").strip()
    mistyped = head[:7] + ("0" if head[7] != "0" else "1")  # hex, one digit longer, no commit's prefix
    records = {"ran-head": head[:7], "dirty": f"{head[:12]}+dirty", "mistyped": mistyped, "none": ""}
    done = take_back(repo, call_files(tmp_path, "1", {"pathfinder": 37440}, b"s", records=records))
    assert done.returncode == 0, done.stderr
    flagged = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(flagged) == 1 and f"results/mistyped.json names commit {mistyped}," in flagged[0]
    assert committed(repo)["pathfinder/best.pt"] == b"s"  # the state still comes home


def test_a_missing_archive_is_a_clear_error_that_touches_nothing(repo, tmp_path):
    missing = take_back(repo, tmp_path / "no-such-call")
    assert missing.returncode == 2
    assert "back.txz" in missing.stderr
    assert not (repo / "campaigns").exists()


@pytest.mark.parametrize("kind", ["txz", "tgz"])
def test_an_archive_split_into_parts_is_joined_in_order(repo, tmp_path, kind):
    checkpoint = random.Random(0).randbytes(16384)  # incompressible: the archive spans several parts
    files_at = call_files(tmp_path, "1", {"pathfinder": 37440}, checkpoint, kind=kind)
    whole = (files_at / f"back.{kind}").read_bytes()
    (files_at / f"back.{kind}").unlink()
    size = 4000  # as split -b names them: part0 ... part4
    for i in range(0, len(whole), size):
        (files_at / f"back.{kind}.part{i // size}").write_bytes(whole[i : i + size])
    assert len(list(files_at.glob(f"back.{kind}.part*"))) > 2

    done = take_back(repo, files_at)
    assert done.returncode == 0, done.stderr
    assert committed(repo)["pathfinder/best.pt"] == checkpoint
    assert git(repo, "status", "--porcelain") == ""


def test_a_path_256_state_stays_out_of_git_kept_aside_and_the_others_come_home(repo, tmp_path):
    """A Path-256 state (35-50 MB) is too big to commit after every call: it is kept in the git-ignored
    .device/states, for carry_state.sh to pack should its stage be cut short."""
    files_at = call_files(tmp_path, "1", {"pathfinder": 37440}, b"state", campaigns=("path-256-t", "path-x-t"))
    done = take_back(repo, files_at)
    assert done.returncode == 0, done.stderr
    assert "not committing path-256-t" in done.stderr
    assert not (repo / "campaigns/path-256-t").exists()
    assert (repo / ".device/states/path-256-t/pathfinder/best.pt").read_bytes() == b"state"
    assert committed(repo)["pathfinder/best.pt"] == b"state"
    assert git(repo, "status", "--porcelain") == ""


CARRY = SCRIPT.with_name("carry_state.sh")


def carry(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CARRY), *args], cwd=repo, env=os.environ | GIT_ENV, capture_output=True,
                          text=True)  # fmt: skip


def test_a_path_256_state_is_packed_small_committed_unpacked_whole_and_dropped(repo, tmp_path):
    """carry_state.sh pack: the kept state committed as campaigns/NAME.txz, small where the checkpoints share a tiled
    table (as best.pt and last.pt share the frozen positions), unpacked byte for byte by unpack_carry.py (what
    h200_session.sh runs on it); drop: removed and committed, the tree clean."""
    missing = carry(repo, "pack", "path-256-t")
    assert missing.returncode == 2 and "no kept state" in missing.stderr
    assert carry(repo, "pack", "../x").returncode == 2  # a name, not a path
    kept = repo / ".device/states/path-256-t"
    state(kept, {"pathfinder": 37440, "path-256": 13416}, b"best")
    table = random.Random(0).randbytes(1 << 20) * 4  # 4 MiB: 1 MiB of incompressible bytes tiled four times
    (kept / "path-256").mkdir()
    (kept / "path-256" / "best.pt").write_bytes(b"best" + table)
    (kept / "path-256" / "last.pt").write_bytes(b"last" + table)

    packed = carry(repo, "pack", "path-256-t")
    assert packed.returncode == 0, packed.stderr
    archive = repo / "campaigns/path-256-t.txz"
    assert archive.stat().st_size < 1.2 * (1 << 20)  # one copy of the table, of the eight in the two files
    assert "campaigns/path-256-t.txz" in git(repo, "ls-tree", "-r", "--name-only", "HEAD")
    assert git(repo, "status", "--porcelain") == ""
    dest = tmp_path / "machine-campaigns"
    unpacked = subprocess.run([sys.executable, str(SCRIPT.with_name("unpack_carry.py")), str(dest), str(archive)],
                              capture_output=True, text=True)  # fmt: skip
    assert unpacked.returncode == 0, unpacked.stderr
    for path in (p for p in kept.rglob("*") if p.is_file()):
        assert (dest / "path-256-t" / path.relative_to(kept)).read_bytes() == path.read_bytes()

    dropped = carry(repo, "drop", "path-256-t")
    assert dropped.returncode == 0, dropped.stderr
    assert not archive.exists() and git(repo, "status", "--porcelain") == ""
    assert "campaigns/path-256-t.txz" not in git(repo, "ls-tree", "-r", "--name-only", "HEAD")
    assert carry(repo, "drop", "path-256-t").returncode == 2  # nothing to drop


def test_a_call_s_unfinished_sweep_runs_are_committed_for_the_next_call_and_dropped_once_none_are_left(repo, tmp_path):
    """h200_session.sh's archive brings the `baselines` sweeps' unfinished runs back as sweeps/; take_back.sh commits
    them packed as leaderboard/in_flight/sweeps.txz (the next call's tree brings them, on a new machine or VM too); a
    call of another phase, which ran no sweep, leaves the pack as it is; and a sweep's call that brings none back
    removes it, also committed, so that a run finished since is never resumed from a stale checkpoint."""
    kept = repo / "leaderboard" / "in_flight" / "sweeps.txz"
    runs = {"text/linear/fa-paper/s1": b"step 9000", "text/sinkhorn/fa-paper/s2": b"step 300"}
    done = take_back(repo, sweep_call_files(tmp_path, "1", runs))
    assert done.returncode == 0, done.stderr
    with tarfile.open(kept) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    assert got == {f"sweeps/{run}/last.pt": data for run, data in runs.items()}
    assert "2 unfinished runs" in done.stderr
    assert git(repo, "status", "--porcelain") == ""
    assert "leaderboard/in_flight/sweeps.txz" in git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()

    other_phase = take_back(repo, sweep_call_files(tmp_path, "2", {}, swept=False))
    assert other_phase.returncode == 0, other_phase.stderr
    assert "stays as it is: no sweep ran in this call" in other_phase.stderr
    with tarfile.open(kept) as tar:  # a call that ran no sweep (kernel, speed, a campaign's) leaves the pack alone
        assert {m.name: tar.extractfile(m).read() for m in tar if m.isfile()} == got
    assert git(repo, "status", "--porcelain") == ""

    finished = take_back(repo, sweep_call_files(tmp_path, "3", {}))
    assert finished.returncode == 0, finished.stderr
    assert not kept.exists()
    assert "leaderboard/in_flight/sweeps.txz" not in git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.skipif(shutil.which("numfmt") is None, reason="carry_size.sh needs numfmt")
def test_a_sweeps_call_says_when_the_tree_and_the_next_call_s_carry_are_over(repo, tmp_path):
    """A `baselines` call brings no campaigns/, but its committed in-flight runs grow the tree all the same (five Image
    runs: 21 MB beside Cifar-10's 18.5 MiB carry), so the size check counts the tree with the CARRY paths named."""
    cifar = tmp_path / "cifar.tar.gz"
    with open(cifar, "wb") as f:  # sparse: 54 MiB by its size (carry_size counts that), nothing written
        f.truncate(54 << 20)
    rng = random.Random(2)
    small = {"image/linear/fa-paper/s1": rng.randbytes(4 << 20)}  # incompressible: packed as big
    fits = take_back(repo, sweep_call_files(tmp_path, "1", small), str(cifar))
    assert fits.returncode == 0, fits.stderr
    assert "no campaigns/" in fits.stdout and "of a call's 64MiB" in fits.stderr and "refused" not in fits.stderr

    bigger = small | {"image/linformer/fa-paper/s1": rng.randbytes(8 << 20)}
    over = take_back(repo, sweep_call_files(tmp_path, "2", bigger), str(cifar))
    assert over.returncode == 0, over.stderr  # the runs still come home and are committed
    assert "over by" in over.stderr and "the next call would be refused" in over.stderr
    assert "2 unfinished runs" in over.stderr and git(repo, "status", "--porcelain") == ""
    assert git(repo, "log", "-1", "--format=%s").strip() == "sweeps' unfinished runs after a device call (2)"

    missing = take_back(repo, sweep_call_files(tmp_path, "3", small), str(tmp_path / "no-such.tar.gz"))
    assert missing.returncode == 0, missing.stderr
    assert "does not exist" in missing.stderr and "would be refused" not in missing.stderr
