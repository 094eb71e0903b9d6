"""Split hashes: what they see, and a resumed run refusing data other than it started on (exit 2, nothing
written) while data drawn afresh from the same seed passes."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np

from lra.cli.main import main
from lra.train.datahash import SAMPLE_ROWS, sample_rows, split_digest
from tasks import build_task
from tasks.base import Split

TINY = ["--preset", "tiny", "--device", "cpu", "--no-record", "--attn", "naive"]
SETS = ["data.num_train=48", "data.num_val=16", "data.num_test=16", "train.batch_size=8", "train.steps=8",
        "train.eval_every=4", "train.log_every=2"]  # fmt: skip


def sets() -> list[str]:
    return [w for s in SETS for w in ("--set", s)]


def test_sample_rows_spread_over_the_split():
    assert sample_rows(5).tolist() == [0, 1, 2, 3, 4]
    rows = sample_rows(160_000)
    assert len(rows) == SAMPLE_ROWS and rows[0] == 0 and rows[-1] == 159_999
    assert np.all(np.diff(rows) > 0) and np.diff(rows).max() - np.diff(rows).min() <= 1


def test_the_digest_sees_labels_sampled_tokens_and_size():
    rng = np.random.default_rng(0)
    tokens, labels = rng.integers(1, 9, size=(3000, 7)), rng.integers(0, 2, size=3000)
    base = split_digest(Split(tokens, labels))
    assert split_digest(Split(tokens.astype(np.int16).copy(), labels.copy())) == base  # the dtype is no part of it
    sampled, unsampled = int(sample_rows(3000)[5]), next(i for i in range(3000) if i not in set(sample_rows(3000)))
    for row, expect_change in ((sampled, True), (unsampled, False)):
        changed = tokens.copy()
        changed[row, 3] += 1
        assert (split_digest(Split(changed, labels)) != base) is expect_change
    flipped = labels.copy()
    flipped[unsampled] ^= 1  # every label counts
    assert split_digest(Split(tokens, flipped)) != base
    assert split_digest(Split(tokens[:-1], labels[:-1])) != base


def _file_hash(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_resume_on_data_drawn_afresh_passes_and_on_other_data_is_refused(tmp_path, capsys):
    data, out = tmp_path / "data", tmp_path / "run"
    common = ["run", "path-64", *TINY, *sets(), "--data-dir", str(data), "--out", str(out)]
    assert main([*common, "--stop-after", "5"]) == 0
    recorded = json.loads((out / "config.json").read_text())["data_hashes"]
    assert set(recorded) == {"train", "val", "test"} and all(h.startswith("sha256:") for h in recorded.values())
    shutil.rmtree(data)  # a new machine: the data is drawn again from its seed
    assert main([*common, "--resume", "--stop-after", "2"]) == 0  # same images, same hashes: it trains on
    task = build_task("path-64", data_dir=data, num_train=48, num_val=16, num_test=16, downsample=2)
    images = np.load(task.store.covering("train", 48).path / "images.npy", mmap_mode="r+")
    images[0, 10, 10] ^= 0xFF  # one pixel of a sampled image drawn differently
    images.flush()
    del images
    before = {p.name: _file_hash(p) for p in out.iterdir() if p.suffix != ".lock"}
    capsys.readouterr()
    assert main([*common, "--resume"]) == 2
    err = " ".join(capsys.readouterr()).replace("\n", " ")
    assert "the train split of path-64 here differs from the one" in err and recorded["train"] in err
    assert {p.name: _file_hash(p) for p in out.iterdir() if p.suffix != ".lock"} == before  # nothing written
