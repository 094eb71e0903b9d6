"""scripts/unpack_carry.py (carried target pairs into a lent machine's cache, keeping what is there),
scripts/pack_xz.py (folders into one xz archive, some left out), scripts/state_steps.py (how far a campaign state,
a folder or packed, has trained) and scripts/carry_size.sh (what a device call would carry, against its 64 MiB)."""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def archive(path: Path, files: dict[str, bytes], mode: str) -> Path:
    """A tar archive at `path` (mode "w:xz" or "w:gz") holding `files`, named as `tar -C DIR .` names them."""
    with tarfile.open(path, mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def unpack(dest: Path, *archives: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "unpack_carry.py"), str(dest), *map(str, archives)],
        capture_output=True, text=True,
    )  # fmt: skip


def test_pairs_unpack_from_xz_and_gzip_and_files_already_there_stay(tmp_path):
    pairs = {"path-x/v2/targets-train/starts.npy": b"x" * 1000, "path-x/v2/meta.json": b"{}"}
    xz = archive(tmp_path / "data.txz", pairs, "w:xz")
    gz = archive(tmp_path / "data64.tgz", {"path-64/v2/targets-val/starts.npy": b"sixty-four"}, "w:gz")
    dest = tmp_path / "cache"
    (dest / "path-x/v2").mkdir(parents=True)
    (dest / "path-x/v2/meta.json").write_bytes(b"drawn here")  # the machine's own: kept

    done = unpack(dest, xz, gz)
    assert done.returncode == 0, done.stderr
    assert (dest / "path-x/v2/targets-train/starts.npy").read_bytes() == b"x" * 1000
    assert (dest / "path-64/v2/targets-val/starts.npy").read_bytes() == b"sixty-four"
    assert (dest / "path-x/v2/meta.json").read_bytes() == b"drawn here"
    assert "data.txz: 1 files" in done.stderr and "data64.tgz: 1 files" in done.stderr

    again = unpack(dest, xz)  # a second call of a warm machine
    assert again.returncode == 0 and "data.txz: 0 files" in again.stderr


def test_a_damaged_archive_leaves_nothing_and_the_others_still_unpack(tmp_path):
    whole = archive(tmp_path / "data64.txz", {"path-64/a.npy": b"a"}, "w:xz")
    damaged = tmp_path / "data.txz"
    full = archive(tmp_path / "full.txz", {"path-x/b.npy": random.Random(0).randbytes(4096)}, "w:xz")
    damaged.write_bytes(full.read_bytes()[:200])
    done = unpack(tmp_path / "cache", damaged, whole)
    assert done.returncode == 0
    assert "data.txz" in done.stderr and "nothing unpacked from it" in done.stderr
    assert (tmp_path / "cache/path-64/a.npy").read_bytes() == b"a"
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == ["path-64"]  # nothing of it half-written


def test_swapped_arguments_are_refused_with_the_usage_and_the_archive_is_untouched(tmp_path):
    carried = archive(tmp_path / "data.txz", {"path-x/a.npy": b"a"}, "w:xz")
    before = carried.read_bytes()
    done = unpack(carried, tmp_path / "cache")  # the archive where the folder belongs
    assert done.returncode == 2
    assert "is a file, not a folder" in done.stderr and "DEST ARCHIVE" in done.stderr
    assert carried.read_bytes() == before and not (tmp_path / "cache").exists()


@pytest.mark.skipif(not hasattr(tarfile, "data_filter"), reason="this Python's tarfile has no extraction filters")
def test_a_member_outside_the_cache_is_refused(tmp_path):
    bad = tmp_path / "bad.txz"
    with tarfile.open(bad, "w:xz") as tar:
        info = tarfile.TarInfo("../escaped.npy")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"e"))
    done = unpack(tmp_path / "cache", bad)
    assert done.returncode == 0 and "bad.txz" in done.stderr
    assert not (tmp_path / "escaped.npy").exists()


