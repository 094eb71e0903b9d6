"""Block-sparsity layouts: bool (heads or 1, query blocks, key blocks) matrices built from named patterns.

A layout says which (query block, key block) pairs attend; patterns compose by union. Patterns and their options:

- `butterfly` (`factors`: default all): Pixelated Butterfly's flat butterfly, the pattern the FlashAttention paper used:
  keep (i, j) when i XOR j is 0 or a power of two 2^f with f < factors. Density about (1 + factors) / blocks.
- `local` (`width`: 3): a band of `width` blocks per row, j in [i - (width-1)//2, i + width//2].
- `global` (`blocks`: 1): the first `blocks` block rows and block columns (every block attends to them and they to all).
- `random` (`blocks`: 1, `seed`: the backend's seed, `per_head`: false): `blocks` distinct random key blocks per query
  block row (BigBird's random blocks); `per_head` draws one layout per head.
- `strided` (`stride`: 4): every key block column j with j % stride == stride - 1 (Sparse Transformer's summary
  columns, at block granularity).
- `dense`: every block (the all-ones layout; equals dense attention).

Config form: `layout: butterfly`, `layout: [butterfly, global]`, `layout: [{local: {width: 5}}, global]` or a mapping
`{local: {width: 5}, global: {blocks: 2}}`; on a command line `local,global`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from lra.core.registry import Registry

# A pattern is a function (qb, kb, heads, **options) -> bool (heads or 1, qb, kb); its options are its keywords.
PATTERNS: Registry[Callable[..., torch.Tensor]] = Registry("layout pattern", fixed=("qb", "kb", "heads"))
pattern = PATTERNS.register


def _grid(qb: int, kb: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(qb)[:, None], torch.arange(kb)[None, :]


@pattern("butterfly")
def butterfly(qb: int, kb: int, heads: int, factors: int | None = None) -> torch.Tensor:
    """Flat butterfly: (i, j) kept when i XOR j is 0 or 2^f, f < factors (default: all powers below the size)."""
    n = max(qb, kb)
    total = max(1, (n - 1).bit_length())
    factors = total if factors is None else int(factors)
    if factors < 0:
        raise ValueError(f"butterfly factors must be >= 0, got {factors}")
    i, j = _grid(qb, kb)
    x = i ^ j
    keep = x == 0
    for f in range(factors):
        keep = keep | (x == (1 << f))
    return keep[None]


@pattern("local")
def local(qb: int, kb: int, heads: int, width: int = 3) -> torch.Tensor:
    """A band of `width` blocks around the diagonal."""
    if width < 1:
        raise ValueError(f"local width must be >= 1 block, got {width}")
    i, j = _grid(qb, kb)
    lo = i - (int(width) - 1) // 2
    return ((j >= lo) & (j < lo + int(width)))[None]


@pattern("global")
def global_(qb: int, kb: int, heads: int, blocks: int = 1) -> torch.Tensor:
    """The first `blocks` block rows and columns."""
    if blocks < 0:
        raise ValueError(f"global blocks must be >= 0, got {blocks}")
    i, j = _grid(qb, kb)
    return ((i < blocks) | (j < blocks))[None]


@pattern("random")
def random(qb: int, kb: int, heads: int, blocks: int = 1, seed: int = 0, per_head: bool = False) -> torch.Tensor:
    """`blocks` distinct random key blocks per query block row (seeded; per head when per_head)."""
    if blocks < 0:
        raise ValueError(f"random blocks must be >= 0, got {blocks}")
    g = torch.Generator().manual_seed(int(seed))
    h = heads if per_head else 1
    scores = torch.rand(h, qb, kb, generator=g)
    r = min(int(blocks), kb)
    keep = torch.zeros(h, qb, kb, dtype=torch.bool)
    if r:
        keep.scatter_(2, scores.topk(r, dim=2).indices, True)
    return keep


@pattern("strided")
def strided(qb: int, kb: int, heads: int, stride: int = 4) -> torch.Tensor:
    """Every key block column j with j % stride == stride - 1."""
    if stride < 1:
        raise ValueError(f"strided stride must be >= 1, got {stride}")
    _, j = _grid(qb, kb)
    return ((j % int(stride)) == int(stride) - 1).expand(qb, kb)[None]


@pattern("dense")
def dense(qb: int, kb: int, heads: int) -> torch.Tensor:
    """Every block."""
    return torch.ones(1, qb, kb, dtype=torch.bool)


@dataclass(frozen=True)
class LayoutSpec:
    """A parsed layout: patterns (name, options) whose union is the layout."""

    patterns: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]

    def describe(self) -> str:
        parts = []
        for name, opts in self.patterns:
            parts.append(name + (f"({', '.join(f'{k}={v}' for k, v in opts)})" if opts else ""))
        return " + ".join(parts)


def parse_layout(spec: Any) -> LayoutSpec:
    """Parse the config/CLI forms (see the module docstring) into a LayoutSpec; unknown names or options are errors."""
    if isinstance(spec, LayoutSpec):
        return spec
    if isinstance(spec, str):
        items: list[Any] = [s.strip() for s in spec.split(",") if s.strip()]
    elif isinstance(spec, dict):
        items = [{k: v} for k, v in spec.items()]
    elif isinstance(spec, (list, tuple)):
        items = list(spec)
    else:
        raise ValueError(f"layout must be a name, a list of names or {{name: options}}, got {spec!r}")
    if not items:
        raise ValueError("layout is empty; name at least one pattern: " + ", ".join(PATTERNS.names()))
    out = []
    for item in items:
        if isinstance(item, str):
            name, opts = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            name, opts = next(iter(item.items()))
            opts = dict(opts or {})
        else:
            raise ValueError(f"layout entry {item!r} must be a pattern name or {{name: {{option: value}}}}")
        PATTERNS.check_options(name, opts)  # an unknown name or option fails naming the valid ones
        out.append((name, tuple(sorted(opts.items()))))
    return LayoutSpec(tuple(out))


def build_layout(spec: Any, q_blocks: int, k_blocks: int | None = None, heads: int = 1, seed: int = 0) -> torch.Tensor:
    """The union of the spec's patterns: bool (heads or 1, q_blocks, k_blocks). `seed` is the default of every
    seeded pattern (`random`)."""
    spec = parse_layout(spec)
    k_blocks = q_blocks if k_blocks is None else k_blocks
    layout = torch.zeros(1, q_blocks, k_blocks, dtype=torch.bool)
    for name, opts in spec.patterns:
        kw = dict(opts)
        if "seed" in PATTERNS.options(name):
            kw.setdefault("seed", seed)
        layout = layout | PATTERNS.build(name, kw, qb=q_blocks, kb=k_blocks, heads=heads)
    return layout


def layout_density(layout: torch.Tensor) -> float:
    """The fraction of kept blocks (averaged over heads)."""
    return float(layout.float().mean().item()) if layout.numel() else 0.0


def layout_reach(layout: torch.Tensor, hops: int) -> float:
    """The share of (query block, key block) pairs joined by a chain of at most `hops` kept blocks: after `hops`
    attention layers over this layout, the pairs where a token's output can depend on the key block at all (the
    heads' union: a layer's output mixes its heads). Square layouts only."""
    if layout.shape[-1] != layout.shape[-2]:
        qb, kb = layout.shape[-2:]
        raise ValueError(f"reach needs a square layout (self-attention), got {qb} x {kb} blocks")
    if hops < 1:
        raise ValueError(f"hops must be >= 1 (one per attention layer), got {hops}")
    step = layout.any(0).float()
    joined = step > 0
    for _ in range(hops - 1):
        joined = joined | ((joined.float() @ step) > 0)
    return float(joined.float().mean().item()) if joined.numel() else 0.0


def layout_token_mask(layout: torch.Tensor, block: int, nq: int, nk: int) -> torch.Tensor:
    """The layout expanded to tokens: bool (heads or 1, nq, nk) (for references and the dense-masked fallback)."""
    return layout.repeat_interleave(block, dim=1).repeat_interleave(block, dim=2)[:, :nq, :nk]
