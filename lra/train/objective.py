"""What a run learns (train.objective): the task's labels, or its own tokens (self-pretraining).

`masked` hides a share (train.mask_rate) of each sequence's real tokens behind a learned mask vector and trains the
encoder to name them from the rest, with a token head over the vocabulary: masked-token denoising on the task's own
training data, no labels and nothing from outside (Amos et al. 2024, "Never Train from Scratch"). Its run is a
pretraining run (record kind 'pretrain', kept out of the accuracy tables); a `classify` run then starts from it with
train.init_from (the classifier head fresh). Accuracy here is the share of hidden tokens named right, per sequence,
and the majority baseline the share of the commonest real token. Which tokens are hidden is drawn from torch's
generator, which the trainer seeds from (seed, step) in training and from a fixed seed per batch in evaluation, so a
resumed run hides the same tokens and every evaluation scores the same ones.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lra.core.errors import RunSetupError
from lra.model import NOT_HIDDEN as IGNORE

EVAL_SEED = 20_240_314  # the hidden tokens of evaluation batch b are drawn from EVAL_SEED + b


def hidden(tokens: torch.Tensor, rate: float) -> torch.Tensor:
    """bool, tokens' shape: each real (non-zero) token hidden with probability `rate` (torch's generator)."""
    return (torch.rand(tokens.shape, device=tokens.device) < rate) & (tokens != 0)


class MaskedLossModel(nn.Module):
    """LossModel's counterpart for train.objective=masked: hide tokens, name them, cross-entropy over the hidden ones.

    `reduction="mean"`: the mean loss over every hidden token of the batch and the sum over sequences of each one's
    share named right; "none": per sequence, its mean loss and share (a sequence with nothing hidden scores 0, 0).
    `labels` are ignored (the targets are the tokens themselves).
    """

    def __init__(self, net: nn.Module, *, rate: float, device_type: str, autocast: torch.dtype | None) -> None:
        super().__init__()
        self.net, self.rate = net, rate
        self.device_type, self.autocast = device_type, autocast

    def forward(
        self, tokens: torch.Tensor, labels: torch.Tensor, padded: Sequence[bool] | None, reduction: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hide = hidden(tokens, self.rate)
        cast = contextlib.nullcontext() if self.autocast is None else torch.autocast(self.device_type, self.autocast)
        with cast:
            logits, targets = self.net.reconstruct(tokens, hide, padded)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # the loss in fp32 at least
        losses = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=IGNORE, reduction="none")
        named = (targets != IGNORE).sum(1)
        right = ((logits.argmax(-1) == targets) & (targets != IGNORE)).sum(1)
        share = right / named.clamp_min(1)
        if reduction == "mean":
            return losses.sum() / named.sum().clamp_min(1), share.sum()
        return losses.sum(1) / named.clamp_min(1), share


def majority_token(tokens: np.ndarray) -> float:
    """The share of the commonest real (non-zero) token among `tokens`: what naming every hidden token as it scores."""
    counts = np.bincount(np.asarray(tokens).reshape(-1).astype(np.int64))[1:]
    return float(counts.max() / max(counts.sum(), 1)) if counts.size else 0.0


def check_objective(objective: str, task_name: str, pair: bool) -> None:
    """A clear error for an objective the task cannot take."""
    if objective == "masked" and pair:
        raise RunSetupError(
            f"train.objective=masked pretrains an encoder on one sequence at a time; {task_name} pairs two documents. "
            f"Leave train.objective at classify"
        )
