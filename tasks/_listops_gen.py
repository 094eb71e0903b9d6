"""ListOps by LRA's grammar, vectorised with numpy: the generator of labelled token rows (for tasks.listops).

The grammar is LRA's `lra_benchmarks/data/listops.py`. A node at depth `d` (the root has depth 1) is, when
`d < max_depth`, an operator with probability VALUE_P = 0.25 and otherwise a digit 0-9 (uniform); at `d == max_depth`
it is always a digit. An operator is one of MIN, MAX, MED, SM (uniform; LRA leaves FIRST/LAST out) with
randint(2, max_args) children drawn the same way. A tree's length counts its tokens without parentheses: one per
digit, two per operator (the operator and its closing `]`). A tree is kept when min_length < length < max_length.

LRA draws one tree at a time in recursive Python. Here a chunk of trees grows level by level as arrays, and a tree is
abandoned as soon as its length is sure to reach max_length (its tokens so far plus one per node of the next level).
Accepted trees are therefore drawn from exactly LRA's distribution (every node's choices are independent draws with
the same laws); only rejected trees are cut short. Digits and operators are drawn only for accepted trees, and the
token array is written directly from subtree sizes, with no nested tuples or strings.

Determinism: chunk `c` of seed `s` draws TREES_PER_CHUNK trees from its own stream SeedSequence([version, s, c]);
chunks are merged in chunk order and deduplicated in order, so the result does not depend on the number of workers.

Token ids, evaluation and LRA's strings are tasks._listops_tokens.
"""

from __future__ import annotations

import hashlib
import math
import time
import warnings
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from lra.core.pools import run_jobs
from tasks._listops_tokens import DIGIT0, END, OP0, OP_NAMES, reduce_levels

VALUE_P = 0.25

GENERATOR_VERSION = 1  # bump when the drawn data changes for the same settings (it is part of the cache key)
TREES_PER_CHUNK = 8192
POOL_AFTER_S = 3.0  # estimated serial seconds above which chunks go to worker processes
STALL_CHUNKS = 64  # consecutive chunks without a new sequence before generation gives up
MAX_ROUND = 1024  # most chunks handed to the worker processes at once


@dataclass(frozen=True)
class Grammar:
    """LRA's generator settings: exclusive length bounds, depth limit (root = depth 1), most children per operator."""

    max_length: int = 2000
    min_length: int = 500
    max_depth: int = 10
    max_args: int = 10

    def check(self) -> None:
        """Raise ValueError when no tree can satisfy the settings."""
        if self.max_depth < 1:
            raise ValueError(f"listops max_depth must be >= 1, got {self.max_depth}")
        if self.max_args < 2:
            raise ValueError(f"listops max_args must be >= 2 (LRA draws randint(2, max_args)), got {self.max_args}")
        if self.min_length < 0 or self.max_length <= self.min_length + 1:
            raise ValueError(
                f"listops needs 0 <= min_length < max_length - 1 (lengths are strictly between them), "
                f"got min_length={self.min_length}, max_length={self.max_length}"
            )
        longest = 1
        for _ in range(self.max_depth - 1):
            longest = 2 + self.max_args * longest
        if longest <= self.min_length:
            raise ValueError(
                f"listops trees of max_depth={self.max_depth}, max_args={self.max_args} have at most {longest} "
                f"tokens, so none is longer than min_length={self.min_length}: lower min_length or raise the others"
            )


@dataclass
class Chunk:
    """The accepted trees of one chunk, in draw order: tokens (n, max_length) uint8, labels, and a digest per row."""

    tokens: np.ndarray
    labels: np.ndarray
    digests: list[bytes]


