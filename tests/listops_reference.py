"""Independent references for the ListOps tests, written here rather than taken from tasks/: a recursive evaluator of
LRA's parenthesised strings (LRA's own "unsaturated function" reading), a plain transcription of LRA's recursive
generator with Python's `random`, and the statistics that compare two samples of strings."""

from __future__ import annotations

import random
import statistics

import numpy as np

from tasks import _listops_gen as gen
from tasks._listops_tokens import TOKEN_STRINGS, lra_bytes

SMALL = gen.Grammar(max_length=60, min_length=10, max_depth=5, max_args=5)
TOKEN_ID = {s: i for i, s in enumerate(TOKEN_STRINGS)}


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
    return lra_bytes(tokens, [b"\n"], np.zeros(len(tokens), dtype=np.int64)).decode().split("\n")[:-1]
