"""The LRA classifier: a pre-LayerNorm Transformer encoder whose attention is built by name from the registry.

Token ids (0 = padding) -> embedding + positions (learned or sinusoidal) -> [CLS] -> pre-LN blocks -> pooled
(CLS or mean over real tokens) -> MLP head. Two-document tasks (retrieval) encode both documents with the same
encoder and classify [e1, e2, e1*e2, e1-e2] (the LRA dual-tower head).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attention_impls import build_attention


class MultiHeadAttention(nn.Module):
    """Projections around a pluggable attention backend."""

    def __init__(self, dim: int, heads: int, head_dim: int, seq_len: int, backend: str, dropout: float, options: dict):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(dim, 3 * heads * head_dim)
        self.out = nn.Linear(heads * head_dim, dim)
        self.attn = build_attention(
            backend, heads=heads, head_dim=head_dim, seq_len=seq_len, dropout=dropout, options=options
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        out = self.attn(q, k, v, mask)
        return self.out(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class Block(nn.Module):
    """x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int, mlp_dim: int, dropout: float, attn: MultiHeadAttention):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = attn
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x), mask))
        return x + self.drop(self.mlp(self.ln2(x)))


def sinusoidal_positions(n: int, dim: int) -> torch.Tensor:
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(n, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return pe[None]


class Encoder(nn.Module):
    """Embeds tokens and runs the blocks; returns one pooled vector per sequence."""

    def __init__(self, vocab_size: int, seq_len: int, model: dict[str, Any], backend: str, attn_options: dict):
        super().__init__()
        dim, heads = model["dim"], model["heads"]
        head_dim = model["head_dim"] or dim // heads
        self.pool = model["pool"]
        self.seq_len = seq_len
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if self.pool == "cls" else None
        if model["pos_emb"] == "learned":
            self.pos = nn.Parameter(torch.randn(1, seq_len, dim) * 0.02)
        else:
            self.register_buffer("pos", sinusoidal_positions(seq_len, dim), persistent=False)
        attn_len = seq_len + (1 if self.cls is not None else 0)
        self.blocks = nn.ModuleList(
            Block(
                dim,
                model["mlp_dim"],
                model["dropout"],
                MultiHeadAttention(dim, heads, head_dim, attn_len, backend, model["attention_dropout"], attn_options),
            )
            for _ in range(model["layers"])
        )
        self.drop = nn.Dropout(model["dropout"])
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        if n > self.seq_len:
            raise ValueError(f"sequence of {n} tokens is longer than the model's {self.seq_len}")
        mask = tokens != 0
        x = self.embed(tokens) + self.pos[:, :n]
        if self.cls is not None:
            x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1)
            mask = torch.cat([mask.new_ones(b, 1), mask], dim=1)
        x = self.drop(x)
        attn_mask = None if bool(mask.all()) else mask
        for block in self.blocks:
            x = block(x, attn_mask)
        x = self.norm(x)
        if self.cls is not None:
            return x[:, 0]
        m = mask[..., None].to(x.dtype)
        return (x * m).sum(1) / m.sum(1).clamp_min(1.0)


class Classifier(nn.Module):
    """Encoder + MLP head. For two-document tasks the head sees [e1, e2, e1*e2, e1-e2]."""

    def __init__(
        self, vocab_size: int, seq_len: int, num_classes: int, pair: bool, config: dict[str, Any], backend: str
    ):
        super().__init__()
        model = config["model"]
        self.pair = pair
        self.encoder = Encoder(vocab_size, seq_len, model, backend, dict(config["attention"].get(backend) or {}))
        dim = model["dim"]
        hidden = model["classifier_dim"] or model["mlp_dim"]
        self.head = nn.Sequential(
            nn.Linear(4 * dim if pair else dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.pair:
            e1, e2 = self.encoder(tokens[:, 0]), self.encoder(tokens[:, 1])
            return self.head(torch.cat([e1, e2, e1 * e2, e1 - e2], dim=-1))
        return self.head(self.encoder(tokens))


def build_model(config: dict[str, Any], vocab_size: int, seq_len: int, num_classes: int, pair: bool, backend: str):
    """The classifier for a resolved config and a task's shape, with the attention backend `backend`."""
    return Classifier(vocab_size, seq_len, num_classes, pair, config, backend)


def upsample_grid_positions(pos: torch.Tensor, new_len: int) -> torch.Tensor:
    """Learned positions of a square image (1, s*s, dim) resized to (1, new_len, dim) on the 2-D grid (bilinear).

    The FlashAttention paper's Path-X recipe: train on Path-64, then initialise Path-X with the positions upsampled.
    """
    _, n, dim = pos.shape
    side, new_side = math.isqrt(n), math.isqrt(new_len)
    if side * side != n or new_side * new_side != new_len:
        raise ValueError(f"positional grids must be square: {n} -> {new_len} positions")
    grid = pos.reshape(1, side, side, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new_side, new_side), mode="bilinear", align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(1, new_len, dim)


def load_init(model: nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    """Load weights from another run (shapes may differ only in the positional table, which is upsampled).

    Returns the names that were adapted. The classifier head is taken too: the tasks share their label set.
    """
    own = model.state_dict()
    adapted = []
    for name, value in state.items():
        if name not in own:
            raise ValueError(f"init_from: parameter {name!r} is not in this model; the architectures differ")
        if own[name].shape != value.shape:
            if name.endswith("encoder.pos") and value.dim() == 3:
                state[name] = upsample_grid_positions(value, own[name].shape[1])
                adapted.append(name)
            else:
                raise ValueError(
                    f"init_from: {name} has shape {tuple(value.shape)} but this model needs {tuple(own[name].shape)}"
                )
    model.load_state_dict(state)
    return adapted
