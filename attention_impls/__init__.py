"""Attention backends behind one interface (`attention_impls.base`), found by name in
`attention_impls.registry.BACKENDS`.

Every module in this package that registers a class is picked up automatically; see `naive.py` for the shape of one.
"""

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.registry import BACKENDS, build_attention, register_backend, why_cannot_run

__all__ = ["BACKENDS", "AttentionBackend", "Capabilities", "build_attention", "register_backend", "why_cannot_run"]
