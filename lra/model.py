"""The LRA classifier: a pre-LayerNorm Transformer encoder whose attention is built by name from the registry.

Token ids (0 = padding) -> embedding + positions (learned, sinusoidal or 2-D; lra/positions.py) -> [CLS] -> pre-LN
blocks (with `rope2d`, queries and keys turned by each pixel's row and column instead) -> pooled (CLS,
mean over real tokens, or `mean_all`: over every position with padding as zeros, as Nystromformer's LRA code, so the
vector shrinks with the share of real tokens) -> MLP head. Two-document tasks (retrieval) encode both documents with
the same encoder and classify [e1, e2, e1*e2, e1-e2] (the LRA dual-tower head).

Packed tokens (`model.pack_tokens`): every pooling reads real tokens only, and a padded token is never a key, so
padding cannot reach the output. The encoder can then run on each sequence's real tokens alone, gathered to the
front in their order with their own positions (`pack_real`), `pack_length` wide: the same function for exact
attention, at a fraction of the cost where most tokens are padding (black pixels of Pathfinder's reference input:
86% of Path-X, 96% of Path-256). What differs: dropout draws other masks, and a backend whose pattern follows the
position in the sequence (block-sparse layouts, local windows, Linformer's projection) sees the packed order, as
FlashAttention's `unpad_input` gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_impls import build_attention
from lra.core.errors import RunSetupError
from lra.positions import GRID_RESIZE, POSITIONS, grid_rotary_angles, rotate

Rotary = tuple[torch.Tensor, torch.Tensor]
NOT_HIDDEN = -100  # reconstruct's target where no token is hidden (cross_entropy's ignore_index)
OBJECTIVE_ONLY = ("head.", "token_head.", "encoder.mask_emb")  # weights of one train.objective, not the other


class MultiHeadAttention(nn.Module):
    """Projections around a pluggable attention backend."""

    def __init__(
        self, dim: int, *, heads: int, head_dim: int, seq_len: int, backend: str, dropout: float, options: dict
    ) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.qkv = nn.Linear(dim, 3 * heads * head_dim)
        self.out = nn.Linear(heads * head_dim, dim)
        self.attn = build_attention(
            backend, heads=heads, head_dim=head_dim, seq_len=seq_len, dropout=dropout, options=options
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, rotary: Rotary | None = None) -> torch.Tensor:
        """`rotary`: the (cos, sin) of each token's rotary angles, (B or 1, 1, N, head_dim / 2), for rope2d."""
        b, n, _ = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        if rotary is not None:
            q, k = rotate(q, *rotary), rotate(k, *rotary)
        out = self.attn(q, k, v, mask)
        return self.out(out.transpose(1, 2).reshape(b, n, self.heads * self.head_dim))


