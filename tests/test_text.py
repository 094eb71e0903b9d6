"""The IMDB text task: tarball and folder readers, byte tokens, the validation carve, bad input, the real archive."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from lra.core.errors import DataCorruptError, DataMissingError
from tasks import text as T
from tasks.base import INFO_FIELDS
from tasks.registry import TASKS, build_task

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "aclImdb_v1.tar.gz"

# (split, folder, id, rating) -> review bytes; UTF-8, HTML line breaks and quotes as in the real files.
REVIEWS = {}
for _split, _n in (("train", 8), ("test", 5)):
    for _folder, _ratings in (("neg", (1, 2, 3, 4)), ("pos", (7, 8, 9, 10))):
        for _i in range(_n):
            _text = f'{_split} {_folder} review {_i}: "caf\u00e9"<br /><br />' + "words " * (3 + 4 * _i)
            REVIEWS[(_split, _folder, _i, _ratings[_i % 4])] = _text.encode("utf-8")


def member_name(split: str, folder: str, rid: int, rating: int) -> str:
    return f"aclImdb/{split}/{folder}/{rid}_{rating}.txt"


def make_tarball(path: Path, reviews: dict = REVIEWS, extra: dict[str, bytes] | None = None) -> Path:
    """A tiny aclImdb_v1.tar.gz: folders, README and vocab members as in the real one, reviews in shuffled order."""
    with tarfile.open(path, "w:gz") as tf:
        for d in (
            "aclImdb",
            "aclImdb/train",
            "aclImdb/test",
            *(f"aclImdb/{s}/{f}" for s in ("train", "test") for f in ("neg", "pos")),
        ):
            info = tarfile.TarInfo(d)
            info.type = tarfile.DIRTYPE
            tf.addfile(info)
        files = {"aclImdb/README": b"readme", "aclImdb/imdb.vocab": b"the\nand\n", **(extra or {})}
        files.update({member_name(*k): v for k, v in sorted(reviews.items(), key=lambda kv: (kv[0][2], kv[0][1]))})
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def stored_ids(task, split: str) -> np.ndarray:
    return np.load(task.cache().path / f"{split}_ids.npy")


def expected_row(text: bytes, length: int) -> np.ndarray:
    row = np.zeros(length, dtype=np.int64)
    ids = [b + 1 for b in text[:length]]
    row[: len(ids)] = ids
    return row


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    return make_tarball(tmp_path_factory.mktemp("imdb") / "aclImdb_v1.tar.gz")


def check_split(task, split: str, origin: str, length: int) -> None:
    """Every stored row is its review's bytes + 1, truncated and padded; labels are neg 0 / pos 1."""
    data = task.load(split)
    by_key = {(f, i): text for (s, f, i, _), text in REVIEWS.items() if s == origin}
    for row, label, rid in zip(data.tokens, data.labels, stored_ids(task, split)):
        folder = "pos" if label == 1 else "neg"
        np.testing.assert_array_equal(row, expected_row(by_key[(folder, int(rid))], length))


def test_registered():
    cls = TASKS.get("text")
    assert cls.num_classes == 2 and not cls.pair
    assert build_task("text", data_dir="/x").vocab_size == 257 and build_task("text", data_dir="/x").max_length == 4096


def test_tarball_import_tokens_labels_and_validation_carve(tmp_path, tarball):
    task = build_task("text", data_dir=tmp_path, source=str(tarball), max_length=64, num_val=4, seed=3)
    for split, origin in (("train", "train"), ("val", "train"), ("test", "test")):
        check_split(task, split, origin, 64)
    train, val, test = task.load("train"), task.load("val"), task.load("test")
    assert (len(train), len(val), len(test)) == (12, 4, 10)
    assert train.tokens.shape == (12, 64) and test.labels.sum() == 5
    carved = {(int(lab), int(i)) for lab, i in zip(val.labels, stored_ids(task, "val"))}
    kept = {(int(lab), int(i)) for lab, i in zip(train.labels, stored_ids(task, "train"))}
    assert not carved & kept and len(carved | kept) == 16  # a partition of the 16 training reviews


def test_folder_and_tarball_give_identical_caches(tmp_path, tarball):
    with tarfile.open(tarball) as tf:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python < 3.11.4 has no filters
        tf.extractall(tmp_path / "extracted", **safe)
    a = build_task("text", data_dir=tmp_path / "a", source=str(tarball), max_length=40, num_val=3)
    for source in (tmp_path / "extracted", tmp_path / "extracted" / "aclImdb"):  # the folder or its parent
        b = build_task("text", data_dir=tmp_path / "b", source=str(source), max_length=40, num_val=3)
        b.prepare()
        for split in ("train", "val", "test"):
            np.testing.assert_array_equal(a.load(split).tokens, b.load(split).tokens)
            np.testing.assert_array_equal(a.load(split).labels, b.load(split).labels)


