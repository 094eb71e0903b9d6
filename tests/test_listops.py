"""ListOps: evaluator, generator (against an independent transcription of LRA's algorithm), cache, TSV reader, export.

The references here are written in this file: a hand-evaluated set of expressions, a recursive evaluator of LRA's
parenthesised strings (LRA's own "unsaturated function" reading), and a plain transcription of LRA's recursive
generator with Python's `random`.
"""

from __future__ import annotations

import csv
import random
import statistics
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from lra.core.errors import DataCorruptError, DataMissingError
from tasks import _listops_gen as gen
from tasks import listops
from tasks.base import INFO_FIELDS, Split
from tasks.listops import ListOps, read_tsv, write_tsv
from tasks.registry import build_task, task_options

FIXTURES = Path(__file__).parent / "fixtures" / "listops"
CONFIG = Path(__file__).parent.parent / "configs" / "listops.yaml"
SMALL = gen.Grammar(max_length=60, min_length=10, max_depth=5, max_args=5)
TOKEN_ID = {s: i for i, s in enumerate(gen.TOKEN_STRINGS)}


# --------------------------------------------------------------------------------------------------------------------
# Independent references


def lra_parse(source: str):
    """LRA's string `( a b )` as nested pairs; leaves are '[OP', digits and ']'."""
    toks = source.split()
    pos = 0

    def node():
        nonlocal pos
        t = toks[pos]
        pos += 1
        if t != "(":
            return t
        a, b = node(), node()
        assert toks[pos] == ")", f"expected ')' at token {pos} of {source!r}"
        pos += 1
        return (a, b)

    tree = node()
    assert pos == len(toks), f"trailing tokens in {source!r}"
    return tree


def lra_value(tree, max_args: int | None = None, arg_counts: list[int] | None = None) -> int | tuple:
    """Evaluate nested pairs the way LRA's to_value reads them: an operator collects arguments until ']'."""
    if isinstance(tree, str):
        return int(tree) if tree.isdigit() else tree
    left = lra_value(tree[0], max_args, arg_counts)
    right = lra_value(tree[1], max_args, arg_counts)
    if isinstance(left, str):
        return (left, [right])
    if right == "]":
        op, args = left
        if arg_counts is not None:
            arg_counts.append(len(args))
        return {
            "[MIN": min,
            "[MAX": max,
            "[MED": lambda a: int(statistics.median(a)),
            "[SM": lambda a: sum(a) % 10,
        }[op](args)
    return (left[0], left[1] + [right])


def bracket_tokens(expr: str) -> list[int]:
    """Token ids of an expression written without parentheses: '[MAX 2 [MIN 3 4 ] ]'."""
    return [TOKEN_ID[t] for t in expr.split()]


def lra_reference_tree(rng: random.Random, depth: int, max_depth: int, max_args: int):
    """LRA's generate_tree, transcribed: (nested pairs, length without parentheses)."""
    if depth < max_depth and rng.random() <= 0.25:
        n_args = rng.randint(2, max_args)
        args, length = [], 2
        for _ in range(n_args):
            sub, sub_len = lra_reference_tree(rng, depth + 1, max_depth, max_args)
            args.append(sub)
            length += sub_len
        op = rng.choice(["[MIN", "[MAX", "[MED", "[SM"])
        tree = (op, args[0])
        for a in args[1:]:
            tree = (tree, a)
        return (tree, "]"), length
    return str(rng.choice(range(10))), 1


def lra_to_string(tree) -> str:
    if isinstance(tree, str):
        return tree
    return "( " + lra_to_string(tree[0]) + " " + lra_to_string(tree[1]) + " )"


def lra_reference_sample(g: gen.Grammar, n: int, seed: int, value_p: float = 0.25) -> list[str]:
    """n distinct accepted strings from the transcription, in order (`value_p` other than 0.25 is a wrong grammar)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        if value_p == 0.25:
            tree, length = lra_reference_tree(rng, 1, g.max_depth, g.max_args)
        else:
            tree, length = _biased_tree(rng, 1, g, value_p)
        if g.min_length < length < g.max_length:
            out.setdefault(lra_to_string(tree))
    return list(out)


def _biased_tree(rng: random.Random, depth: int, g: gen.Grammar, p: float):
    if depth < g.max_depth and rng.random() <= p:
        subs = [_biased_tree(rng, depth + 1, g, p) for _ in range(rng.randint(2, g.max_args))]
        tree = (rng.choice(["[MIN", "[MAX", "[MED", "[SM"]), subs[0][0])
        for s, _ in subs[1:]:
            tree = (tree, s)
        return (tree, "]"), 2 + sum(n for _, n in subs)
    return str(rng.randrange(10)), 1


def row_stats(strings: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Length (tokens without parentheses), value and depth (root = 1) of LRA strings."""
    lengths, values, depths = [], [], []
    for s in strings:
        toks = [t for t in s.split() if t not in "()"]
        lengths.append(len(toks))
        values.append(lra_value(lra_parse(s)))
        level = deepest = 0
        for t in toks:
            level += t.startswith("[")
            level -= t == "]"
            deepest = max(deepest, level)
        depths.append(deepest + 1)
    return np.array(lengths), np.array(values), np.array(depths)


