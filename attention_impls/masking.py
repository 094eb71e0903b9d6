"""Key-padding helpers shared by the backends: LRA pads on the right, so a mask is a per-row length."""

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


def mask_from_lengths(lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The bool mask (batch, seq_len), True for positions below each row's length."""
    return torch.arange(seq_len, device=lengths.device)[None, :] < lengths[:, None]


def safe_key_mask(key_padding_mask: torch.Tensor) -> torch.Tensor:
    """The mask with fully padded rows opened up, so softmax stays finite; their outputs are zeroed afterwards."""
    return key_padding_mask | ~key_padding_mask.any(dim=1, keepdim=True)


def zero_padded_outputs(out: torch.Tensor, key_padding_mask: torch.Tensor | None) -> torch.Tensor:
    """Zero the rows the interface defines as zero: padded queries (self-attention) and queries with no real key."""
    if key_padding_mask is None:
        return out
    batch, _, seq_q, _ = out.shape
    keep = key_padding_mask.any(dim=1)[:, None, None, None]
    if seq_q == key_padding_mask.shape[1]:
        keep = keep & key_padding_mask[:, None, :, None]
    return out * keep.to(out.dtype)
