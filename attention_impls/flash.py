"""`flash`: FlashAttention forward and backward, this project's own Triton kernels (attention_impls/kernels).

Computes exact softmax(Q K^T * scale) V without materialising the N x N scores: the forward walks key tiles with an
online softmax and keeps only the row logsumexp; the backward recomputes the probabilities from it (dK/dV per key
tile, dQ per query tile, no atomics: gradients are bitwise reproducible). Memory is O(N) per head; work is
4*N^2*D FLOPs forward and 2.5x that backward, minus the key tiles past each row's length (padding is skipped).

Key padding reaches the kernel as per-row lengths (the mask must be right-padded). Attention dropout draws its
keep-mask in the kernel from a counter-based RNG (Philox on seed, head, row, column), so the backward reproduces it.
Runs on CUDA, or on the CPU under TRITON_INTERPRET=1 (slowly, for tests).
"""

from __future__ import annotations

import torch

from attention_impls.kernels import Tiles, default_tiles
from attention_impls.masking import lengths_from_mask
from attention_impls.registry import AttentionBackend, Capabilities, register_backend


def draw_seed() -> int:
    """A dropout seed from torch's global RNG, so torch.manual_seed makes dropout reproducible."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


@register_backend("flash")
class FlashAttention(AttentionBackend):
    """Exact attention by this project's Triton FlashAttention kernels.

    Options: `scale`; tile sizes `block_m`, `block_n`, `num_warps`, `num_stages` (forward) and `bwd_block_m`,
    `bwd_block_n`, `bwd_num_warps`, `bwd_num_stages` (backward), each None for the tuned default of the head dim;
    `allow_tf32` (fp32 inputs: tf32 dots instead of full-precision ones).
    """

    capabilities = Capabilities(
        devices=("cuda",),
        dtypes=(torch.float16, torch.bfloat16, torch.float32),
        head_dims=(8, 16, 32, 64, 128),
        triton=True,
        notes="own Triton kernel; O(N) memory; deterministic backward",
    )

    def __init__(
        self,
        heads,
        head_dim,
        seq_len,
        dropout=0.0,
        scale=None,
        block_m: int | None = None,
        block_n: int | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
        bwd_block_m: int | None = None,
        bwd_block_n: int | None = None,
        bwd_num_warps: int | None = None,
        bwd_num_stages: int | None = None,
        allow_tf32: bool = False,
    ):
        super().__init__(heads, head_dim, seq_len, dropout, scale)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"attention dropout must be in [0, 1), got {self.dropout}")
        self.tile_options = {
            "block_m": block_m,
            "block_n": block_n,
            "num_warps": num_warps,
            "num_stages": num_stages,
            "bwd_block_m": bwd_block_m,
            "bwd_block_n": bwd_block_n,
            "bwd_num_warps": bwd_num_warps,
            "bwd_num_stages": bwd_num_stages,
        }
        Tiles().with_options(**self.tile_options)  # reject bad tile options at construction
        self.allow_tf32 = bool(allow_tf32)

    def tiles(self, dtype: torch.dtype, device_type: str) -> Tiles:
        """The tiles used for inputs of `dtype` on `device_type`: the tuned defaults with the options applied."""
        return default_tiles(self.head_dim, dtype, device_type).with_options(**self.tile_options)

    def tile_shape(self, dtype: torch.dtype, device_type: str) -> tuple[int, int]:
        t = self.tiles(dtype, device_type)
        return t.block_m, t.block_n

    def _lists(self, q: torch.Tensor, k: torch.Tensor):
        return None  # dense: every key tile below the row's length (block_sparse_flash overrides this)

    def forward(self, q, k, v, key_padding_mask=None):
        from attention_impls.kernels.function import flash_attention  # imports triton only when it runs

        lengths = lengths_from_mask(key_padding_mask) if key_padding_mask is not None else None
        p = self.dropout if self.training else 0.0
        return flash_attention(
            q,
            k,
            v,
            lengths,
            scale=self.scale,
            dropout_p=p,
            seed=draw_seed() if p > 0 else 0,
            tiles=self.tiles(q.dtype, q.device.type),
            lists=self._lists(q, k),
            allow_tf32=self.allow_tf32,
        )
