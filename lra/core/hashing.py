"""Stable short hashes of settings: the same mapping (in any key order) always gives the same hex digest."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stable_hash(obj: Any, length: int = 12) -> str:
    """The first `length` hex digits of the SHA-256 of `obj` as key-sorted JSON (non-JSON values by str())."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def flat_settings(obj: Any, prefix: str = "") -> dict[str, str]:
    """A nested mapping as {'train.lr': '0.001', ...}: each leaf as JSON, so values of any type compare exactly."""
    if not isinstance(obj, dict):
        return {prefix: json.dumps(obj, default=str)}
    out: dict[str, str] = {}
    for k, v in obj.items():
        out.update(flat_settings(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