class Block(nn.Module):
    """x + Attn(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int, *, mlp_dim: int, dropout: float, attn: MultiHeadAttention) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = attn
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, rotary: Rotary | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x), mask, rotary))
        return x + self.drop(self.mlp(self.ln2(x)))


class Encoder(nn.Module):
    """Embeds tokens and runs the blocks; returns one pooled vector per sequence."""

    def __init__(
        self,
        model: Any,
        backend: str,
        *,
        vocab_size: int,
        seq_len: int,
        attn_options: dict,
        pack_length: int = 0,
        masked: bool = False,
    ) -> None:
        """`model`: the config's model section (lra.train.settings.ModelSettings, read by attribute). `pack_length`
        > 0 packs each sequence's real tokens into that many slots (see the module; the caller counts them).
        `masked`: a learned mask vector stands in for hidden tokens (train.objective=masked)."""
        super().__init__()
        dim, heads = model.dim, model.heads
        head_dim = model.head_dim or dim // heads
        self.pool = model.pool
        self.seq_len = seq_len
        self.pack_length = pack_length
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=0)
        if model.embed_std != 1.0:
            with torch.no_grad():
                self.embed.weight.normal_(0.0, model.embed_std)
                self.embed.weight[0].zero_()
        self.cls = nn.Parameter(torch.zeros(1, 1, dim)) if self.pool == "cls" else None
        self.mask_emb = nn.Parameter(torch.randn(dim) * model.embed_std) if masked else None
        rotary = grid_rotary_angles(seq_len, head_dim) if model.pos_emb == "rope2d" else None
        self.register_buffer("rot_cos", None if rotary is None else rotary.cos().float(), persistent=False)
        self.register_buffer("rot_sin", None if rotary is None else rotary.sin().float(), persistent=False)
        if model.pos_emb == "learned":
            self.pos = nn.Parameter(torch.randn(1, seq_len, dim) * 0.02)
        else:
            table = None if rotary is not None else POSITIONS[model.pos_emb](seq_len, dim)
            self.register_buffer("pos", table, persistent=False)
        attn_len = (pack_length or seq_len) + (1 if self.cls is not None else 0)
        attn = dict(heads=heads, head_dim=head_dim, seq_len=attn_len, backend=backend, options=attn_options)
        self.blocks = nn.ModuleList(
            Block(
                dim,
                mlp_dim=model.mlp_dim,
                dropout=model.dropout,
                attn=MultiHeadAttention(dim, dropout=model.attention_dropout, **attn),
            )
            for _ in range(model.layers)
        )
        self.drop = nn.Dropout(model.dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, tokens: torch.Tensor, padded: bool | None = None) -> torch.Tensor:
        """Pooled encodings of `tokens`; `padded` says whether any of them has padding (None: look, a host sync).

        Attention gets the key padding mask only when some sequence is padded: a mask of all True would take the
        slower masked path of some backends for nothing.
        """
        x, mask, _, _ = self.encode(tokens, padded)
        if self.cls is not None:
            return x[:, 0]
        m = mask[..., None].to(x.dtype)
        if self.pool == "mean_all":  # padding counts as zeros: the vector shrinks with the share of real tokens
            return (x * m).sum(1) / tokens.shape[1]
        return (x * m).sum(1) / m.sum(1).clamp_min(1.0)

    def encode(
        self, tokens: torch.Tensor, padded: bool | None = None, hide: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(states after the final norm, [CLS] first when there is one; their mask; the tokens and `hide` in the
        states' order, packed when the model packs, without [CLS]). `hide` (bool, tokens' shape): tokens shown as the
        mask vector instead (train.objective=masked)."""
        b, n = tokens.shape
        if n > self.seq_len:
            raise ValueError(f"sequence of {n} tokens is longer than the model's {self.seq_len}")
        if self.pack_length:
            tokens, where = pack_real(tokens, self.pack_length)
            hide = None if hide is None else hide.gather(1, where)
            padded = True
        else:
            where = None  # the first n pixels, in order
        x = self.embed(tokens)
        if hide is not None:
            x = torch.where(hide[..., None], self.mask_emb.to(x.dtype), x)
        if self.pos is not None:
            x = x + (self.pos[:, :n] if where is None else self.pos[0, where])
        mask = tokens != 0
        if self.cls is not None:
            x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1)
            mask = torch.cat([mask.new_ones(b, 1), mask], dim=1)
        x = self.drop(x)
        if padded is None:
            padded = not bool(mask.all())
        attn_mask = mask if padded else None
        rotary = self.rotary(where, n) if self.rot_cos is not None else None
        for block in self.blocks:
            x = block(x, attn_mask, rotary)
        return self.norm(x), mask, tokens, hide

    def rotary(self, where: torch.Tensor | None, n: int) -> Rotary:
        """(cos, sin) of the rotary angles of the pixels `where` ((B, N) packed; None: the first n), shaped (B or 1, 1,
        N, head_dim / 2) to broadcast over heads; [CLS] in front (when pooled by it) at angle 0, as pixel (0, 0)."""
        if where is None:
            cos, sin = self.rot_cos[None, :n], self.rot_sin[None, :n]
        else:
            cos, sin = self.rot_cos[where], self.rot_sin[where]
        if self.cls is not None:
            cos = torch.cat([cos.new_ones(cos.shape[0], 1, cos.shape[2]), cos], dim=1)
            sin = torch.cat([sin.new_zeros(sin.shape[0], 1, sin.shape[2]), sin], dim=1)
        return cos[:, None], sin[:, None]


