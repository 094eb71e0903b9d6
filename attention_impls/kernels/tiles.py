"""Tile sizes of the kernel family, their defaults per head dim (tuned on the H200; docs/flash_kernel.md, and
`lra bench tiles` to tune them again), and the head dims the kernels support.

The forward uses (block_m query rows) x (block_n keys). The backward's dK/dV kernel uses (bwd_block_m query rows) x
(bwd_block_n keys) and its dQ kernel the transpose, (bwd_block_n query rows) x (bwd_block_m keys), as in the Triton
tutorial: the outer tile is the large one and the loop walks small tiles. `maxnreg` and `bwd_maxnreg` cap the
registers a thread of the forward and of the backward kernels may use (Triton's launch option; 0: the compiler's
choice): fewer registers let more programs share an SM, which hides latency, at the risk of spills.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

TILE_OPTIONS = (
    "block_m",
    "block_n",
    "num_warps",
    "num_stages",
    "bwd_block_m",
    "bwd_block_n",
    "bwd_num_warps",
    "bwd_num_stages",
)
REGISTER_OPTIONS = ("maxnreg", "bwd_maxnreg")  # launch options beside the tiles; not swept by `lra bench tiles`
MAX_REGISTERS = 255  # per thread on NVIDIA GPUs


# The head dims the kernels take, the one place they are set (backends declare these, the entry point checks them).
# The kernels pad the head dim to a power of two >= 16 (BLOCK_D) and mask the rest; multiples of 8 keep 16-bit rows
# on 16-byte boundaries (full-width vector loads). Above 256 one tile's fp32 accumulators outgrow the registers.
MAX_HEAD_DIM = 256
SUPPORTED_HEAD_DIMS = tuple(range(8, MAX_HEAD_DIM + 1, 8))


@dataclass(frozen=True, kw_only=True)
class Tiles:
    """One complete tile configuration (forward and backward); fields in the order of TILE_OPTIONS."""

    block_m: int = 64
    block_n: int = 64
    num_warps: int = 4
    num_stages: int = 2
    bwd_block_m: int = 32
    bwd_block_n: int = 64
    bwd_num_warps: int = 4
    bwd_num_stages: int = 2
    maxnreg: int = 0
    bwd_maxnreg: int = 0

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "bwd_block_m", "bwd_block_n"):
            val = getattr(self, name)
            if val < 16 or val & (val - 1):
                raise ValueError(f"tile {name}={val} must be a power of two >= 16 (tl.dot needs 16 x 16 tiles)")
        for name in ("num_warps", "bwd_num_warps"):
            val = getattr(self, name)
            if val not in (1, 2, 4, 8, 16):
                raise ValueError(f"{name}={val} must be one of 1, 2, 4, 8, 16")
        for name in ("num_stages", "bwd_num_stages"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in REGISTER_OPTIONS:
            val = getattr(self, name)
            if val != 0 and not 32 <= val <= MAX_REGISTERS:
                raise ValueError(f"{name}={val} must be 0 (the compiler's choice) or 32..{MAX_REGISTERS} registers")

    def with_options(self, **options: int | None) -> Tiles:
        """These tiles with the options that are not None replaced."""
        unknown = set(options) - set(TILE_OPTIONS + REGISTER_OPTIONS)
        if unknown:
            valid = ", ".join(TILE_OPTIONS + REGISTER_OPTIONS)
            raise ValueError(f"unknown tile option(s) {sorted(unknown)}; valid: {valid}")
        return replace(self, **{k: int(v) for k, v in options.items() if v is not None})

    @classmethod
    def from_values(cls, values: Sequence[int]) -> Tiles:
        """Tiles from a list in TILE_OPTIONS + REGISTER_OPTIONS order (the tuned tables give the first eight): the
        inverse of `values` (the custom ops' form)."""
        return cls(**dict(zip(TILE_OPTIONS + REGISTER_OPTIONS, values)))

    def values(self) -> list[int]:
        """The fields as a list in TILE_OPTIONS + REGISTER_OPTIONS order (how the custom ops take them)."""
        return [getattr(self, name) for name in TILE_OPTIONS + REGISTER_OPTIONS]


# Defaults on the H200, by head dim, for 16-bit inputs: the fastest of the sweep in docs/flash_kernel.md (device call 1;
# forward and backward tuned separately at the shapes of lra/bench/tile_tuner.py's SHAPES). Head dims 8 and 16 were
# tuned again with attention dropout 0.1, as every LRA config trains (docs/flash_kernel.md, v5). fp32 tiles hold twice
# the bytes: smaller tiles keep them within shared memory and registers. The fields are in TILE_OPTIONS order.
# fmt: off
_H200: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {
    # head dim: (16-bit inputs, fp32 inputs), each block_m, block_n, num_warps, num_stages, then the backward's four
    8:   ((64,  64, 4, 3,  32, 64, 4, 3), (64, 64, 4, 2,  32, 64, 4, 2)),
    16:  ((64,  64, 4, 3,  32, 64, 4, 3), (64, 64, 4, 2,  32, 64, 4, 2)),
    32:  ((64, 128, 4, 3,  32, 64, 4, 3), (64, 64, 4, 2,  32, 64, 4, 2)),
    64:  ((128, 64, 8, 3,  64, 64, 4, 2), (64, 32, 4, 2,  32, 64, 4, 2)),
    128: ((64,  64, 4, 3,  64, 64, 4, 2), (64, 32, 4, 2,  16, 32, 4, 2)),
}
# fmt: on
_H200_16BIT: dict[int, Tiles] = {d: Tiles.from_values(half) for d, (half, _) in _H200.items()}
_H200_FP32: dict[int, Tiles] = {d: Tiles.from_values(single) for d, (_, single) in _H200.items()}
# Registers a forward thread may use under dropout, by head dim (16-bit inputs): capped, four programs share an SM
# instead of two, which hides the Philox chain's latency. Head dim 8: the forward 8-10% faster, forward+backward 2-3%,
# in two runs on an H100 (docs/flash_kernel.md, v8); head dim 16 gained ~1% and keeps the compiler's choice. The
# backward's cap made it slower and stays off; without dropout the cap is not for use.
_DROPOUT_MAXNREG: dict[int, int] = {8: 128}
# Tiles without dropout (evaluation; training at p = 0), by head dim (16-bit inputs, dense attention): head dim 8's
# table above was tuned under dropout (v5), and without it the 128 x 32 forward tiles and 128-key backward tiles it
# had before are faster: forward 1.08x, forward+backward 1.20x at 1K and 16K tokens (H200, the two in one run;
# docs/flash_kernel.md, v9). Head dim 16 gained 1-2% forward+backward there and lost 10% forward at 16K: it keeps its
# tiles. Block-sparse layouts keep one set (their kernel lists are built once per tile shape, and these were not
# measured on them).
_NO_DROPOUT: dict[int, dict[str, int]] = {8: {"block_m": 128, "block_n": 32, "bwd_block_n": 128}}
# The CPU interpreter runs each program in Python: large tiles mean few programs, which is what makes it fast.
_INTERPRETER = Tiles(
    block_m=64, block_n=64, num_warps=4, num_stages=1, bwd_block_m=64, bwd_block_n=64, bwd_num_warps=4, bwd_num_stages=1
)


def padded_head_dim(head_dim: int) -> int:
    """The head dim the kernel computes with: a power of two, at least 16 (tl.dot's smallest K)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def default_tiles(
    head_dim: int, dtype: torch.dtype, device_type: str, *, dropout: bool = False, dense: bool = True
) -> Tiles:
    """Tuned defaults for a head dim and dtype on the device type ('cuda' or 'cpu' for the interpreter): with the
    forward's register cap where `dropout` is drawn, and for `dense` attention without dropout its own tiles, where
    each was measured faster."""
    if device_type != "cuda":
        return _INTERPRETER
    table = _H200_FP32 if dtype == torch.float32 else _H200_16BIT
    d = padded_head_dim(head_dim) if head_dim not in table else head_dim
    tiles = table.get(d, table[128])
    if dtype == torch.float32:
        return tiles
    if dropout and head_dim in _DROPOUT_MAXNREG:
        tiles = replace(tiles, maxnreg=_DROPOUT_MAXNREG[head_dim])
    if not dropout and dense and head_dim in _NO_DROPOUT:
        tiles = replace(tiles, **_NO_DROPOUT[head_dim])
    return tiles
