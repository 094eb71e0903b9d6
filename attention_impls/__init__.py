"""Attention backends behind one interface, found by name in `attention_impls.registry.BACKENDS`.

Every module in this package that registers a class is picked up automatically; see `naive.py` for the shape of one.
"""

from attention_impls.registry import (
    BACKENDS,
    AttentionBackend,
    Capabilities,
    build_attention,
    register_backend,
    why_cannot_run,
)

__all__ = ["BACKENDS", "AttentionBackend", "Capabilities", "build_attention", "register_backend", "why_cannot_run"]
