"""The forward figures of Golden et al. (2024) as sweeps of the forward study, for emulations and real kernels side by
side:

- `formats` (their Figs. 3 and 4): at one length, every format from fp64 down to bf16; Fig. 3 is each
  implementation against naive at the same format (max |out - naive|), Fig. 4 each against the fp64 golden value
  (their "about 10x" is flash over baseline there, at bf16).
- `length` (Fig. 5): bf16, a sweep of sequence lengths at fixed tiles.
- `tiles` (Fig. 6): bf16 at one length, a sweep of tile areas, and the same areas with the block dimensions swapped.
- `knobs` (what drives it): the all-bf16 FA1 emulation with one intermediate at a time raised to fp32, and the
  fp32-state FA2 emulation with one at a time lowered to bf16.

Each figure is one ForwardSpec; its result is the study's rows plus one series per implementation (x: format,
length, tile shape or knob change; y: max |out - golden| as the mean over draws of the per-draw max, and its ratio to
naive's at the same x).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attention_impls.registry import BACKENDS, why_cannot_run
from lra.core.dtypes import DTYPES
from lra.core.errors import ConfigError
from lra.numerics.backend import EMULATED, PREFIX, implementation
from lra.numerics.emulation import DEFAULT_SRAM, KNOBS, PRESETS, tiles_from_sram
from lra.numerics.forward import ForwardSpec, forward_study, has_tile_options
from lra.numerics.inputs import Tiles

FIGURES = {
    "formats": "Figs. 3 and 4: deviation at each format (vs naive at that format; vs the fp64 golden)",
    "length": "Fig. 5: deviation against sequence length at fixed tiles (bf16)",
    "tiles": "Fig. 6: deviation against tile area, and with the block dimensions swapped (bf16)",
    "knobs": "What drives it: one intermediate's precision changed at a time (bf16)",
}
EMULATIONS = [PREFIX + name for name in PRESETS]
BASE_FA1, BASE_FA2 = PREFIX + "fa1-all", PREFIX + "fa2-fp32-state"
DEFAULT_TILE_SWEEP = ["16x16", "32x32", "64x64", "128x128", "256x256", "16x64", "64x16", "32x128", "128x32"]


@dataclass
class FigureSizes:
    """The shapes the figures run at: `seq` for formats, tiles and knobs, `seqs` for the length sweep, `tiles` for
    the tile sweep, `fixed_tiles` (default: FlashAttention-1's for DEFAULT_SRAM) for the tiled ones elsewhere."""

    seq: int = 1024
    seqs: list[int] = field(default_factory=lambda: [256, 512, 1024, 2048, 4096])
    tiles: list[Tiles] = field(default_factory=lambda: [(16, 16), (32, 32), (64, 64), (128, 128)])
    fixed_tiles: Tiles = None
    heads: int = 8
    head_dim: int = 64
    batch: int = 1
    draws: int = 3
    inputs: str = "normal"
    device: str = "cpu"
    seed: int = 0
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # checked here, not figure by figure: a bad length found by a later figure would come after the earlier
        # figures' records were stored
        if self.seq < 1 or not self.seqs or min(self.seqs) < 1:
            raise ConfigError(f"sequence lengths must be positive integers, got {self.seq} and {self.seqs}")

    def fixed(self) -> tuple[int, int]:
        return self.fixed_tiles or tiles_from_sram(DEFAULT_SRAM, self.head_dim)


def runnable_backends(device: str, head_dim: int) -> list[str]:
    """Every dense exact backend that runs here (by capabilities; Triton kernels only on a GPU, since the CPU
    interpreter is too slow at these lengths), naive first; the emulation backend is studied through its presets."""
    names = []
    for name, cls in BACKENDS.items():
        caps = cls.capabilities
        if name == EMULATED or not caps.exact or (caps.triton and device == "cpu"):
            continue
        if why_cannot_run(name, device, None, head_dim) is None:
            names.append(name)
    return sorted(names, key=lambda n: n != "naive")


def knob_variants() -> list[str]:
    """The knobs figure's implementations: each base emulation, then one knob changed at a time."""
    up = [f"{BASE_FA1}+{k}=acc" for k in KNOBS if k != "inputs"]
    down = [f"{BASE_FA2}+{k}=in" for k in KNOBS if k not in ("inputs", "p")]
    return [BASE_FA1, *up, BASE_FA2, *down]


def figure_spec(figure: str, impls: list[str], sizes: FigureSizes) -> ForwardSpec:
    """The forward sweep behind `figure` over `impls` (naive is added: it is every figure's baseline)."""
    if figure not in FIGURES:
        raise ConfigError(f"unknown figure {figure!r}; choose from {', '.join(FIGURES)}")
    if figure == "knobs":
        impls = knob_variants()
    elif figure == "tiles":
        impls = [i for i in impls if has_tile_options(implementation(i)[0])]
    impls = ["naive", *[i for i in impls if i != "naive"]]
    common = {
        "backends": impls,
        "head_dim": sizes.head_dim,
        "heads": sizes.heads,
        "batch": sizes.batch,
        "draws": sizes.draws,
        "inputs": sizes.inputs,
        "device": sizes.device,
        "seed": sizes.seed,
        "options": {k: v for k, v in sizes.options.items() if k in impls},
    }
    if figure == "formats":
        return ForwardSpec(dtypes=list(DTYPES), seqs=[sizes.seq], tiles=[sizes.fixed()], **common)
    if figure == "length":
        return ForwardSpec(dtypes=["bf16"], seqs=list(sizes.seqs), tiles=[sizes.fixed()], **common)
    if figure == "tiles":
        return ForwardSpec(dtypes=["bf16"], seqs=[sizes.seq], tiles=list(sizes.tiles), **common)
    return ForwardSpec(dtypes=["bf16"], seqs=[sizes.seq], tiles=[sizes.fixed()], **common)


def _x(figure: str, row: dict[str, Any]) -> Any:
    if figure == "formats":
        return row["dtype"]
    if figure == "length":
        return row["seq"]
    if figure == "tiles":
        return row["tiles_used"] or row["tiles"]
    return row["backend"]


def series(figure: str, rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per implementation, the figure's points in sweep order: x, max (mean over draws of the per-draw max), its
    std over draws, max |out - naive| at the same format (peer), and the ratio to naive's max."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["status"] != "ok":
            continue
        point = {
            "x": _x(figure, r),
            "max": r["max_mean"],
            "std": r["max_std"],
            "peer": r.get("peer_max_mean"),
            "ratio": r.get("ratio_vs_naive"),
        }
        if figure == "tiles" and point["x"] != "-":  # naive has no tiles: the plot's reference line
            br, bc = (int(t) for t in point["x"].split("x"))
            point.update(br=br, bc=bc, area=br * bc)
        out.setdefault(r["backend"], []).append(point)
    return out


def describe(label: str, head_dim: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What an implementation is, for records and tables: an emulation's form and precisions, or a backend's kind."""
    name, opts = implementation(label)
    if name != EMULATED:
        kind = "baseline" if name == "naive" else "kernel"
        return {"kind": kind, "backend": name, "about": BACKENDS.get(name).capabilities.notes}
    opts = {**opts, **(options or {})}
    attn = BACKENDS.get(EMULATED)(heads=1, head_dim=head_dim, seq_len=1, **opts)
    preset = PRESETS[opts["preset"]]
    return {"kind": "emulation", "backend": EMULATED, "about": preset.about, **attn.emulation.describe()}


def run_figure(figure: str, impls: list[str], sizes: FigureSizes) -> dict[str, Any]:
    """Run one figure: its spec, rows, series and what each implementation is."""
    spec = figure_spec(figure, impls, sizes)
    rows = forward_study(spec)
    return {
        "figure": figure,
        "title": FIGURES[figure],
        "spec": spec,
        "rows": rows,
        "series": series(figure, rows),
        "implementations": {i: describe(i, spec.head_dim, spec.options.get(i)) for i in spec.backends},
    }
