"""Integer helpers."""

from __future__ import annotations


def ceil_div(a: int, b: int) -> int:
    """The smallest integer >= a / b (for positive b)."""
    return -(-a // b)