def chi2(a: np.ndarray, b: np.ndarray, bins: np.ndarray) -> tuple[float, int]:
    """Two-sample chi-square statistic over `bins` (edges) and its degrees of freedom."""
    ca, _ = np.histogram(a, bins)
    cb, _ = np.histogram(b, bins)
    keep = (ca + cb) > 0
    ca, cb = ca[keep].astype(float), cb[keep].astype(float)
    ka, kb = np.sqrt(cb.sum() / ca.sum()), np.sqrt(ca.sum() / cb.sum())
    return float((((ka * ca - kb * cb) ** 2) / (ca + cb)).sum()), int(keep.sum()) - 1


def lra_strings(tokens: np.ndarray) -> list[str]:
    """LRA's printed string of each token row, through the TSV writer's byte builder (one row per line)."""
    tokens = np.atleast_2d(tokens)
    return gen.lra_bytes(tokens, [b"\n"], np.zeros(len(tokens), dtype=np.int64)).decode().split("\n")[:-1]


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
    assert gen.evaluate(np.array(bracket_tokens(expr))).tolist() == [value]


def test_evaluator_batch_with_padding_matches_single_rows():
    rows = np.zeros((len(HAND), 40), dtype=np.uint8)
    for i, (expr, _) in enumerate(HAND):
        toks = bracket_tokens(expr)
        rows[i, : len(toks)] = toks
    assert gen.evaluate(rows).tolist() == [v for _, v in HAND]


@pytest.mark.parametrize("expr", ["[MAX 2 9", "[MAX 2 9 ] ]", "[MAX ]", "2 3", "[MAX 2 ] 4", "] [MAX 2 9"])
def test_evaluator_rejects_malformed(expr):
    with pytest.raises(ValueError, match="not well-formed"):
        gen.evaluate(np.array(bracket_tokens(expr)))


def test_evaluator_rejects_unknown_token_ids():
    with pytest.raises(ValueError, match="not well-formed"):
        gen.evaluate(np.array([12, 3, 16, 15]))


# --------------------------------------------------------------------------------------------------------------------
# Generated data: labels, grammar, determinism, duplicates


@pytest.fixture(scope="module")
def small_strings():
    tokens, labels = gen.generate(SMALL, seed=3, total=1500)
    return tokens, labels, lra_strings(tokens)


def test_labels_match_independent_evaluation(small_strings):
    tokens, labels, strings = small_strings
    assert [lra_value(lra_parse(s)) for s in strings] == labels.tolist()


def test_labels_match_at_full_settings():
    chunk = gen.generate_chunk(gen.Grammar(), seed=0, chunk=0, n_trees=1024)
    assert len(chunk.labels) > 20
    strings = lra_strings(chunk.tokens)
    assert [lra_value(lra_parse(s)) for s in strings] == chunk.labels.tolist()
    lengths = (chunk.tokens != 0).sum(axis=1)
    assert lengths.min() > 500 and lengths.max() < 2000


def test_grammar_bounds(small_strings):
    tokens, _, strings = small_strings
    g = SMALL
    assert tokens.shape == (1500, g.max_length) and tokens.dtype == np.uint8
    assert set(np.unique(tokens).tolist()) <= set(range(gen.VOCAB_SIZE))
    lengths = (tokens != 0).sum(axis=1)
    # right-padded: every real token sits before every pad
    assert ((tokens != 0) == (np.arange(g.max_length) < lengths[:, None])).all()
    lengths_s, _, depths = row_stats(strings)
    assert (lengths_s == lengths).all()
    assert lengths.min() > g.min_length and lengths.max() < g.max_length
    assert depths.max() <= g.max_depth and depths.max() == g.max_depth  # the limit is reached, not exceeded
    counts: list[int] = []
    for s in strings:
        lra_value(lra_parse(s), arg_counts=counts)
        assert set(s.split()) <= {"(", ")", "]", "[MIN", "[MAX", "[MED", "[SM", *map(str, range(10))}
    assert min(counts) == 2 and max(counts) == g.max_args


