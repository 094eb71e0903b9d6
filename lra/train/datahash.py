"""A fingerprint of each prepared split, so that a run resumed on another machine trains on the same data.

A run carried across lent machines draws its data afresh on each (nothing of Path-X's 2.5 GiB comes back), so the
run directory records a hash of every split when the run starts, and `--resume` compares it with the split drawn
here: a generator that draws differently (another version, another library's rounding) is refused before a step
is taken. The hash covers the split's size and shape, every label, and the tokens of SAMPLE_ROWS rows spread evenly
over it (first and last included): about 0.3 s for Path-X's 160,000 training images, where hashing all 2.5 GiB
would cost seconds of every session. A change that touches 1% of the images at random is missed with odds below
one in 10^4. Splits drawn on demand (data.cache: false) sample ON_DEMAND_ROWS rows, since each row is drawn.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

import numpy as np

from lra.core.errors import RunSetupError
from tasks.base import Split

SAMPLE_ROWS = 1024
ON_DEMAND_ROWS = 64


def sample_rows(n: int, rows: int = SAMPLE_ROWS) -> np.ndarray:
    """`rows` row indices spread evenly over 0..n-1 (all of them when n <= rows), sorted and distinct."""
    if n <= rows:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, num=rows).round().astype(np.int64))


def split_digest(split: Split) -> str:
    """'sha256:<16 hex digits>' of `split` (see the module docstring for what it covers)."""
    n = len(split)
    rows = ON_DEMAND_ROWS if getattr(split.tokens, "on_demand", False) else SAMPLE_ROWS
    idx = sample_rows(n, rows)
    h = hashlib.sha256(json.dumps({"n": n, "shape": list(split.tokens.shape), "rows": len(idx)}).encode())
    h.update(np.ascontiguousarray(np.asarray(split.labels), dtype=np.int64).tobytes())
    if n:
        h.update(np.ascontiguousarray(split.tokens[idx], dtype=np.int32).tobytes())
    return "sha256:" + h.hexdigest()[:16]


def data_hashes(splits: Mapping[str, Split]) -> dict[str, str]:
    """{split name: split_digest} for every split."""
    return {name: split_digest(split) for name, split in splits.items()}


def check_same_data(started: Mapping[str, str], here: Mapping[str, str], *, run: str, task: str) -> None:
    """Refuse to resume `run` on data other than it started on (`started`: its recorded hashes; empty for runs
    from before hashes were recorded, which pass)."""
    for name, then in started.items():
        now = here.get(name)
        if now is not None and now != then:
            raise RunSetupError(
                f"--resume: the {name} split of {task} here differs from the one {run} was trained on (data hash "
                f"{now}, recorded {then}): the data must be drawn by the same generator with the same data settings; "
                f"see `lra data info {task}`, delete that cache and draw it again (or start a new run)"
            )
