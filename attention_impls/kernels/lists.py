"""Block lists for the kernels' list mode: which key blocks each query block visits, and the transpose.

A layout is a bool (heads or 1, query blocks, key blocks) matrix at its own block size. The kernels' tiles must divide
that block size; a layout block then covers (block / tile) tiles along each side. Lists are int32
(heads or 1, rows, MAX_LIST): each row the sorted kept indices, padded with a huge index so that the kernel can count
entries below a length without knowing the row's count. Built once per (layout, tile sizes, lengths) and cached.
"""

from __future__ import annotations

import torch

from lra.core.numbers import ceil_div

PAD_INDEX = 1 << 30


def _next_pow2(n: int) -> int:
    return 1 << max(1, (max(n, 1) - 1).bit_length())


def expand_layout(layout: torch.Tensor, block: int, tile_m: int, tile_n: int, nq: int, nk: int) -> torch.Tensor:
    """The layout at tile granularity, cropped to cdiv(nq, tile_m) x cdiv(nk, tile_n) tiles."""
    if block % tile_m or block % tile_n:
        raise ValueError(
            f"kernel tiles ({tile_m} x {tile_n}) must divide the layout block size {block}; "
            f"choose tiles <= {block} (powers of two) or a layout block that is a multiple of them"
        )
    need_q, need_k = ceil_div(nq, block), ceil_div(nk, block)
    if layout.shape[1] < need_q or layout.shape[2] < need_k:
        raise ValueError(
            f"layout of {layout.shape[1]} x {layout.shape[2]} blocks of {block} does not cover {nq} queries x {nk} "
            f"keys (needs {need_q} x {need_k}); build the layout for this sequence length"
        )
    tiles = layout.repeat_interleave(block // tile_m, dim=1).repeat_interleave(block // tile_n, dim=2)
    return tiles[:, : ceil_div(nq, tile_m), : ceil_div(nk, tile_n)]


def block_lists(mask: torch.Tensor) -> torch.Tensor:
    """Sorted kept indices per row of a bool (heads, rows, cols) matrix, padded with PAD_INDEX to a power of two."""
    heads, rows, cols = mask.shape
    idx = torch.arange(cols, dtype=torch.int32, device=mask.device).expand(heads, rows, cols)
    keyed = torch.where(mask, idx, torch.full_like(idx, PAD_INDEX))
    ordered = keyed.sort(dim=-1).values
    width = _next_pow2(int(mask.sum(dim=-1).max().item()) if mask.numel() else 1)
    if width > cols:
        pad = torch.full((heads, rows, width - cols), PAD_INDEX, dtype=torch.int32, device=mask.device)
        ordered = torch.cat([ordered, pad], dim=-1)
    return ordered[..., :width].contiguous()


def _device_key(device: torch.device | str) -> str:
    """'cuda' and 'cuda:0' (the current device) are one cache entry."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(device)


class LayoutLists:
    """The lists one layout needs for given tiles and lengths, cached (one instance per layout)."""

    def __init__(self, layout: torch.Tensor, block: int) -> None:
        if layout.dtype != torch.bool or layout.dim() != 3:
            raise ValueError(f"layout must be a bool (heads or 1, q_blocks, k_blocks) tensor, got {layout.dtype} "
                             f"of shape {tuple(layout.shape)}")  # fmt: skip
        self.layout = layout.cpu()
        self.block = int(block)
        self._cache: dict[tuple, torch.Tensor] = {}

    @property
    def heads(self) -> int:
        return self.layout.shape[0]

    def rows(self, tile_m: int, tile_n: int, nq: int, nk: int, device: torch.device) -> torch.Tensor:
        """Per query tile (size tile_m), the key tiles (size tile_n) to visit."""
        key = ("rows", tile_m, tile_n, nq, nk, _device_key(device))
        if key not in self._cache:
            tiles = expand_layout(self.layout, self.block, tile_m, tile_n, nq, nk)
            self._cache[key] = block_lists(tiles).to(device)
        return self._cache[key]

    def cols(self, tile_m: int, tile_n: int, nq: int, nk: int, device: torch.device) -> torch.Tensor:
        """Per key tile (size tile_n), the query tiles (size tile_m) that visit it."""
        key = ("cols", tile_m, tile_n, nq, nk, _device_key(device))
        if key not in self._cache:
            tiles = expand_layout(self.layout, self.block, tile_m, tile_n, nq, nk)
            self._cache[key] = block_lists(tiles.transpose(1, 2)).to(device)
        return self._cache[key]
