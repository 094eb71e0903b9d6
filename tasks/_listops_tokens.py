"""ListOps token sequences: the token ids, the structure and value of token rows (vectorised with numpy), and LRA's
TSV strings, both ways (`lra_bytes` writes them, `parse_sources` reads them). The generator (tasks._listops_gen)
writes token rows and labels them with `reduce_levels`; tasks.listops reads and writes LRA's files with the rest.

Tokens (0 is padding): digits 0-9 -> 1-10, [MIN 11, [MAX 12, [MED 13, [SM 14, ] 15; TOKEN_STRINGS spells them.
MIN, MAX, MED (the floor of the median, LRA: int(np.median)) and SM (the sum mod 10) as in LRA's `listops.py`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

OP_NAMES = ("MIN", "MAX", "MED", "SM")
PAD = 0
DIGIT0 = 1
OP0 = 11
END = 15
VOCAB_SIZE = 16
TOKEN_STRINGS = ("<pad>", *(str(d) for d in range(10)), *("[" + o for o in OP_NAMES), "]")


# --------------------------------------------------------------------------------------------------------------------
# Evaluation and structure of token sequences


def reduce_levels(symbols: list[np.ndarray], kids: list[np.ndarray]) -> np.ndarray:
    """Values of the level-0 nodes of a forest given level by level (root level first).

    `symbols[d]` holds the token of each node at level d and `kids[d]` its number of arguments; the arguments of the
    operators of level d are the nodes of level d + 1, consecutive and in the order of their operators.
    """
    vals = np.zeros(0, dtype=np.int64)
    for sym, k in zip(reversed(symbols), reversed(kids)):
        sym = sym.astype(np.int64)
        v = sym - DIGIT0
        internal = k > 0
        if internal.any():
            count = k[internal]
            seg = np.cumsum(count) - count
            owner = np.repeat(np.arange(count.size), count)
            ordered = np.sort(owner * 16 + vals) & 15  # each operator's arguments sorted by value
            med = (ordered[seg + (count - 1) // 2] + ordered[seg + count // 2]) // 2
            results = np.stack(
                [np.minimum.reduceat(vals, seg), np.maximum.reduceat(vals, seg), med, np.add.reduceat(vals, seg) % 10]
            )
            v[internal] = results[sym[internal] - OP0, np.arange(count.size)]
        vals = v
    return vals


@dataclass
class Structure:
    """Parse of a flat run of token rows: per token its depth, and the rows that are not one expression."""

    depth: np.ndarray  # operators enclosing the token (a root item has 0; an END has its operator's depth)
    bad_rows: np.ndarray  # sorted indices of rows that are not one well-formed expression


def analyse(flat: np.ndarray, row: np.ndarray, n_rows: int) -> Structure:
    """Depths of rows of tokens given flat (padding removed) with their row index (non-decreasing), all at once.

    A row is well formed when it is one expression: brackets balance, every `]` closes an operator, no operator is
    directly closed (each has an argument), and exactly one item sits at depth 0.
    """
    flat = np.asarray(flat)
    row = np.asarray(row, dtype=np.int64)
    n = flat.size
    is_op = (flat >= OP0) & (flat < END)
    is_end = flat == END
    is_item = (flat != PAD) & ~is_end
    step = is_op.astype(np.int32) - is_end
    after = np.cumsum(step, dtype=np.int32)
    starts = np.searchsorted(row, np.arange(n_rows))
    row_base = np.concatenate([np.zeros(1, np.int32), after])[starts]
    depth_after = after - row_base[row]
    depth = depth_after - is_op

    bad = np.bincount(row, minlength=n_rows) == 0
    bad[row[flat > END]] = True  # not a token id
    bad[row[depth_after < 0]] = True
    last = np.concatenate([starts[1:], [n]]) - 1
    nonempty = last >= starts
    bad[np.flatnonzero(nonempty)[depth_after[last[nonempty]] != 0]] = True
    bad |= np.bincount(row[is_item & (depth == 0)], minlength=n_rows) != 1
    bad[row[:-1][is_op[:-1] & is_end[1:]]] = True
    return Structure(depth, np.flatnonzero(bad))


def _levels(flat: np.ndarray, st: Structure) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per depth, root first: flat indices of the digits and operators at that depth (in order), and their counts of
    arguments. Rows must be well formed."""
    items = np.flatnonzero((flat != PAD) & (flat != END))
    order = np.argsort(st.depth[items].astype(np.int16), kind="stable")  # radix sort: by depth, then position
    items = items[order]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(st.depth[items]))])
    index = [items[a:b] for a, b in itertools.pairwise(bounds)]
    kids: list[np.ndarray] = []
    for d, at in enumerate(index):
        k = np.zeros(at.size, dtype=np.int64)
        if d + 1 < len(index):
            is_op = flat[at] >= OP0
            ops = at[is_op]
            owner = np.searchsorted(ops, index[d + 1]) - 1  # the last operator at depth d before each argument
            k[is_op] = np.bincount(owner, minlength=ops.size)
        kids.append(k)
    return index, kids


