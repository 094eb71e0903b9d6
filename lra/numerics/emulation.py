"""Emulated FlashAttention: the FA1 and FA2 algorithms (and baseline attention) in plain PyTorch, with the precision
of every intermediate chosen on its own, to show where rounding makes a FlashAttention deviate.

Golden et al. (2024) did not time a production kernel: they re-implemented FlashAttention-1 (Dao et al. 2022,
Algorithm 1: the output renormalised with rescaling factors at every key tile; tiles Bc = ceil(M / 4d),
Br = min(Bc, d) for an SRAM of M elements) so that they could vary the precision inside it. Real kernels (ours,
FlashAttention-2/3, cuDNN) use the FA2 form (an unnormalised accumulator divided once at the end) and keep the running
max, sum and accumulator in fp32. This module runs all three forms:

- `fa1`: per key tile j, m~ = rowmax(S_j), P~ = exp(S_j - m~), l~ = rowsum(P~), m' = max(m, m~),
  l' = e^(m - m') l + e^(m~ - m') l~, O = (l e^(m - m') O + e^(m~ - m') P~ V_j) / l'.
- `fa2`: m' = max(m, rowmax(S_j)), P~ = exp(S_j - m'), l = e^(m - m') l + rowsum(P~),
  O~ = e^(m - m') O~ + P~ V_j; at the end O = O~ / l.
- `baseline`: S = QK^T scale, softmax (max, exp, sum, divide) over all keys, O = P V.

Rounding model: an intermediate at precision X is evaluated in X's arithmetic (fp64 for fp64, fp32 for fp32, fp16
and bf16: GPUs evaluate half formats in fp32 units and tensor cores accumulate in fp32) from its operands as stored,
then rounded to X once. The knobs (`Precision`):

- `inputs`: Q, K, V;  `s`: S = Q K^T * scale;  `m`: the row maxima (running and per tile);
- `l`: the row sums;  `p`: P = exp(S - m) as it enters P V (the row sum reads P before that rounding when `l` is
  wider, as a fused kernel sums the values in its registers);  `o`: the output accumulator (and the output);
- `rescale`: the factors e^(m - m') (and FA1's e^(m~ - m') and l e^(m - m')).

A knob's value is a dtype name, "in" (the input's dtype) or "acc" (fp32, fp64 for fp64 inputs: where kernels
accumulate). The output is returned in the input's dtype. The emulation runs under autograd (its backward is
autograd through these ops, rounding gradients wherever the forward rounds), so it also trains.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F

from lra.core.dtypes import DTYPES
from lra.core.errors import ConfigError
from lra.core.numbers import ceil_div

IN = "in"
ACC = "acc"
KNOB_VALUES = (IN, ACC, *DTYPES)
FORMS = ("fa1", "fa2", "baseline")
ROUNDINGS = ("nearest", "toward_zero")
HALF_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16}
DEFAULT_SRAM = 16384  # elements: Bc = ceil(16384 / (4 * 64)) = 64, Br = 64 at head dim 64


@dataclass(frozen=True)
class Precision:
    """The precision of each intermediate (see the module docstring): a dtype name, 'in' or 'acc'."""

    inputs: str = IN
    s: str = IN
    m: str = IN
    l: str = IN
    p: str = IN
    o: str = IN
    rescale: str = IN

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value not in KNOB_VALUES:
                raise ConfigError(f"precision of {f.name} must be one of {', '.join(KNOB_VALUES)}, got {value!r}")

    def resolve(self, fmt: torch.dtype) -> dict[str, torch.dtype]:
        """Each knob's dtype for inputs of dtype `fmt`."""
        acc = torch.float64 if fmt == torch.float64 else torch.float32
        table = {IN: fmt, ACC: acc, **DTYPES}
        return {name: table[value] for name, value in asdict(self).items()}

    def changed(self, **knobs: str | None) -> Precision:
        """A copy with the given knobs set (None leaves a knob as it is)."""
        return replace(self, **{k: v for k, v in knobs.items() if v is not None})


