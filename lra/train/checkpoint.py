"""Checkpoints: the full training state, written atomically so that a killed run always finds a whole file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from lra.core.atomic import atomic_path

LAST = "last.pt"
BEST = "best.pt"


def save_checkpoint(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # a torn file cannot happen through save_checkpoint, but a copied one can
        raise ValueError(f"checkpoint {path} cannot be read ({e}); it may be truncated") from None


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore RNG states; they must be CPU byte tensors whatever map_location the checkpoint was loaded with."""
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
