"""`flash`: FlashAttention forward and backward, this project's own Triton kernels (attention_impls/kernels).

Computes exact softmax(Q K^T * scale) V without materialising the N x N scores: the forward walks key tiles with an
online softmax and keeps only the row logsumexp; the backward recomputes the probabilities from it (dK/dV per key
tile, dQ per query tile, no atomics: gradients are bitwise reproducible; or, `deterministic=False`, one pass that adds
dQ by atomics, drawing P and the dropout mask once instead of twice). Memory is O(N) per head; work is
4*N^2*D FLOPs forward and 2.5x that backward, minus the key tiles past each row's length (padding is skipped).

Key padding reaches the kernel as per-row lengths (the mask must be right-padded). With `compact_padding`, any mask
is taken: each row's real tokens are gathered to its front in their order, attended with lengths, and scattered back
(exact: attention is blind to token order, the positions were added before it), as FlashAttention's unpadding does
for Xiong et al.'s black-pixel padding. Attention dropout draws its
keep-mask in the kernel (Philox, 16 decisions per call, p quantised to 1/256: `effective_dropout`) from an RNG state
that a device op draws from torch's generator on every call, so the backward reproduces the mask, CUDA graphs replay
with fresh masks and torch.manual_seed reproduces them. The kernels are torch.library custom ops: torch.compile
traces through them. Runs on CUDA, or on the CPU under TRITON_INTERPRET=1 (slowly, for tests).
"""

from __future__ import annotations

import weakref

import torch

from attention_impls.base import AttentionBackend, Capabilities
from attention_impls.kernels import SUPPORTED_HEAD_DIMS, Tiles, default_tiles, draw_rng_state, effective_dropout
from attention_impls.masking import lengths_from_mask
from attention_impls.registry import register_backend

_last_checked: tuple[weakref.ref, int, torch.Tensor] | None = None


def draw_seed() -> int:
    """A dropout seed from torch's global RNG, so torch.manual_seed makes dropout reproducible (flash_blockwise)."""
    return int(torch.randint(0, 2**31 - 1, (1,)).item())


