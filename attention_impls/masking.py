"""Masking helpers shared by the backends: key padding (LRA pads on the right, so a mask is a per-row length) and
the one softmax restricted to allowed pairs that every masked backend, reference and study uses."""

from __future__ import annotations

import torch


def lengths_from_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """Per-row lengths (int32) of a right-padded bool mask (batch, seq); any other mask is a clear error."""
    if key_padding_mask.dtype != torch.bool or key_padding_mask.dim() != 2:
        raise ValueError(
            f"key_padding_mask must be a bool tensor (batch, seq_k), True for real tokens; "
            f"got {key_padding_mask.dtype} of shape {tuple(key_padding_mask.shape)}"
        )
    lengths = key_padding_mask.sum(dim=1)
    positions = torch.arange(key_padding_mask.shape[1], device=key_padding_mask.device)
    if not torch.equal(key_padding_mask, positions[None, :] < lengths[:, None]):
        bad = (key_padding_mask != (positions[None, :] < lengths[:, None])).any(dim=1).nonzero()[0].item()
        raise ValueError(
            f"key_padding_mask row {bad} is not a right-padded prefix (True tokens then False padding); "
            f"this backend takes per-row lengths: move padding to the right, or use the 'naive' backend"
        )
    return lengths.to(torch.int32)


def score_dtype(dtype: torch.dtype) -> torch.dtype:
    """Softmax precision for inputs of `dtype`: fp32, or fp64 for fp64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def safe_key_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """The mask with fully padded rows opened up, so softmax stays finite; their outputs are zeroed afterwards."""
    return key_padding_mask | ~key_padding_mask.any(dim=1, keepdim=True)


def zero_padded_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v with padded positions replaced by zeros: padded keys and values, and padded queries in
    self-attention. A selection, not a product with the mask, so a NaN or inf in padding reaches neither the
    output nor the gradients of the real positions (0 * NaN is NaN); padded positions get zero gradients."""
    if key_padding_mask is None:
        return q, k, v
    real = key_padding_mask[:, None, :, None]
    k, v = (torch.where(real, t, t.new_zeros(())) for t in (k, v))
    if q.shape[2] == key_padding_mask.shape[1]:
        q = torch.where(real, q, q.new_zeros(()))
    return q, k, v


def zero_padded_outputs(out: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the rows the interface defines as zero: padded queries (self-attention) and queries with no real key."""
    if key_padding_mask is None:
        return out
    batch, _, seq_q, _ = out.shape
    keep = key_padding_mask.any(dim=1)[:, None, None, None]
    if seq_q == key_padding_mask.shape[1]:
        keep = keep & key_padding_mask[:, None, :, None]
    return torch.where(keep, out, out.new_zeros(()))


# Log-normaliser reported for a row with no allowed key: finite (so merging rounds of hashing stays NaN-free) and so
# small that the row gets no weight beside any row that had a key.
NO_KEY_LSE = -1e30


def masked_softmax_lse(scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax over the last dim restricted to `allowed` (broadcast to `scores`), and its log-normaliser.

    A row with no allowed entry gets zero probabilities and log-normaliser NO_KEY_LSE; neither the values nor the
    gradients are ever NaN.
    """
    has_key = allowed.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~has_key, 0.0)
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    probs = torch.where(has_key, torch.exp(scores - lse), scores.new_zeros(()))
    lse = torch.where(has_key, lse, torch.full_like(lse, NO_KEY_LSE))
    return probs, lse.squeeze(-1)


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """softmax over the last dim restricted to `allowed`; rows with no allowed entry are zero (never NaN)."""
    return masked_softmax_lse(scores, allowed)[0]


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """`naive`'s sequence of operations over the allowed (query, key) pairs only (`allowed` broadcasts to
    (batch, heads, Nq, Nk)): scores in the input dtype, softmax in fp32 (fp64 for fp64 inputs), probabilities cast
    to the input dtype for P V. Rows with no allowed key are zero."""
    scores = torch.matmul(q, k.transpose(-2, -1))
    scores = scores.to(score_dtype(scores.dtype)) * scale
    probs = masked_softmax(scores, allowed)
    if dropout_p > 0:
        probs = torch.nn.functional.dropout(probs, p=dropout_p)
    return torch.matmul(probs.to(v.dtype), v)
