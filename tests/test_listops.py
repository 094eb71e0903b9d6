"""ListOps: the evaluator (hand-evaluated expressions), the task's cache, config and info, LRA's TSV reader and the
export, against the independent references of tests/listops_reference.py. The generator's tests are
tests/test_listops_generator.py.
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from lra.core.errors import DataCorruptError, DataMissingError
from tasks import _listops_gen as gen
from tasks import listops
from tasks._listops_tokens import evaluate
from tasks.base import INFO_FIELDS, Split
from tasks.listops import ListOps, read_tsv, write_tsv
from tasks.registry import build_task, task_options
from tests.listops_reference import (
    SMALL,
    TOKEN_ID,
    bracket_tokens,
    lra_parse,
    lra_reference_tree,
    lra_strings,
    lra_to_string,
    lra_value,
)

FIXTURES = Path(__file__).parent / "fixtures" / "listops"
CONFIG = Path(__file__).parent.parent / "configs" / "listops.yaml"


def tiny_settings() -> dict:
    return yaml.safe_load(CONFIG.read_text())["presets"]["tiny"]["data"]


# --------------------------------------------------------------------------------------------------------------------
# Evaluator

HAND = [
    ("[MAX 2 9 ]", 9),
    ("[MIN 4 [MAX 1 8 ] 6 ]", 4),
    ("[MED 1 2 3 4 ]", 2),  # median 2.5, floor 2
    ("[MED 7 1 3 ]", 3),
    ("[MED 0 9 ]", 4),  # 4.5 -> 4
    ("[MED 9 9 8 8 ]", 8),  # 8.5 -> 8
    ("[SM 9 8 7 ]", 4),  # 24 mod 10
    ("[SM [MAX 9 9 ] [MED 5 6 ] 3 ]", 7),  # 9 + 5 + 3 = 17
    ("[MIN [SM 5 5 ] 3 ]", 0),
    ("[MAX [MIN [SM 1 2 ] [MED 3 8 6 0 ] ] 2 ]", 3),  # SM 3, MED (3+6)/2 -> 4, MIN 3, MAX 3
    ("[SM [SM 9 9 9 ] [SM 9 9 ] [MIN 0 9 ] [MAX 1 1 ] 2 ]", 8),  # 27 -> 7, 18 -> 8; 7 + 8 + 0 + 1 + 2 = 18 -> 8
]


@pytest.mark.parametrize("expr,value", HAND)
def test_evaluator_hand_expressions(expr, value):
    assert evaluate(np.array(bracket_tokens(expr))).tolist() == [value]


def test_evaluator_batch_with_padding_matches_single_rows():
    rows = np.zeros((len(HAND), 40), dtype=np.uint8)
    for i, (expr, _) in enumerate(HAND):
        toks = bracket_tokens(expr)
        rows[i, : len(toks)] = toks
    assert evaluate(rows).tolist() == [v for _, v in HAND]


@pytest.mark.parametrize("expr", ["[MAX 2 9", "[MAX 2 9 ] ]", "[MAX ]", "2 3", "[MAX 2 ] 4", "] [MAX 2 9"])
def test_evaluator_rejects_malformed(expr):
    with pytest.raises(ValueError, match="not well-formed"):
        evaluate(np.array(bracket_tokens(expr)))


def test_evaluator_rejects_unknown_token_ids():
    with pytest.raises(ValueError, match="not well-formed"):
        evaluate(np.array([12, 3, 16, 15]))


# --------------------------------------------------------------------------------------------------------------------
# Task: cache, config, info


def test_config_data_keys_are_the_task_settings():
    cfg = yaml.safe_load(CONFIG.read_text())
    assert set(cfg["data"]) == set(task_options("listops"))
    assert set(tiny_settings()) <= set(task_options("listops"))


def test_tiny_preset_generates_caches_and_reads_back(tmp_path, monkeypatch):
    task = build_task("listops", data_dir=tmp_path, **tiny_settings())
    info = task.info()
    assert tuple(info) == INFO_FIELDS and info["ready"] is False and info["bytes"] == 0
    changed = " ".join(f"--set data.{k}={v}" for k, v in tiny_settings().items())  # every tiny setting is not default
    assert info["prepare"] == f"lra data prepare listops {changed} --data-dir {tmp_path}"
    val = task.load("val")
    assert val.tokens.shape == (tiny_settings()["num_val"], tiny_settings()["max_length"])
    assert (evaluate(val.tokens) == val.labels).all()
    info = task.info()
    assert info["ready"] and info["prepare"] is None and Path(info["where"]).parent == tmp_path / "listops"
    assert info["splits"] == {s: tiny_settings()[f"num_{s}"] for s in ("train", "val", "test")}
    assert info["bytes"] == sum(p.stat().st_size for p in Path(info["where"]).iterdir()) > val.tokens.size
    assert info["details"]["splits"]["val"]["majority_share"] == np.bincount(val.labels).max() / len(val)
    assert [p.name for p in (tmp_path / "listops").iterdir()] == [Path(info["where"]).name]  # no temp left

    def fail(*a, **k):
        raise AssertionError("cached data must not be generated again")

    monkeypatch.setattr(gen, "generate", fail)
    again = build_task("listops", data_dir=tmp_path, **tiny_settings()).load("val")
    assert np.array_equal(again.tokens, val.tokens) and np.array_equal(again.labels, val.labels)
    other = build_task("listops", data_dir=tmp_path, **{**tiny_settings(), "seed": 1})
    assert other.cache().path != task.cache().path


def test_same_settings_same_data_in_another_folder(tmp_path):
    kw = dict(max_length=64, min_length=10, max_depth=4, max_args=4, num_train=100, num_val=20, num_test=20)
    a = ListOps(tmp_path / "a", **kw).load("test")
    b = ListOps(tmp_path / "b", **kw).load("test")
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.labels, b.labels)


def test_unknown_split(tmp_path):
    with pytest.raises(ValueError, match="unknown split"):
        ListOps(tmp_path).load("dev")


# --------------------------------------------------------------------------------------------------------------------
# LRA's TSVs: reader, errors, export


def test_reader_on_release_format_fixture():
    train = read_tsv(FIXTURES / "basic_train.tsv", max_length=32)
    assert train.labels.tolist() == [9, 4, 2, 4, 7]
    expected = bracket_tokens("[MIN 4 [MAX 1 8 ] 6 ]")
    assert train.tokens[1, : len(expected)].tolist() == expected and not train.tokens[1, len(expected) :].any()
    assert (evaluate(train.tokens) == train.labels).all()
    task = ListOps(source=FIXTURES, max_length=40)
    assert task.load("test").labels.tolist() == [3, 4]
    assert task.load("val").labels.tolist() == [3, 0]
    info = task.info()
    assert (
        info["ready"] and info["where"] == str(FIXTURES) and info["details"]["files"]["val"].endswith("basic_val.tsv")
    )
    assert info["bytes"] == sum((FIXTURES / f"basic_{s}.tsv").stat().st_size for s in ("train", "val", "test"))


def test_reader_cuts_long_rows_like_lra():
    with pytest.warns(UserWarning, match="longer than max_length=8"):
        test = read_tsv(FIXTURES / "basic_test.tsv", max_length=8)
    assert test.tokens[0].tolist() == bracket_tokens("[MAX [MIN [SM 1 2 ] [MED 3")


def test_reader_names_file_and_line_of_malformed_row():
    path = FIXTURES / "malformed" / "basic_train.tsv"
    with pytest.raises(DataCorruptError, match=r"malformed/basic_train\.tsv, line 4: source is not one ListOps"):
        read_tsv(path, max_length=32)
    with pytest.raises(DataCorruptError, match="line 4"):
        ListOps(source=FIXTURES / "malformed").prepare()


@pytest.mark.parametrize(
    "row,match",
    [
        ("( ( ( [MAX 2 ) 9 ) ] )", "2 tab-separated fields"),
        ("( ( ( [MAX 2 ) 9 ) ] )\t12", "not a digit"),
        ("( ( ( [MAX 2 ) 9 ) ] )\t9\t1", "found 3"),
        ("( ( ( [FIRST 2 ) 9 ) ] )\t2", "not one ListOps expression"),
        ("( ( ( [MAX 2 ) 19 ) ] )\t9", "not one ListOps expression"),
        ("( ( ( [MAX 2 ) 9 ) ] ) 4\t9", "not one ListOps expression"),
        ("\t9", "not one ListOps expression"),
    ],
)
def test_reader_rejects_bad_rows(tmp_path, row, match):
    path = tmp_path / "basic_train.tsv"
    path.write_bytes(b"Source\tTarget\r\n( ( ( [SM 1 ) 2 ) ] )\t3\r\n" + row.encode() + b"\r\n")
    with pytest.raises(DataCorruptError, match=f"basic_train.tsv, line 3: .*{match}"):
        read_tsv(path, max_length=32)


def test_reader_blank_lines_only_at_the_end(tmp_path):
    path = tmp_path / "basic_val.tsv"
    path.write_bytes(b"Source\tTarget\r\n( ( ( [SM 1 ) 2 ) ] )\t3\r\n\r\n")
    assert read_tsv(path, max_length=8).labels.tolist() == [3]
    path.write_bytes(b"Source\tTarget\r\n( ( ( [SM 1 ) 2 ) ] )\t3\r\n\r\n( ( ( [SM 1 ) 3 ) ] )\t4\r\n")
    with pytest.raises(DataCorruptError, match="line 3: blank line"):
        read_tsv(path, max_length=8)


def test_reader_reports_lines_past_the_first_block(tmp_path, monkeypatch):
    monkeypatch.setattr(listops, "READ_BLOCK", 4)
    good = b"( ( ( [SM 1 ) 2 ) ] )\t3\r\n"
    path = tmp_path / "basic_test.tsv"
    path.write_bytes(b"Source\tTarget\r\n" + good * 9 + b"( ( ( [SM 1 ) 2 ) )\t3\r\n" + good)
    with pytest.raises(DataCorruptError, match="line 11: source is not"):
        read_tsv(path, max_length=8)
    path.write_bytes(b"Source\tTarget\r\n" + good * 10)
    assert read_tsv(path, max_length=8).tokens.shape == (10, 8)


def test_reader_needs_header_and_files(tmp_path):
    path = tmp_path / "basic_train.tsv"
    path.write_text("( ( ( [SM 1 ) 2 ) ] )\t3\n")
    with pytest.raises(DataCorruptError, match="line 1: expected the header"):
        read_tsv(path, max_length=32)
    with pytest.raises(DataMissingError, match="basic_val.tsv not found.*lra_release"):
        ListOps(source=tmp_path).load("val")


def test_strings_are_lras_to_string():
    rng = random.Random(7)
    trees = []
    while len(trees) < 60:
        tree, length = lra_reference_tree(rng, 1, 6, 5)
        if length > 6:
            trees.append(lra_to_string(tree))
    tokens = np.zeros((len(trees), 400), dtype=np.uint8)
    for i, s in enumerate(trees):
        toks = [TOKEN_ID[t] for t in s.split() if t not in "()"]
        tokens[i, : len(toks)] = toks
    assert lra_strings(tokens) == trees


def test_written_tsv_is_what_lras_csv_writer_writes(tmp_path):
    tokens, labels = gen.generate(SMALL, seed=4, total=50)
    write_tsv(tmp_path / "ours.tsv", Split(tokens, labels))
    with open(tmp_path / "lra.tsv", "w", newline="") as f:  # LRA: csv.writer(f, delimiter="\t") on its strings
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows([s, v] for s, v in zip(lra_strings(tokens), labels.tolist()))
    assert (tmp_path / "ours.tsv").read_bytes() == (tmp_path / "lra.tsv").read_bytes()


def test_export_read_round_trip(tmp_path):
    kw = dict(max_length=96, min_length=16, max_depth=5, max_args=5, num_train=200, num_val=30, num_test=30)
    task = ListOps(tmp_path / "cache", **kw)
    paths = task.export(tmp_path / "out")
    assert [p.name for p in paths] == ["basic_train.tsv", "basic_val.tsv", "basic_test.tsv"]
    raw = paths[1].read_bytes()
    assert raw.startswith(b"Source\tTarget\r\n") and raw.count(b"\r\n") == 31
    first = raw.split(b"\r\n")[1].decode().split("\t")
    assert lra_value(lra_parse(first[0])) == int(first[1])
    readback = ListOps(tmp_path / "cache", source=tmp_path / "out", **kw)
    for split in ("train", "val", "test"):
        a, b = task.load(split), readback.load(split)
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.labels, b.labels)
    assert Counter(p.name for p in (tmp_path / "out").iterdir()) == Counter(p.name for p in paths)