def test_seed_decides_the_carve_and_is_deterministic(tmp_path, tarball):
    def val_ids(seed, where):
        t = build_task("text", data_dir=tmp_path / where, source=str(tarball), num_val=4, seed=seed, max_length=8)
        t.load("val")
        return sorted(zip(t.load("val").labels.tolist(), stored_ids(t, "val").tolist()))

    assert val_ids(0, "x") == val_ids(0, "y")
    assert val_ids(0, "x") != val_ids(1, "x")


def test_caps_and_shorter_max_length_reuse_the_stored_cache(tmp_path, tarball):
    full = build_task("text", data_dir=tmp_path, source=str(tarball), num_val=4)
    full.prepare()
    small = build_task("text", data_dir=tmp_path, max_length=10, num_val=4, num_train=5, num_test=3)  # no source
    assert small.cache().path == full.cache().path
    np.testing.assert_array_equal(small.load("train").tokens, full.load("train").tokens[:5, :10])
    assert small.load("test").tokens.shape == (3, 10) and len(small.load("val")) == 4
    assert full.load("train").tokens.shape[1] == 4096  # stored at the paper's length


def test_long_reviews_are_truncated_and_short_ones_padded(tmp_path, tarball):
    task = build_task("text", data_dir=tmp_path, source=str(tarball), max_length=30, num_val=2)
    tokens = task.load("test").tokens
    lengths = (tokens > 0).sum(1)
    assert lengths.max() == 30 and all(tokens[i, lengths[i] :].sum() == 0 for i in range(len(tokens)))