def _flatten(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    tokens = np.asarray(tokens)
    if tokens.ndim == 1:
        tokens = tokens[None]
    mask = tokens != PAD
    return tokens[mask], np.nonzero(mask)[0], tokens.shape[0]


def _parse_rows(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, Structure]:
    flat, row, n_rows = _flatten(tokens)
    st = analyse(flat, row, n_rows)
    if st.bad_rows.size:
        raise ValueError(f"rows {st.bad_rows[:10].tolist()} are not well-formed ListOps expressions")
    return flat, row, st


def evaluate(tokens: np.ndarray) -> np.ndarray:
    """Values (0-9) of right-padded token rows (N, L), or of one row (L,): MIN, MAX, floor of median, sum mod 10."""
    flat, _, st = _parse_rows(tokens)
    index, kids = _levels(flat, st)
    return reduce_levels([flat[at] for at in index], kids)


# --------------------------------------------------------------------------------------------------------------------
# LRA's TSV strings


def lra_bytes(tokens: np.ndarray, ends: list[bytes], end_of_row: np.ndarray) -> bytes:
    """LRA's string (its `to_string`, parentheses included) of each right-padded token row, each followed by
    `ends[end_of_row[i]]`, as one blob.

    LRA nests an operator as ((((OP, a1), a2) ... ak), ']') and prints pairs as '( x y )', so an operator with k
    arguments prints as '( ' * (k + 1) + '[OP a1 ) a2 ) ... ak ) ] )'. Each token becomes one piece of text (an
    operator brings its k + 1 opening parentheses, an argument the ' )' that closes its pair); pieces are joined with
    single spaces by gathering bytes with numpy.
    """
    flat, row, st = _parse_rows(tokens)
    n_rows = 1 if np.asarray(tokens).ndim == 1 else len(tokens)
    index, kids = _levels(flat, st)
    children = np.zeros(flat.size, dtype=np.int64)
    for at, k in zip(index, kids):
        children[at] = k
    flat = flat.astype(np.int64)
    nested = (st.depth > 0).astype(np.int64)
    max_k = int(children.max(initial=0))
    table = [str(d) + (" )" if h else "") for d in range(10) for h in (0, 1)]
    table += ["] )", "] ) )"]
    table += ["( " * (k + 1) + "[" + o for o in OP_NAMES for k in range(max_k + 1)]
    code = np.where(
        flat < OP0,
        (flat - DIGIT0) * 2 + nested,
        np.where(flat == END, 20 + nested, 22 + (flat - OP0) * (max_k + 1) + children),
    )
    bounds = np.searchsorted(row, np.arange(n_rows + 1))
    later = np.ones(flat.size, dtype=np.int64)
    later[bounds[:-1]] = 0  # the first piece of a row has no space before it
    pieces = [q.encode() for t in table for q in (t, " " + t)] + list(ends)
    ids = np.empty(flat.size + n_rows, dtype=np.int64)
    ids[np.arange(flat.size) + row] = code * 2 + later
    ids[bounds[1:] + np.arange(n_rows)] = len(pieces) - len(ends) + np.asarray(end_of_row, dtype=np.int64)
    piece_len = np.array([len(q) for q in pieces], dtype=np.int64)
    piece_at = np.cumsum(piece_len) - piece_len
    lens = piece_len[ids]
    out_at = np.cumsum(lens) - lens
    text = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    return text[np.repeat(piece_at[ids] - out_at, lens) + np.arange(int(lens.sum()))].tobytes()


_GAP = np.zeros(256, dtype=bool)  # separators; parentheses count as separators since they are dropped anyway
_GAP[list(b" ()\r\n")] = True
_SINGLE = np.full(256, 255, dtype=np.uint8)  # one-character tokens; 255 = not a token
_SINGLE[list(b"0123456789")] = DIGIT0 + np.arange(10)
_SINGLE[ord("]")] = END


def parse_sources(sources: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tokenise LRA source strings like LRA's pipeline (parentheses dropped); return flat tokens, row ids, bad rows.

    Tokens are separated by spaces or parentheses. A bad row holds something other than the tokens [MIN [MAX [MED
    [SM ] and single digits, or is not one well-formed expression.
    """
    raw = np.frombuffer(b"\n".join(sources) + b"\n", dtype=np.uint8)
    solid = ~_GAP[raw]
    edge = np.diff(solid.view(np.int8), prepend=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)  # the text ends with a newline, so every token ends before it
    per_row = np.diff(np.searchsorted(starts, np.flatnonzero(raw == ord("\n"))), prepend=0)
    row = np.repeat(np.arange(len(sources)), per_row)
    length = ends - starts
    first = raw[starts]
    code = _SINGLE[first]
    code[length != 1] = 255
    br = np.flatnonzero((first == ord("[")) & ((length == 3) | (length == 4)))  # indices into starts
    at = starts[br]
    word = (raw[at + 1].astype(np.int64) << 16) | (raw[at + 2].astype(np.int64) << 8) | raw[at + 3]
    for i, name in enumerate(OP_NAMES):
        shift = 8 * (3 - len(name))  # "[SM" is one character shorter: its last byte read is the separator
        hit = (length[br] == len(name) + 1) & ((word >> shift) == int.from_bytes(name.encode(), "big"))
        code[br[hit]] = OP0 + i
    bad = np.zeros(len(sources), dtype=bool)
    bad[row[code == 255]] = True
    flat = np.where(code == 255, END, code)  # any token, so that analyse can run; the row is bad already
    st = analyse(flat, row, len(sources))
    bad[st.bad_rows] = True
    return flat, row, np.flatnonzero(bad)
