"""Stable short hashes of settings: the same mapping (in any key order) always gives the same hex digest."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def stable_hash(obj: Any, length: int = 12) -> str:
    """The first `length` hex digits of the SHA-256 of `obj` as key-sorted JSON (non-JSON values by str())."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]