KNOBS = tuple(f.name for f in fields(Precision))
_STATE = {"s": ACC, "m": ACC, "l": ACC, "o": ACC, "rescale": ACC}


@dataclass(frozen=True)
class Preset:
    """A named emulation: its form, precisions and what it stands for."""

    form: str
    precision: Precision
    about: str


PRESETS: dict[str, Preset] = {
    "fa1-all": Preset(
        "fa1",
        Precision(),
        "FA1 with every intermediate in the input format (Golden et al.'s emulation; at bf16: fa1-all-bf16)",
    ),
    "fa2-all": Preset("fa2", Precision(), "FA2 form (deferred normalisation), every intermediate in the input format"),
    "fa1-fp32-state": Preset(
        "fa1", Precision(**_STATE), "FA1 with S, m, l, O and the rescales in fp32; P in the input format for P V"
    ),
    "fa2-fp32-state": Preset(
        "fa2",
        Precision(**_STATE),
        "FA2 as real kernels run it (ours, FlashAttention-2/3, cuDNN): fp32 state, P in the input format for P V",
    ),
    "baseline-all": Preset("baseline", Precision(), "baseline attention with every intermediate in the input format"),
    "baseline-fp32-softmax": Preset(
        "baseline", Precision(m=ACC, l=ACC), "naive's arithmetic: S and P V in the input format, softmax in fp32"
    ),
}


def preset(name: str) -> Preset:
    """The preset called `name`; an unknown name fails with the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown emulation preset {name!r}; known: {', '.join(PRESETS)}") from None


def tiles_from_sram(sram: int, head_dim: int) -> tuple[int, int]:
    """FlashAttention-1's tiles for an SRAM of `sram` elements: (Br, Bc) = (min(Bc, d), ceil(M / 4d))."""
    if sram < 4 * head_dim:
        raise ConfigError(f"an SRAM of {sram} elements holds no tile at head dim {head_dim}; give >= {4 * head_dim}")
    bc = ceil_div(sram, 4 * head_dim)
    return min(bc, head_dim), bc


class _Rounding:
    """Rounds each intermediate to its knob's dtype, keeping it in that dtype's arithmetic (fp32 for half formats)."""

    def __init__(self, dtypes: dict[str, torch.dtype], toward_zero: bool = False) -> None:
        self.dtypes = dtypes
        self.toward_zero = toward_zero

    def compute(self, knob: str) -> torch.dtype:
        return torch.float64 if self.dtypes[knob] == torch.float64 else torch.float32

    def __call__(self, knob: str, x: torch.Tensor) -> torch.Tensor:
        return round_to(x, self.dtypes[knob], self.toward_zero)

    def sum_operand(self, e: torch.Tensor) -> torch.Tensor:
        """P as the row sum reads it: at P's precision, or unrounded (in l's arithmetic) when l is wider."""
        dp, dl = self.dtypes["p"], self.dtypes["l"]
        wider = dl if torch.finfo(dl).eps < torch.finfo(dp).eps else dp
        return round_to(e, wider, self.toward_zero)


def round_to(x: torch.Tensor, dtype: torch.dtype, toward_zero: bool = False) -> torch.Tensor:
    """`x` rounded to `dtype` (to nearest, or toward zero for fp16/bf16), held in the dtype's arithmetic (fp64 for
    fp64, fp32 otherwise). Rounding toward zero passes gradients straight through."""
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    if not toward_zero or dtype not in HALF_BITS:
        return x.to(dtype).to(compute)
    xc = x.to(compute)
    with torch.no_grad():
        r = xc.to(dtype)
        away = r.to(compute).abs() > xc.abs()  # rounded away from zero: step one unit back (sign-magnitude bits)
        r = torch.where(away, (r.view(HALF_BITS[dtype]) - 1).view(dtype), r).to(compute)
    return xc + (r - xc).detach()


def _nonzero(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x, torch.ones_like(x))