def test_deterministic_across_runs_and_workers(monkeypatch):
    g = gen.Grammar(max_length=80, min_length=12, max_depth=6, max_args=5)
    a = gen.generate(g, seed=11, total=700, workers=1, n_trees=256)
    b = gen.generate(g, seed=11, total=700, workers=1, n_trees=256)
    monkeypatch.setattr(gen, "POOL_AFTER_S", 0.0)  # force the process pool even for this small job
    c = gen.generate(g, seed=11, total=700, workers=2, n_trees=256)
    other = gen.generate(g, seed=12, total=700, workers=1, n_trees=256)
    for x in (b, c):
        assert np.array_equal(a[0], x[0]) and np.array_equal(a[1], x[1])
    assert not np.array_equal(a[0], other[0])


def test_deduplicates_in_order_and_splits_do_not_overlap(tmp_path):
    g = gen.Grammar(max_length=14, min_length=4, max_depth=3, max_args=3)  # few distinct trees: duplicates are common
    drawn = [gen.generate_chunk(g, seed=5, chunk=c, n_trees=512) for c in range(3)]
    raw = [row.tobytes() for ch in drawn for row in ch.tokens]
    assert len(set(raw)) < len(raw)  # the stream does repeat itself
    first_seen = list(dict.fromkeys(raw))
    tokens, _ = gen.generate(g, seed=5, total=200, n_trees=512)
    assert [row.tobytes() for row in tokens] == first_seen[:200]

    task = ListOps(
        tmp_path, max_length=14, min_length=4, max_depth=3, max_args=3, num_train=150, num_val=40, num_test=40
    )
    rows = {s: {r.tobytes() for r in task.load(s).tokens} for s in ("train", "val", "test")}
    assert [len(v) for v in rows.values()] == [150, 40, 40]
    assert not (rows["train"] & rows["val"] or rows["train"] & rows["test"] or rows["val"] & rows["test"])


def test_too_few_distinct_trees_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(gen, "STALL_CHUNKS", 3)
    g = gen.Grammar(max_length=6, min_length=3, max_depth=2, max_args=2)  # only [OP a b ]: 4 * 100 trees
    with pytest.raises(RuntimeError, match="no new sequence"):
        gen.generate(g, seed=0, total=500, n_trees=4096)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"min_length": 2000}, "min_length < max_length"),
        ({"max_args": 1}, "max_args"),
        ({"max_depth": 2, "max_args": 3, "min_length": 20}, "at most 5 tokens"),
        ({"num_val": -1}, "num_val"),
    ],
)
def test_bad_settings_are_refused(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ListOps(tmp_path, **kwargs)


# --------------------------------------------------------------------------------------------------------------------
# Same distribution as LRA's algorithm


DIST = gen.Grammar(max_length=40, min_length=8, max_depth=5, max_args=4)
N_DIST = 3000


@pytest.fixture(scope="module")
def reference_stats():
    return row_stats(lra_reference_sample(DIST, N_DIST, seed=1234))


def test_distribution_matches_lra_transcription(reference_stats):
    tokens, _ = gen.generate(DIST, seed=0, total=N_DIST)
    ours = row_stats(lra_strings(tokens))
    length_bins = np.array([9, 11, 13, 15, 18, 21, 25, 30, 40])
    for name, a, b, bins in [
        ("length", ours[0], reference_stats[0], length_bins),
        ("label", ours[1], reference_stats[1], np.arange(11) - 0.5),
        ("depth", ours[2], reference_stats[2], np.arange(2, 7) - 0.5),
    ]:
        stat, dof = chi2(a, b, bins)
        # 3 * dof + 12 is at or above chi-square's p = 1e-4 critical value for 3 to 9 dof: a loose bound
        assert stat < 3 * dof + 12, f"{name}: chi2 {stat:.1f} with {dof} dof"
    assert abs(ours[0].mean() - reference_stats[0].mean()) < 5 * np.sqrt(
        ours[0].var() / N_DIST + reference_stats[0].var() / N_DIST
    )


def test_distribution_check_detects_a_wrong_grammar(reference_stats):
    wrong = row_stats(lra_reference_sample(DIST, N_DIST, seed=99, value_p=0.32))
    stat, dof = chi2(wrong[0], reference_stats[0], np.array([9, 11, 13, 15, 18, 21, 25, 30, 40]))
    assert stat > 3 * dof + 12


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
    assert (gen.evaluate(val.tokens) == val.labels).all()
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
    assert (gen.evaluate(train.tokens) == train.labels).all()
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