def test_pack_xz_packs_folders_under_their_names_and_leaves_out_locks_and_the_named(tmp_path):
    for name, data in {"runs/a/best.pt": b"a" * 5000, "runs/a/run.lock": b"pid", "runs/src/best.pt": b"s",
                       "logs/a.log": b"log"}.items():  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    out = tmp_path / "back.txz"
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "pack_xz.py"), str(out), "--leave-out", "campaigns/src",
         f"{tmp_path / 'runs'}=campaigns", f"{tmp_path / 'logs'}=logs", f"{tmp_path / 'none'}=results"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with tarfile.open(out, "r:xz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert files == {"campaigns/a/best.pt": b"a" * 5000, "logs/a.log": b"log"}
    assert not (tmp_path / "back.txz.part").exists()


def test_pack_xz_without_a_folder_gives_the_usage_and_writes_nothing(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPTS / "pack_xz.py"), str(tmp_path / "out.txz")],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "usage" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("numfmt") is None, reason="needs git, numfmt")
def test_carry_size_adds_the_tree_and_the_carries_and_fails_over_64_mib(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / ".gitignore").write_text("/.device/\n")
    (repo / "tracked.bin").write_bytes(b"t" * (10 << 20))
    (repo / "aside.bin").write_bytes(b"a" * (30 << 20))
    subprocess.run(["git", "add", "tracked.bin", "aside.bin"], cwd=repo, check=True)
    (repo / "aside.bin").unlink()  # tracked but deleted from the tree, not yet committed: not carried
    (repo / ".device").mkdir()
    with open(repo / ".device/pairs.txz", "wb") as f:  # sparse: its apparent size is what a carry counts
        f.truncate(50 << 20)

    def size(*paths: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(SCRIPTS / "carry_size.sh"), *paths], cwd=repo, capture_output=True, text=True
        )

    fits = size(".device/pairs.txz")
    assert fits.returncode == 0, fits.stderr
    assert "the tree 10.0MiB" in fits.stderr and "= 60.0MiB of a call's 64MiB" in fits.stderr  # .gitignore: ~0
    (repo / "untracked.bin").write_bytes(b"u" * (5 << 20))  # not ignored: it travels too
    over = size(".device/pairs.txz")
    assert over.returncode == 1 and "over by 1.0MiB" in over.stderr
    missing = size(".device/none.txz")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    (repo / "untracked.bin").unlink()
    small = repo / "records"
    small.mkdir()
    for i in range(512):  # 512 files of 10 bytes: each counts a 4 KiB block, 2 MiB in all
        (small / f"r{i}.json").write_bytes(b"0123456789")
    assert "the tree 12.0MiB" in size().stderr


def state_steps(*states: Path) -> list[int]:
    done = subprocess.run([sys.executable, str(SCRIPTS / "state_steps.py"), *map(str, states)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    return [int(line) for line in done.stdout.split()]


def test_state_steps_sums_the_stages_of_a_folder_or_a_packed_state_and_says_minus_one_for_none(tmp_path):
    folder = tmp_path / "path-x-a"
    (folder / "path-x").mkdir(parents=True)
    ledger = '{"stages": {"pathfinder": {"steps": 37440}, "path-64": {"steps": 24960}, "path-x": {"steps": 31830}}}'
    (folder / "campaign.json").write_text(ledger)
    (folder / "path-x" / "last.pt").write_bytes(random.Random(0).randbytes(4096))
    packed = tmp_path / "path-x-a.txz"
    packing = subprocess.run([sys.executable, str(SCRIPTS / "pack_xz.py"), str(packed), f"{folder}=path-x-a"])
    assert packing.returncode == 0
    # a ledger in a stage's folder is not the state's, and a cut archive or one without a ledger reads as none
    stray = archive(tmp_path / "stray.txz", {"path-x-a/path-x/campaign.json": ledger.encode()}, "w:xz")
    cut = tmp_path / "cut.txz"
    cut.write_bytes(packed.read_bytes()[:100])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "campaign.json").write_text('{"stages": ')
    read = state_steps(folder, packed, stray, cut, tmp_path / "bad", tmp_path / "none")
    assert read == [37440 + 24960 + 31830] * 2 + [-1] * 4
    usage = subprocess.run([sys.executable, str(SCRIPTS / "state_steps.py")], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_state_steps_done_says_whether_the_target_stage_has_ended(tmp_path):
    """--done: 1 once the campaign's target stage is done, 0 while it (or an earlier stage) is not, -1 unreadable."""
    stages = {"pathfinder": {"status": "done"}, "path-64": {"status": "done"}}
    cases = {
        "ended": ({**stages, "path-x": {"status": "done"}}, "path-x"),
        "stopped": ({**stages, "path-x": {"status": "running"}}, "path-x"),
        "between": (stages, "path-x"),  # stopped between stages: the target not begun
        "earlier": ({**stages, "path-x": {"status": "done"}}, "path-256"),  # a Path-256 chain on its Path-X stage
    }
    folders = []
    for name, (ledger, target) in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "campaign.json").write_text(json.dumps({"campaign": {"target": target}, "stages": ledger}))
        folders.append(tmp_path / name)
    (tmp_path / "no-campaign").mkdir()
    (tmp_path / "no-campaign" / "campaign.json").write_text(json.dumps({"stages": cases["ended"][0]}))
    done = subprocess.run([sys.executable, str(SCRIPTS / "state_steps.py"), "--done", *map(str, folders),
                           str(tmp_path / "no-campaign"), str(tmp_path / "none")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.split() == ["1", "0", "0", "0", "-1", "-1"]
