"""The AAN retrieval reader: LRA's TSV format, (N, 2, L) byte tokens, literals, corrupt rows, the committed fixture."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import numpy as np
import pytest

from lra.core.errors import DataCorruptError, DataMissingError, RunSetupError
from tasks import retrieval as R
from tasks.base import INFO_FIELDS
from tasks.registry import TASKS, build_task

FIXTURE = Path(__file__).parent / "fixtures" / "retrieval"
NAMES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}


def expected_split(path: Path, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and labels computed independently: plain str splitting of each line, ids = byte + 1."""
    lines = [ln for ln in path.read_bytes().decode("utf-8").split("\n") if ln]
    tokens = np.zeros((len(lines), 2, length), dtype=np.int64)
    labels = np.zeros(len(lines), dtype=np.int64)
    for i, line in enumerate(lines):
        label, _id1, _id2, text1, text2 = line.split("\t")
        labels[i] = int(float(label))
        for j, text in enumerate((text1, text2)):
            ids = [b + 1 for b in text.encode("utf-8")[:length]]
            tokens[i, j, : len(ids)] = ids
    return tokens, labels


def text_of(row: np.ndarray) -> bytes:
    """The bytes a token row stands for (padding dropped)."""
    return bytes((row[row > 0] - 1).astype(np.uint8))


def write_tsvs(folder: Path, rows: dict[str, list[str]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, name in NAMES.items():
        (folder / name).write_text("".join(r + "\n" for r in rows[split]), encoding="utf-8")
    return folder


def good_rows(n: int = 4) -> list[str]:
    return [f"{i % 2}\tA{i}\tB{i}\tb'doc {i} one'\tb'doc {i} two'" for i in range(n)]


def test_registered_as_a_pair_task():
    cls = TASKS.get("retrieval")
    assert cls.pair is True and cls.num_classes == 2
    assert build_task("retrieval", data_dir="/nonexistent").vocab_size == 257


def test_committed_fixture_is_what_the_generator_writes(tmp_path):
    from tests.fixtures.retrieval.make_fixture import write_fixture

    write_fixture(tmp_path)
    for name in NAMES.values():
        assert (tmp_path / name).read_bytes() == (FIXTURE / name).read_bytes(), name


def test_fixture_splits_match_independent_parse(tmp_path):
    task = build_task("retrieval", data_dir=tmp_path, source=str(FIXTURE), max_length=96)
    for split, name in NAMES.items():
        got = task.load(split)
        want_tokens, want_labels = expected_split(FIXTURE / name, 96)
        assert got.tokens.shape == want_tokens.shape and got.tokens.shape[1:] == (2, 96)
        np.testing.assert_array_equal(got.tokens, want_tokens)
        np.testing.assert_array_equal(got.labels, want_labels)
    train = task.load("train")
    assert len(train) == 384 and train.labels.mean() == 0.5
    # texts are printed bytes literals: the b and the quote are the first two tokens, as LRA fed them
    assert set(train.tokens[:, :, 0].ravel()) == {ord("b") + 1}


def test_caps_and_shorter_length_slice_the_same_cache(tmp_path):
    full = build_task("retrieval", data_dir=tmp_path, source=str(FIXTURE))
    full.prepare()
    capped = build_task("retrieval", data_dir=tmp_path, max_length=50, num_train=7, num_val=3)
    assert capped.cache().path == full.cache().path  # no re-import: caps and a shorter length apply at load time
    tr, va = capped.load("train"), capped.load("val")
    want, labels = expected_split(FIXTURE / NAMES["train"], 50)
    np.testing.assert_array_equal(tr.tokens, want[:7])
    np.testing.assert_array_equal(tr.labels, labels[:7])
    assert va.tokens.shape == (3, 2, 50) and len(capped.load("test")) == 64


def test_labels_as_floats_quotes_not_special_and_long_texts_truncated(tmp_path):
    long_text = "x" * 50
    rows = {
        "train": ['1.0\tA\tB\t"quoted start\tend"', "0\tC\tD\t" + long_text + "\tshort", "1\tE\tF\t'\t"],
        "val": good_rows(2),
        "test": good_rows(2),
    }
    folder = write_tsvs(tmp_path / "src", rows)
    task = build_task("retrieval", data_dir=tmp_path / "cache", source=str(folder), max_length=20)
    got = task.load("train")
    np.testing.assert_array_equal(got.labels, [1, 0, 1])
    assert text_of(got.tokens[0, 0]) == b'"quoted start' and text_of(got.tokens[0, 1]) == b'end"'
    assert text_of(got.tokens[1, 0]) == b"x" * 20 and got.tokens[1, 0].all()  # truncated to max_length
    assert text_of(got.tokens[2, 0]) == b"'" and not got.tokens[2, 1].any()


def test_decode_literals_turns_printed_bytes_back_into_bytes(tmp_path):
    field = repr("It's a r\u00e9sum\u00e9\nline two".encode())  # b"It's a r\xc3\xa9sum\xc3\xa9\nline two"
    rows = {
        "train": [f"1\tA\tB\t{field}\tplain text", "0\tA\tB\tb'x'\tb'y'"],
        "val": good_rows(2),
        "test": good_rows(2),
    }
    folder = write_tsvs(tmp_path / "src", rows)
    raw = build_task("retrieval", data_dir=tmp_path / "c", source=str(folder), max_length=64).load("train")
    dec = build_task("retrieval", data_dir=tmp_path / "c", source=str(folder), max_length=64, decode_literals=True)
    got = dec.load("train")
    assert dec.cache().path != build_task("retrieval", data_dir=tmp_path / "c").cache().path
    want = "It's a r\u00e9sum\u00e9\nline two".encode()
    assert text_of(got.tokens[0, 0]) == want and got.tokens[0, 0, : len(want)].all()
    assert text_of(got.tokens[0, 1]) == b"plain text"  # not a literal: kept
    assert text_of(raw.tokens[0, 0]) == field.encode()  # default: LRA's printed form


@pytest.mark.parametrize(
    "bad_row, message",
    [
        ("1\tA\tB\tonly four fields", "expected 5 tab-separated fields"),
        ("2\tA\tB\tx\ty", "is not 0 or 1"),
        ("yes\tA\tB\tx\ty", "is not 0 or 1"),
        ("1\tA\tB\tx\ty\tz", "found 6"),
    ],
)
def test_malformed_row_names_file_and_line_and_keeps_the_cache(tmp_path, bad_row, message):
    rows = {"train": good_rows(4), "val": good_rows(3), "test": good_rows(2)}
    folder = write_tsvs(tmp_path / "src", rows)
    task = build_task("retrieval", data_dir=tmp_path / "cache", source=str(folder), max_length=16)
    task.prepare()
    before = {s: task.load(s).tokens.copy() for s in NAMES}
    meta_before = (task.cache().path / "meta.json").read_text()

    rows["val"] = [*good_rows(2), bad_row, *good_rows(1)]  # the bad row is line 3 of the eval file
    write_tsvs(folder, rows)
    with pytest.raises(DataCorruptError) as err:
        task.prepare()
    assert "new_aan_pairs.eval.tsv: line 3: " in str(err.value) and message in str(err.value)
    for s in NAMES:
        np.testing.assert_array_equal(task.load(s).tokens, before[s])
    assert (task.cache().path / "meta.json").read_text() == meta_before
    assert [p.name for p in (tmp_path / "cache" / "retrieval").iterdir()] == [task.cache().path.name]  # no temp left


def test_a_full_disk_is_one_clear_error_and_keeps_the_cache(tmp_path, monkeypatch):
    folder = write_tsvs(tmp_path / "src", {s: good_rows(3) for s in NAMES})
    task = build_task("retrieval", data_dir=tmp_path / "cache", source=str(folder), max_length=16)
    task.prepare()
    cache = task.cache().path
    before = {p.name: p.read_bytes() for p in cache.iterdir()}

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "save", full)
    with pytest.raises(RunSetupError) as err:
        task.prepare()
    assert str(err.value) == (
        f"cannot write the data cache {cache}: the disk is full; the cache that was there is intact: free some space, "
        "or keep the data elsewhere with --data-dir or LRA_DATA"
    )
    assert {p.name: p.read_bytes() for p in cache.iterdir()} == before
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]  # no temporary folder left