def _grow(rng: np.random.Generator, n_trees: int, g: Grammar) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Draw the shapes of n_trees trees level by level; return per level (tree id, children) and the accepted mask.

    Children 0 means a digit. A tree that is sure to reach max_length stops growing (its children are zeroed).
    """
    tree = np.arange(n_trees, dtype=np.int64)
    length = np.zeros(n_trees, dtype=np.int64)
    alive = np.ones(n_trees, dtype=bool)
    levels: list[tuple[np.ndarray, np.ndarray]] = []
    for depth in range(1, g.max_depth + 1):
        if tree.size == 0:
            break
        kids = np.zeros(tree.size, dtype=np.int64)
        if depth < g.max_depth:
            internal = rng.random(tree.size) <= VALUE_P  # LRA: r > VALUE_P is a digit
            kids[internal] = rng.integers(2, g.max_args + 1, size=int(internal.sum()))
        length += np.bincount(tree, weights=1 + (kids > 0), minlength=n_trees).astype(np.int64)
        upcoming = np.bincount(tree, weights=kids, minlength=n_trees).astype(np.int64)
        alive &= length + upcoming < g.max_length
        kids[~alive[tree]] = 0
        levels.append((tree, kids))
        tree = np.repeat(tree, kids)
    accepted = alive & (length > g.min_length) & (length < g.max_length)
    return levels, accepted


def _write_tokens(
    rng: np.random.Generator, levels: list[tuple[np.ndarray, np.ndarray]], accepted: np.ndarray, max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Draw digits and operators for the accepted trees and lay them out in prefix order.

    Returns tokens (n, max_length) and labels of the accepted trees.
    """
    new_id = np.cumsum(accepted) - 1
    n = int(accepted.sum())
    lv: list[tuple[np.ndarray, np.ndarray]] = []
    for tree, kids in levels:
        keep = accepted[tree]
        if keep.any():
            lv.append((new_id[tree[keep]], kids[keep]))
    # Subtree sizes bottom-up; parents[d][i] is the index (within level d-1) of node i's parent.
    sizes: list[np.ndarray] = [np.empty(0, np.int64)] * len(lv)
    parents: list[np.ndarray] = [np.empty(0, np.int64)] * len(lv)
    for d in reversed(range(len(lv))):
        kids = lv[d][1]
        size = 1 + (kids > 0).astype(np.int64)
        if d + 1 < len(lv):
            parents[d + 1] = np.repeat(np.arange(kids.size), kids)
            size += np.bincount(parents[d + 1], weights=sizes[d + 1], minlength=kids.size).astype(np.int64)
        sizes[d] = size
    tokens = np.zeros((n, max_length), dtype=np.uint8)
    flat_tokens = tokens.reshape(-1)
    symbols: list[np.ndarray] = []
    pos = np.zeros(n, dtype=np.int64)
    for d, (tree, kids) in enumerate(lv):
        if d > 0:
            par, size, up_kids = parents[d], sizes[d], lv[d - 1][1]
            before = np.cumsum(size) - size  # sizes of all earlier nodes of this level
            first_child = np.cumsum(up_kids) - up_kids
            pos = pos[par] + 1 + before - before[first_child[par]]
        internal = kids > 0
        n_int = int(internal.sum())
        sym = np.empty(kids.size, dtype=np.uint8)
        sym[~internal] = DIGIT0 + rng.integers(0, 10, size=kids.size - n_int)
        sym[internal] = OP0 + rng.integers(0, len(OP_NAMES), size=n_int)
        at = tree * max_length + pos
        flat_tokens[at] = sym
        flat_tokens[at[internal] + sizes[d][internal] - 1] = END
        symbols.append(sym)
    labels = reduce_levels(symbols, [k for _, k in lv])
    return tokens, labels


def chunk_rng(seed: int, chunk: int) -> np.random.Generator:
    """The random stream of one chunk: a function of (generator version, seed, chunk index) only."""
    return np.random.default_rng(np.random.SeedSequence([GENERATOR_VERSION, int(seed), int(chunk)]))


def generate_chunk(g: Grammar, seed: int, chunk: int, n_trees: int = TREES_PER_CHUNK) -> Chunk:
    """Draw n_trees trees for chunk `chunk` and return the accepted ones, labelled, in draw order."""
    rng = chunk_rng(seed, chunk)
    levels, accepted = _grow(rng, n_trees, g)
    tokens, labels = _write_tokens(rng, levels, accepted, g.max_length)
    digests = [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in tokens]
    return Chunk(tokens, labels.astype(np.uint8), digests)


# --------------------------------------------------------------------------------------------------------------------
# Many chunks, in parallel, merged in order