def _finite(m: torch.Tensor) -> torch.Tensor:
    """Row maxima with -inf (no key yet) replaced by 0, so exp(S - m) stays 0 instead of NaN."""
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)


def _shift(m: torch.Tensor) -> torch.Tensor:
    """The running max before each tile: -inf, then the running max after each earlier tile (tiles on dim 3)."""
    return torch.cat([torch.full_like(m[:, :, :, :1], float("-inf")), m[:, :, :, :-1]], dim=3)


def _fa2_scan(r: _Rounding, groups, trace):
    """FA2 over the key tiles of `groups` (each (S, V) with tiles on dim 3): everything but the sums vectorised."""
    cp, cl, co, cr = (r.compute(k) for k in ("p", "l", "o", "rescale"))
    m_new = torch.cummax(torch.cat([r("m", s.amax(-1)) for s, _ in groups], dim=3), dim=3).values
    m_safe = _finite(m_new)
    alpha = r("rescale", torch.exp(_shift(m_new).to(cr) - m_safe.to(cr)))
    sums, pvs, start = [], [], 0
    for s, v in groups:
        e = torch.exp(s.to(cp) - m_safe[:, :, :, start : start + s.shape[3], :, None].to(cp))
        p = r("p", e)
        sums.append(r("l", r.sum_operand(e).to(cl).sum(-1)))
        pvs.append(r("o", p.to(co) @ v.to(co)))
        start += s.shape[3]
    rowsum, pv = torch.cat(sums, dim=3), torch.cat(pvs, dim=3)
    l = torch.zeros_like(rowsum[:, :, :, 0])
    o = torch.zeros_like(pv[:, :, :, 0])
    for j in range(rowsum.shape[3]):
        l = r("l", r("l", l * alpha[:, :, :, j].to(cl)) + rowsum[:, :, :, j])
        o = r("o", r("o", o * alpha[:, :, :, j, :, None].to(co)) + pv[:, :, :, j])
    if trace is not None:
        trace.update(s=groups[-1][0][:, :, :, -1], m=m_new[:, :, :, -1], l=l, p=p[:, :, :, -1], o=o)
        trace["rescale"] = alpha[:, :, :, -1]
    return r("o", o / _nonzero(l)[..., None].to(co)), l


def _fa1_scan(r: _Rounding, groups, trace):
    """FA1 over the key tiles of `groups`: tile maxima, sums and P V vectorised, the renormalisation tile by tile."""
    cp, cl, co, cr = (r.compute(k) for k in ("p", "l", "o", "rescale"))
    m_tiles, sums, pvs = [], [], []
    for s, v in groups:
        m_tile = r("m", s.amax(-1))
        e = torch.exp(s.to(cp) - _finite(m_tile)[..., None].to(cp))
        p = r("p", e)
        m_tiles.append(m_tile)
        sums.append(r("l", r.sum_operand(e).to(cl).sum(-1)))
        pvs.append(r("o", p.to(co) @ v.to(co)))
    m_tile, l_tile, pv = (torch.cat(x, dim=3) for x in (m_tiles, sums, pvs))
    m_new = torch.cummax(m_tile, dim=3).values
    m_safe = _finite(m_new).to(cr)
    alpha = r("rescale", torch.exp(_shift(m_new).to(cr) - m_safe))
    beta = r("rescale", torch.exp(m_tile.to(cr) - m_safe))
    l = torch.zeros_like(l_tile[:, :, :, 0])
    o = torch.zeros_like(pv[:, :, :, 0])
    for j in range(l_tile.shape[3]):
        a, b = alpha[:, :, :, j], beta[:, :, :, j]
        l_new = r("l", r("l", a.to(cl) * l) + r("l", b.to(cl) * l_tile[:, :, :, j]))
        keep = r("rescale", l.to(cr) * a)
        num = r("o", r("o", keep[..., None].to(co) * o) + r("o", b[..., None].to(co) * pv[:, :, :, j]))
        o, l = r("o", num / _nonzero(l_new)[..., None].to(co)), l_new
    if trace is not None:
        trace.update(s=groups[-1][0][:, :, :, -1], m=m_new[:, :, :, -1], l=l, p=p[:, :, :, -1], o=o)
        trace["rescale"] = alpha[:, :, :, -1]
    return o, l