def test_missing_data_says_where_it_comes_from_and_how_to_import(tmp_path):
    task = build_task("retrieval", data_dir=tmp_path)
    with pytest.raises(DataMissingError) as err:
        task.load("train")
    msg = str(err.value)
    assert "lra data prepare retrieval --from" in msg and "lra_release" in msg and str(task.cache().path) in msg
    with pytest.raises(DataMissingError, match="new_aan_pairs.train.tsv"):
        build_task("retrieval", data_dir=tmp_path, source=str(tmp_path)).prepare()


def test_finds_the_tsvs_under_a_release_folder_and_reports_info(tmp_path):
    folder = write_tsvs(tmp_path / "lra_release" / "tsv_data", {s: good_rows(3) for s in NAMES})
    task = build_task("retrieval", data_dir=tmp_path / "cache", source=str(tmp_path), max_length=8, num_val=2)
    assert len(task.load("test")) == 3
    info = task.info()
    assert tuple(info) == INFO_FIELDS and info["ready"] and info["prepare"] is None
    assert info["splits"] == {"train": 3, "val": 2, "test": 3} and info["details"]["stored"]["val"] == 3
    assert info["source"] == str(tmp_path) and info["where"] == str(task.cache().path)
    assert info["details"]["folder"] == str(folder) and info["details"]["built_from"].startswith(str(folder))
    assert info["bytes"] == sum(p.stat().st_size for p in task.cache().path.iterdir())
    json.dumps(info)  # printable by `lra data info --json`
    (folder / NAMES["val"]).write_text("".join(r + "\n" for r in good_rows(5)), encoding="utf-8")
    assert len(build_task("retrieval", data_dir=tmp_path / "cache", source=str(tmp_path)).load("val")) == 5


def test_decode_literal_only_touches_bytes_literals():
    assert R.decode_literal(b"b'a\\tb'") == b"a\tb"
    assert R.decode_literal(b'b"it\'s"') == b"it's"
    assert R.decode_literal(b"'not bytes'") == b"'not bytes'"
    assert R.decode_literal(b"b'unterminated") == b"b'unterminated"


@pytest.mark.parametrize("preset", [None, "tiny", "fa-paper"])
def test_config_data_settings_build_the_task(tmp_path, preset):
    from lra.train.config import load_config

    cfg = load_config("retrieval", preset)
    task = build_task(cfg.task, data_dir=tmp_path, **cfg.data)
    assert task.name == "retrieval" and task.max_length == cfg.data["max_length"]


def test_cli_prepare_and_info(tmp_path, capsys):
    from lra.cli.main import main

    assert main(["data", "prepare", "retrieval", "--from", str(FIXTURE), "--data-dir", str(tmp_path)]) == 0
    task = build_task("retrieval", data_dir=tmp_path, max_length=4000)
    assert task.cache().exists() and len(task.load("val")) == 64
    assert main(["data", "info", "retrieval", "--data-dir", str(tmp_path), "--json"]) == 0
    (info,) = json.loads(capsys.readouterr().out)
    assert info["ready"] and info["splits"] == {"train": 384, "val": 64, "test": 64}