def test_truncated_archive_is_corrupt_and_leaves_the_cache(tmp_path, tarball):
    task = build_task("text", data_dir=tmp_path / "cache", source=str(tarball), max_length=16, num_val=2)
    task.prepare()
    before = task.load("train").tokens.copy()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(tarball.read_bytes()[: tarball.stat().st_size // 2])
    with pytest.raises(DataCorruptError, match=r"cut\.tar\.gz: truncated or corrupt archive"):
        task.prepare(source=str(cut))
    np.testing.assert_array_equal(task.load("train").tokens, before)
    assert [p.name for p in (tmp_path / "cache" / "text").iterdir()] == [task.cache().path.name]


def file_hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_run_checks_its_source_against_the_cache(tmp_path, tarball, monkeypatch, capsys):
    source = tmp_path / "aclImdb_v1.tar.gz"
    shutil.copy(tarball, source)
    settings = dict(data_dir=tmp_path / "cache", source=str(source), max_length=16, num_val=2)
    task = build_task("text", **settings)
    task.load("train")  # first use imports
    cache = task.cache().path
    before = file_hashes(cache)
    assert task.info()["ready"] and task.info()["details"]["built_from"].startswith(str(source))

    def no_import(*args, **kwargs):
        raise AssertionError("an unchanged source must not be imported again")

    with monkeypatch.context() as m:
        m.setattr(T.TextTask, "import_into", no_import)
        assert len(build_task("text", **settings).load("val")) == 2

    source.write_bytes(tarball.read_bytes()[: tarball.stat().st_size // 2])  # truncated in place
    with pytest.raises(DataCorruptError, match=r"aclImdb_v1\.tar\.gz: truncated or corrupt archive"):
        build_task("text", **settings).load("train")
    assert "changed since the cache" in capsys.readouterr().err
    stale = build_task("text", **settings).info()
    assert not stale["ready"] and "changed since the cache" in stale["details"]["stale"]
    assert (
        stale["prepare"]
        == f"lra data prepare text --from {source} --set data.num_val=2 --data-dir {cache.parent.parent}"
    )
    source.unlink()
    with pytest.raises(DataMissingError, match="does not exist"):
        build_task("text", **settings).load("train")  # an unreadable source is an error, cache or not
    assert file_hashes(cache) == before  # the old cache is intact

    fewer = {k: v for k, v in REVIEWS.items() if k[2] < 6}
    other = make_tarball(tmp_path / "other.tar.gz", fewer)
    moved = build_task("text", **{**settings, "source": str(other)})
    assert len(moved.load("train")) == sum(k[0] == "train" for k in fewer) - 2  # imported again
    assert f"was built from {source}" in capsys.readouterr().err
    assert file_hashes(cache) != before and [p.name for p in cache.parent.iterdir()] == [cache.name]


def test_info_fields_before_and_after_prepare(tmp_path, tarball):
    task = build_task("text", data_dir=tmp_path, max_length=1000, num_val=4, num_train=5)
    info = task.info()
    assert tuple(info) == INFO_FIELDS and not info["ready"] and info["splits"] == {} and info["bytes"] == 0
    want = f"lra data prepare text --from /path/to/aclImdb_v1.tar.gz --set data.num_val=4 --data-dir {tmp_path}"
    assert info["prepare"] == want  # max_length 1000 reads the 4096-byte cache: not a setting of the cache
    assert info["source"] == T.IMDB_URL and info["where"] == str(task.cache().path)
    task.prepare(source=str(tarball))
    info = task.info()
    assert info["ready"] and info["prepare"] is None and info["source"] == str(tarball.resolve())
    assert info["splits"] == {"train": 5, "val": 4, "test": 10}  # the train cap applies
    assert info["details"]["stored"] == {"train": 12, "val": 4, "test": 10}
    assert info["bytes"] == sum(p.stat().st_size for p in task.cache().path.iterdir())


def test_rating_that_contradicts_its_folder_is_corrupt(tmp_path):
    bad = dict(REVIEWS)
    bad[("train", "pos", 99, 2)] = b"rated 2 but filed as positive"
    path = make_tarball(tmp_path / "bad.tar.gz", bad)
    with pytest.raises(DataCorruptError, match=r"member aclImdb/train/pos/99_2\.txt: rating 2 in a 'pos' folder"):
        build_task("text", data_dir=tmp_path, source=str(path)).prepare()


def test_archive_without_test_reviews_is_corrupt(tmp_path):
    only_train = {k: v for k, v in REVIEWS.items() if k[0] == "train"}
    path = make_tarball(tmp_path / "half.tar.gz", only_train)
    with pytest.raises(DataCorruptError, match="no test reviews"):
        build_task("text", data_dir=tmp_path, source=str(path), num_val=2).prepare()


def test_missing_data_message_names_cache_url_and_command(tmp_path):
    task = build_task("text", data_dir=tmp_path)
    with pytest.raises(DataMissingError) as err:
        task.load("val")
    msg = str(err.value)
    assert str(task.cache().path) in msg and T.IMDB_URL in msg
    assert "lra data prepare text --from /path/to/aclImdb_v1.tar.gz" in msg
    with pytest.raises(DataMissingError, match="does not exist"):
        build_task("text", data_dir=tmp_path, source=str(tmp_path / "nope.tar.gz")).load("train")


def test_tfds_source_without_tensorflow_datasets_says_how_to_install(tmp_path):
    try:
        import tensorflow_datasets  # noqa: F401

        pytest.skip("tensorflow-datasets is installed; this checks the message when it is not")
    except ImportError:
        pass
    with pytest.raises(DataMissingError, match=r"pip install 'lra\[tfds\]'"):
        build_task("text", data_dir=tmp_path, source="tfds").prepare()


def test_bad_settings_are_clear():
    with pytest.raises(ValueError, match="num_val"):
        build_task("text", num_val=-1)
    with pytest.raises(ValueError, match="max_length"):
        build_task("text", max_length=0)
    with pytest.raises(ValueError, match="no data setting"):
        build_task("text", max_len=10)


@pytest.mark.skipif(not REAL.is_file(), reason=f"the real IMDB archive is not at {REAL}")
def test_real_imdb_archive_counts_balance_and_bytes():
    reviews = T.read_imdb_tar(str(REAL))
    for split in ("train", "test"):
        labels = np.array([r[0] for r in reviews[split]])
        assert len(labels) == 25000 and labels.sum() == 12500, split
    independent = {}  # the first two reviews of the stream, read with tarfile alone (stops early: a full pass is slow)
    with tarfile.open(REAL, "r|gz") as tf:
        for m in tf:
            if m.name.endswith(".txt"):
                independent[m.name] = tf.extractfile(m).read()
                if len(independent) == 2:
                    break
    neg = independent["aclImdb/test/neg/0_2.txt"]
    assert neg.startswith(b"Once again Mr. Costner has dragged out a movie for far longer than necessary.")
    test_reviews = {(r[0], r[1]): r[2] for r in reviews["test"]}
    assert test_reviews[(0, 0)] == neg and test_reviews[(0, 10000)] == independent["aclImdb/test/neg/10000_4.txt"]
    first = {(r[0], r[1]): r[2] for r in reviews["train"]}[(1, 0)]  # train/pos/0_9.txt, the best-known review
    assert first.startswith(b"Bromwell High is a cartoon comedy.")
    tokens = T.bytes_to_tokens([first], 4096)[0]
    np.testing.assert_array_equal(tokens, expected_row(first, 4096))


@pytest.mark.parametrize("preset", [None, "tiny", "fa-paper"])
def test_config_data_settings_build_the_task(tmp_path, preset):
    from lra.train.config import load_config

    cfg = load_config("text", preset)
    task = build_task(cfg.task, data_dir=tmp_path, **cfg.data)
    assert task.name == "text" and task.max_length == cfg.data["max_length"]
