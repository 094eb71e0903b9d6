"""Checkpoints: the full training state, written atomically so that a killed run always finds a whole file."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch

from lra.core.atomic import atomic_open
from lra.core.errors import RunSetupError

LAST = "last.pt"
BEST = "best.pt"


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Serialise in memory first, then write atomically: a full disk surfaces as OSError(ENOSPC) from the write
    (torch.save into a file reports it as an opaque RuntimeError) and leaves the previous file in place."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with atomic_open(path, "wb") as f:
        f.write(buffer.getbuffer())


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A checkpoint written by `save_checkpoint`; a missing or unreadable file is a RunSetupError naming it."""
    path = Path(path)
    if not path.is_file():
        raise RunSetupError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # a torn file cannot happen through save_checkpoint, but a copied one can
        raise RunSetupError(f"checkpoint {path} cannot be read ({e}); it may be truncated") from None