class _Merger:
    """Takes chunks in chunk order and keeps the first `total` distinct sequences; `take` says when it has them."""

    def __init__(self, g: Grammar, total: int, n_trees: int, on_progress: Callable[[int], None] | None) -> None:
        self.g, self.total, self.n_trees, self.on_progress = g, total, n_trees, on_progress
        self.tokens = np.zeros((total, g.max_length), dtype=np.uint8)
        self.labels = np.zeros(total, dtype=np.uint8)
        self.seen: set[bytes] = set()
        self.filled = 0
        self.stalled = 0  # consecutive chunks without a new sequence
        self.chunks = 0

    def take(self, chunk: Chunk) -> bool:
        """Merge the next chunk; True once `total` sequences are in."""
        before = self.filled
        for i, digest in enumerate(chunk.digests):
            if self.filled == self.total:
                break
            if digest not in self.seen:
                self.seen.add(digest)
                self.tokens[self.filled] = chunk.tokens[i]
                self.labels[self.filled] = chunk.labels[i]
                self.filled += 1
        self.chunks += 1
        if self.on_progress is not None:
            self.on_progress(self.filled - before)
        self.stalled = self.stalled + 1 if self.filled == before else 0
        if self.filled < self.total and self.stalled >= STALL_CHUNKS:
            raise RuntimeError(
                f"listops generation found no new sequence in {STALL_CHUNKS * self.n_trees} trees after {self.filled} "
                f"of {self.total}: with {self.g} accepted trees are too rare or too few distinct ones exist; widen "
                f"the length bounds or raise max_depth/max_args"
            )
        return self.filled == self.total

    def chunks_to_go(self) -> int:
        """How many more chunks should fill the rest, from the rate so far (with a margin for duplicates)."""
        rate = max(self.filled / max(self.chunks, 1), 0.5)
        return math.ceil((self.total - self.filled) / rate * 1.1) + 1


class _Enough(Exception):
    """Raised from a pool's result callback to stop the chunks still queued: the merger is full."""


def _pooled(g: Grammar, seed: int, n_trees: int, workers: int, merger: _Merger) -> None:
    """Draw chunks merger.chunks, merger.chunks + 1, ... in `workers` spawned processes (lra.core.pools.run_jobs,
    results taken in chunk order) in rounds sized from the acceptance rate, until the merger is full."""

    def take(_: int, chunk: Chunk) -> None:
        if merger.take(chunk):
            raise _Enough

    while merger.filled < merger.total:
        first = merger.chunks
        jobs = [(g, seed, c, n_trees) for c in range(first, first + min(merger.chunks_to_go(), MAX_ROUND))]
        try:
            run_jobs(generate_chunk, jobs, workers, take, ordered=True)
        except _Enough:
            return


def _draw(g: Grammar, seed: int, n_trees: int, workers: int, merger: _Merger) -> None:
    """Fill the merger from chunks 0, 1, 2, ... Chunk 0 is drawn here and timed; when the rest would take more than
    POOL_AFTER_S seconds, they come from `workers` processes (starting those costs about a second)."""
    start = time.perf_counter()
    if merger.take(generate_chunk(g, seed, 0, n_trees)):
        return
    elapsed = time.perf_counter() - start
    if workers > 1 and (merger.chunks_to_go() - 1) * elapsed > POOL_AFTER_S:
        try:
            _pooled(g, seed, n_trees, workers, merger)
        except BrokenProcessPool:
            warnings.warn(
                "listops worker processes failed to start (a script that generates data needs the "
                "`if __name__ == '__main__':` guard); continuing in this process",
                stacklevel=3,
            )
    while merger.filled < merger.total and not merger.take(generate_chunk(g, seed, merger.chunks, n_trees)):
        pass


def generate(
    g: Grammar,
    seed: int,
    total: int,
    workers: int = 1,
    on_progress: Callable[[int], None] | None = None,
    n_trees: int = TREES_PER_CHUNK,
) -> tuple[np.ndarray, np.ndarray]:
    """`total` distinct accepted sequences (tokens (total, max_length) uint8, labels uint8), in deterministic order.

    The result depends on (g, seed, total, n_trees) only, not on `workers`: chunks are merged in chunk order and the
    first `total` distinct sequences kept. `on_progress(k)` is called with the number of new sequences after each chunk.
    """
    g.check()
    merger = _Merger(g, total, n_trees, on_progress)
    if total > 0:
        _draw(g, seed, n_trees, workers, merger)
    return merger.tokens, merger.labels