def padding_lengths(key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Per-row lengths (int32) of a right-padded mask, for the kernels.

    Eager: checked (lengths_from_mask), once per mask tensor, since every layer of a step gets the same one (the check
    waits for the device). Under torch.compile or CUDA-graph capture, where nothing may wait for the device, the
    lengths are counted and the check is a device-side assertion.
    """
    global _last_checked
    if key_padding_mask is None:
        return None
    mask = key_padding_mask
    if torch.compiler.is_compiling() or (mask.is_cuda and torch.cuda.is_current_stream_capturing()):
        lengths = mask.sum(dim=1, dtype=torch.int32)
        prefix = torch.arange(mask.shape[1], device=mask.device)[None, :] < lengths[:, None]
        torch._assert_async((mask == prefix).all(), "key_padding_mask is not right-padded (True tokens, then padding)")
        return lengths
    if _last_checked is not None and _last_checked[0]() is mask and _last_checked[1] == mask._version:
        return _last_checked[2]
    lengths = lengths_from_mask(mask)
    _last_checked = (weakref.ref(mask), mask._version, lengths)
    return lengths


def compaction(key_padding_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(order, back) per row of the (B, N) mask: `order` lists the real tokens first, each group in its order, and
    `back` undoes it (a stable sort of the padding flags and its inverse permutation)."""
    order = torch.argsort((~key_padding_mask).to(torch.int8), dim=1, stable=True)
    return order, torch.argsort(order, dim=1)


def gather_tokens(x: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """x (B, H, N, D) with its tokens taken in `order` (B, N), the same for every head."""
    return x.gather(2, order[:, None, :, None].expand(-1, x.shape[1], -1, x.shape[3]))


@register_backend("flash")
class FlashAttention(AttentionBackend):
    """Exact attention by this project's Triton FlashAttention kernels.

    Options: `scale`; tile sizes `block_m`, `block_n`, `num_warps`, `num_stages` (forward) and `bwd_block_m`,
    `bwd_block_n`, `bwd_num_warps`, `bwd_num_stages` (backward), each None for the tuned default of the head dim;
    `maxnreg`, `bwd_maxnreg` (registers a thread may use in the forward and the backward kernels; 0: the compiler's
    choice; None: the default, the compiler's choice except the forward's 128 under dropout at head dim 8; head dim
    8 without dropout has its own tiles, kernels/tiles.py);
    `allow_tf32` (fp32 inputs: tf32 dots instead of full-precision ones); `deterministic` (default True: the two-pass
    backward, bitwise reproducible; False: the one-pass backward with dQ by fp32 atomics, whose last bits vary);
    `compact_padding` (default False: right-padded masks only; True: any mask, by gathering real tokens first, at the
    price of a gather of q, k, v and a scatter of the output per call).
    """

    inner_padding_option = "compact_padding"
    dense_tiles = True  # the dense tile defaults, which differ with and without dropout (kernels/tiles.py)

    capabilities = Capabilities(
        devices=("cuda",),
        dtypes=(torch.float16, torch.bfloat16, torch.float32),
        head_dims=SUPPORTED_HEAD_DIMS,
        triton=True,
        notes="own Triton kernel; O(N) memory; deterministic backward",
    )

    def __init__(
        self,
        *args,
        block_m: int | None = None,
        block_n: int | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
        bwd_block_m: int | None = None,
        bwd_block_n: int | None = None,
        bwd_num_warps: int | None = None,
        bwd_num_stages: int | None = None,
        maxnreg: int | None = None,
        bwd_maxnreg: int | None = None,
        allow_tf32: bool = False,
        deterministic: bool = True,
        compact_padding: bool = False,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.effective_dropout = effective_dropout(self.dropout)  # what the kernels apply: p rounded to 1/256
        self.tile_options = {
            "block_m": block_m,
            "block_n": block_n,
            "num_warps": num_warps,
            "num_stages": num_stages,
            "bwd_block_m": bwd_block_m,
            "bwd_block_n": bwd_block_n,
            "bwd_num_warps": bwd_num_warps,
            "bwd_num_stages": bwd_num_stages,
            "maxnreg": maxnreg,
            "bwd_maxnreg": bwd_maxnreg,
        }
        Tiles().with_options(**self.tile_options)  # reject bad tile options at construction
        self.allow_tf32 = bool(allow_tf32)
        self.deterministic = bool(deterministic)
        if not isinstance(compact_padding, bool):
            raise ValueError(f"compact_padding must be true or false, got {compact_padding!r}")
        self.compact_padding = compact_padding

    def tiles(self, dtype: torch.dtype, device_type: str, *, dropout: bool = False) -> Tiles:
        """The tiles used for inputs of `dtype` on `device_type` (drawing `dropout` or not): the tuned defaults with
        the options applied."""
        tiles = default_tiles(self.head_dim, dtype, device_type, dropout=dropout, dense=self.dense_tiles)
        return tiles.with_options(**self.tile_options)

    def tile_shape(self, dtype: torch.dtype, device_type: str) -> tuple[int, int]:
        t = self.tiles(dtype, device_type)
        return t.block_m, t.block_n

    def _lists(self, q: torch.Tensor, k: torch.Tensor):
        return None  # dense: every key tile below the row's length (block_sparse_flash overrides this)

    def forward(self, q, k, v, key_padding_mask=None):
        if self.compact_padding and key_padding_mask is not None:
            order, back = compaction(key_padding_mask)
            lengths = key_padding_mask.sum(1, keepdim=True)
            packed = torch.arange(key_padding_mask.shape[1], device=lengths.device)[None, :] < lengths
            out = self.attend(*(gather_tokens(x, order) for x in (q, k, v)), packed)
            return gather_tokens(out, back)
        return self.attend(q, k, v, key_padding_mask)

    def attend(self, q, k, v, key_padding_mask):
        """The attention of (B, H, N, D) q, k, v under a right-padded `key_padding_mask` (or None)."""
        from attention_impls.kernels.function import flash_attention  # imports triton only when it runs

        p = self.dropout if self.training else 0.0
        return flash_attention(
            q,
            k,
            v,
            padding_lengths(key_padding_mask),
            scale=self.scale,
            dropout_p=p,
            seed=draw_rng_state(q.device) if p > 0 else None,
            tiles=self.tiles(q.dtype, q.device.type, dropout=p > 0),
            lists=self._lists(q, k),
            allow_tf32=self.allow_tf32,
            deterministic=self.deterministic,
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, effective_dropout={self.effective_dropout}"