def pack_real(tokens: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, positions), each (B, length): every row's real (non-zero) tokens first in their order, then padding,
    and where each came from. A row with more than `length` real tokens fails a device-side assertion (its tokens
    would be cut); lra.train.feed.pack_length_for sizes `length` so that none has."""
    real = tokens != 0
    torch._assert_async(
        (real.sum(1) <= length).all(), "a sequence has more real tokens than model.pack_tokens' pack length"
    )
    where = torch.argsort((~real).to(torch.int8), dim=1, stable=True)[:, :length]
    return tokens.gather(1, where), where


class Classifier(nn.Module):
    """Encoder + MLP head. For two-document tasks the head sees [e1, e2, e1*e2, e1-e2]."""

    def __init__(
        self,
        config: Any,
        backend: str,
        *,
        vocab_size: int,
        seq_len: int,
        num_classes: int,
        pair: bool,
        pack_length: int = 0,
    ) -> None:
        """`config`: a validated run config (lra.train.config.RunConfig: its model section and backend options);
        `pack_length`: the packed width when config.model.pack_tokens (see the module)."""
        super().__init__()
        model = config.model
        self.pair = pair
        options = config.options_of(backend)
        if model.pack_tokens and not 0 < pack_length <= seq_len:
            raise RunSetupError(
                f"model.pack_tokens needs a pack length of 1..{seq_len}, got {pack_length} slots for sequences of "
                f"{seq_len} tokens (lra.train.feed.pack_length_for counts them in the data)"
            )
        masked = config.train.objective == "masked"
        shape = dict(vocab_size=vocab_size, seq_len=seq_len, pack_length=pack_length if model.pack_tokens else 0)
        self.encoder = Encoder(model, backend, attn_options=options, masked=masked, **shape)
        dim = model.dim
        hidden = model.classifier_dim or model.mlp_dim
        self.head = self.token_head = None
        if masked:  # self-pretraining names tokens; the classifier head comes with the run that starts from it
            self.token_head = nn.Linear(dim, vocab_size)
        else:
            self.head = nn.Sequential(
                nn.Linear(4 * dim if pair else dim, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
            )

    def forward(self, tokens: torch.Tensor, padded: Sequence[bool] | None = None) -> torch.Tensor:
        """Logits; `padded`: per document (one, or two for pairs), whether any sequence of the batch has padding
        (`padding_flags`; None: the encoder looks, which syncs with the device and breaks a compiled graph)."""
        if self.head is None:
            raise RunSetupError("a train.objective=masked model names hidden tokens (reconstruct); it has no classes")
        first, second = (None, None) if padded is None else (padded[0], padded[-1])
        if self.pair:
            e1, e2 = self.encoder(tokens[:, 0], first), self.encoder(tokens[:, 1], second)
            return self.head(torch.cat([e1, e2, e1 * e2, e1 - e2], dim=-1))
        return self.head(self.encoder(tokens, first))

    def reconstruct(
        self, tokens: torch.Tensor, hide: torch.Tensor, padded: Sequence[bool] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits over the vocabulary (B, L, V), targets (B, L)) for `tokens` with `hide` (bool, tokens' shape)
        shown as the mask vector, in the encoder's (packed) order: a target is the hidden token, else NOT_HIDDEN."""
        x, _, tokens, hide = self.encoder.encode(tokens, None if padded is None else padded[0], hide)
        if self.encoder.cls is not None:
            x = x[:, 1:]
        return self.token_head(x), torch.where(hide, tokens, torch.full_like(tokens, NOT_HIDDEN))


def padding_flags(tokens: torch.Tensor | np.ndarray, *, pair: bool) -> tuple[bool, ...]:
    """Per document, whether any sequence of the batch `tokens` ((B, L), or (B, 2, L) for pairs) has padding."""
    docs = [tokens[:, 0], tokens[:, 1]] if pair else [tokens]
    return tuple(bool((d == 0).any()) for d in docs)


def build_model(
    config: Any, backend: str, *, vocab_size: int, seq_len: int, num_classes: int, pair: bool, pack_length: int = 0
) -> Classifier:
    """The classifier for a resolved config and a task's shape, with the attention backend `backend` (`pack_length`:
    see Classifier)."""
    shape = dict(vocab_size=vocab_size, seq_len=seq_len, num_classes=num_classes, pair=pair, pack_length=pack_length)
    return Classifier(config, backend, **shape)


def load_init(model: nn.Module, state: dict[str, torch.Tensor], *, positions: str = "upsample") -> list[str]:
    """Load weights from another run (shapes may differ only in the positional table, which is resized on the 2-D
    grid as `positions` says: a GRID_RESIZE key, train.init_positions).

    Returns the names that were adapted. The classifier head is taken too: the tasks share their label set. Between
    the two objectives (train.objective) only the encoder is carried: a classifier started from a self-pretraining
    run leaves its mask vector and token head behind and starts its head fresh (and the other way round).
    """
    own = model.state_dict()
    for name in [n for n in state if n not in own and n.startswith(OBJECTIVE_ONLY)]:
        del state[name]
    fresh = [n for n in own if n not in state]
    if any(not n.startswith(OBJECTIVE_ONLY) for n in fresh):
        missing = ", ".join(n for n in fresh if not n.startswith(OBJECTIVE_ONLY))
        raise RunSetupError(f"init_from: this model's {missing} are not in the checkpoint; the architectures differ")
    adapted = []
    for name, value in state.items():
        if name not in own:
            raise RunSetupError(f"init_from: parameter {name!r} is not in this model; the architectures differ")
        if own[name].shape != value.shape:
            if name.endswith("encoder.pos") and value.dim() == 3:
                state[name] = GRID_RESIZE[positions](value, own[name].shape[1])
                adapted.append(name)
            else:
                raise RunSetupError(
                    f"init_from: {name} has shape {tuple(value.shape)} but this model needs {tuple(own[name].shape)}"
                )
    model.load_state_dict(state, strict=not fresh)
    return adapted