def _key_groups(k_end: int, nk: int, block_n: int) -> list[tuple[int, int, int]]:
    """(first key, tiles, width) of the key tiles below `k_end`: the full ones together, then a narrower last one
    (kept apart so every sum and product has its tile's own width)."""
    starts = range(0, k_end, block_n)
    full = sum(1 for s in starts if s + block_n <= nk)
    groups = [(0, full, block_n)] if full else []
    if full < len(starts):
        groups.append((full * block_n, 1, nk - full * block_n))
    return groups


def _tile_budget(q: torch.Tensor) -> int:
    """Elements of one score tensor per pass: under autograd everything is kept anyway (one pass)."""
    if torch.is_grad_enabled() and q.requires_grad:
        return 2**62
    return 2**28 if q.device.type == "cuda" else 2**25


def _tiled(r: _Rounding, q, k, v, kv_len, scale, block_m, block_n, form, trace) -> torch.Tensor:
    """FA1 or FA2 over key tiles of `block_n`; query tiles of `block_m` are evaluated side by side, in passes of a
    bounded size (rows are independent, so neither changes any rounding; each product has a kernel tile's shape)."""
    b, h, nq, d = q.shape
    nk, dv = k.shape[2], v.shape[-1]
    tiles = ceil_div(nq, block_m)
    qt = F.pad(q, (0, 0, 0, tiles * block_m - nq)).view(b, h, tiles, 1, block_m, d).to(r.compute("s"))
    k_end = min(nk, int(kv_len.max().item())) if b else 0
    groups = []
    for first, count, width in _key_groups(k_end, nk, block_n):
        stop = first + count * width
        kt = k[:, :, first:stop].to(r.compute("s")).reshape(b, h, 1, count, width, d).transpose(-1, -2)
        allowed = (torch.arange(first, stop, device=q.device)[None, :] < kv_len[:, None]).view(b, 1, 1, count, 1, width)
        groups.append((kt, v[:, :, first:stop].reshape(b, h, 1, count, width, dv), ~allowed))
    per_tile = max(1, b * h * block_m * k_end)
    step = max(1, _tile_budget(q) // per_tile)
    parts = []
    for t0 in range(0, tiles, step):
        rows = [(r("s", (qt[:, :, t0 : t0 + step] @ kt) * scale).masked_fill(masked, float("-inf")), vt)
                for kt, vt, masked in groups]  # fmt: skip
        if not rows:
            parts.append(torch.zeros((b, h, min(step, tiles - t0), block_m, dv), dtype=r.compute("o"), device=q.device))
            continue
        o, l = (_fa1_scan if form == "fa1" else _fa2_scan)(r, rows, trace)
        parts.append(torch.where((l > 0)[..., None], o, torch.zeros_like(o)))
    return torch.cat(parts, dim=2).reshape(b, h, tiles * block_m, dv)[:, :, :nq]


def _baseline(r: _Rounding, q, k, v, kv_len, scale, block_m, trace) -> torch.Tensor:
    """Baseline attention over all keys, `block_m` query rows at a time (bounded memory; rows are independent)."""
    nk = k.shape[2]
    allowed = (torch.arange(nk, device=q.device)[None, :] < kv_len[:, None])[:, None, None, :]
    kt = k.to(r.compute("s")).transpose(-1, -2)
    parts = []
    for start in range(0, q.shape[2], block_m):
        s = r("s", (q[:, :, start : start + block_m].to(r.compute("s")) @ kt) * scale)
        s = s.masked_fill(~allowed, float("-inf"))
        m = r("m", s.amax(-1))
        e = torch.exp(s.to(r.compute("p")) - _finite(m)[..., None].to(r.compute("p")))
        l = r("l", r.sum_operand(e).to(r.compute("l")).sum(-1))
        p = r("p", r.sum_operand(e).to(r.compute("p")) / _nonzero(l)[..., None].to(r.compute("p")))
        o = r("o", p.to(r.compute("o")) @ v.to(r.compute("o")))
        parts.append(torch.where((l > 0)[..., None], o, torch.zeros_like(o)))
        if trace is not None:
            trace.update(s=s, m=m, l=l, p=p, o=o)
    return torch.cat(parts, dim=2)


@dataclass(frozen=True)
class Emulation:
    """One emulated implementation: a form, its precisions, its tiles (Br query rows, Bc keys) and how it rounds to
    fp16/bf16 (to nearest even, as GPUs convert; toward zero, as Triton's CPU interpreter converts to bf16)."""

    form: str = "fa2"
    precision: Precision = Precision(**_STATE)
    block_m: int = 64
    block_n: int = 64
    rounding: str = "nearest"

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ConfigError(f"emulation form must be one of {', '.join(FORMS)}, got {self.form!r}")
        if self.rounding not in ROUNDINGS:
            raise ConfigError(f"emulation rounding must be one of {', '.join(ROUNDINGS)}, got {self.rounding!r}")
        if self.block_m < 1 or self.block_n < 1:
            raise ConfigError(f"tile sizes must be positive, got block_m={self.block_m}, block_n={self.block_n}")

    def describe(self) -> dict[str, Any]:
        tiles = {"block_m": self.block_m, "block_n": self.block_n}
        return {"form": self.form, **asdict(self.precision), **tiles, "rounding": self.rounding}


def emulated_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    emulation: Emulation,
    *,
    lengths: torch.Tensor | None = None,
    scale: float | None = None,
    trace: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Attention of q, k, v (batch, heads, seq, head_dim) by `emulation`, in the input's dtype.

    `lengths` (batch,) keeps only the first keys of each row (right padding); rows with no key are zero. `trace`,
    when given, receives the intermediates of the last tile (tests check that each knob rounds its intermediate).
    """
    fmt = q.dtype
    r = _Rounding(emulation.precision.resolve(fmt), emulation.rounding == "toward_zero")
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    nk = k.shape[2]
    full = torch.full((q.shape[0],), nk, dtype=torch.int64, device=q.device)
    kv_len = full if lengths is None else lengths.to(device=q.device, dtype=torch.int64).clamp(max=nk)
    with torch.autocast(q.device.type, enabled=False):  # the precisions are the knobs', not autocast's
        q, k, v = (r("inputs", x) for x in (q, k, v))
        if trace is not None:
            trace["inputs"] = q
        if emulation.form == "baseline":
            out = _baseline(r, q, k, v, kv_len, scale, emulation.block_m, trace)
        else:
            out = _tiled(r, q, k, v, kv_len, scale, emulation.block_m, emulation.block_n, emulation.form, trace)
    return round_to(out, fmt, r.toward_zero).to(fmt)


def build_emulation(
    preset_name: str = "fa2-fp32-state",
    *,
    head_dim: int,
    form: str | None = None,
    sram: int | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    rounding: str = "nearest",
    **knobs: str | None,
) -> Emulation:
    """An `Emulation` from a preset, with a form, precisions or tiles changed.

    Tiles: `block_m`/`block_n` where given, else FlashAttention-1's from `sram` (elements; default DEFAULT_SRAM).
    """
    base = preset(preset_name)
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise ConfigError(f"unknown precision knob(s) {', '.join(unknown)}; knobs: {', '.join(KNOBS)}")
    br, bc = tiles_from_sram(DEFAULT_SRAM if sram is None else int(sram), head_dim)
    return Emulation(
        form=form or base.form,
        precision=base.precision.changed(**knobs),
        block_m=int(block_m) if block_m is not None else br,
        block_n=int(block_n) if block_n is not None else bc,
        rounding=rounding,
    )
