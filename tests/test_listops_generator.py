"""ListOps's generator (tasks._listops_gen): labels against an independent evaluator, the grammar's bounds,
determinism whatever the worker count, in-order deduplication, refusals, and the same distribution as a plain
transcription of LRA's algorithm (tests/listops_reference.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from tasks import _listops_gen as gen
from tasks._listops_tokens import VOCAB_SIZE
from tasks.listops import ListOps
from tests.listops_reference import SMALL, chi2, lra_parse, lra_reference_sample, lra_strings, lra_value, row_stats

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
    assert set(np.unique(tokens).tolist()) <= set(range(VOCAB_SIZE))
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
