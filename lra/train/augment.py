"""Label-preserving augmentation of training batches (train.augment): the eight poses of a square image.

Pathfinder's label (are the two markers joined by one contour?) holds under the flips and quarter turns of the
image, so each training image can be shown in eight poses: eight times the distinct inputs against memorisation
(the curriculum's Path-X and Path-256 stages fitted their 160,000 images while staying at chance on new ones;
docs/path_x_campaign.md). Each example's pose is a function of (seed, step, rank) and its row in the batch, so a
resumed run shows the same poses as an uninterrupted one. Validation and test images are never posed.
"""

from __future__ import annotations

import math

import torch

from lra.core.errors import RunSetupError

AUGMENTS = ("none", "dihedral")
POSES = 8  # bit 2: transpose, bit 1: flip rows (up-down), bit 0: flip columns (left-right), applied in that order


def dihedral(tokens: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
    """tokens (B, s*s) of square images in row-major order, each posed by `poses` (B,) in 0..7 (see POSES)."""
    b, n = tokens.shape
    side = math.isqrt(n)
    if side * side != n:
        raise RunSetupError(f"train.augment=dihedral needs square images, got sequences of {n} tokens")
    grid = tokens.view(b, side, side)
    flip_cols, flip_rows, transpose = (((poses >> k) & 1).bool().view(b, 1, 1) for k in range(3))
    grid = torch.where(transpose, grid.transpose(1, 2), grid)
    grid = torch.where(flip_rows, grid.flip(1), grid)
    grid = torch.where(flip_cols, grid.flip(2), grid)
    return grid.reshape(b, n)


def poses_for(*, seed: int, step: int, rank: int, batch: int, device: torch.device) -> torch.Tensor:
    """The poses of one rank's batch at one step: drawn from (seed, step, rank) alone, on the host, then moved."""
    gen = torch.Generator().manual_seed(((seed * 1_000_003 + step) * 1_009 + rank) % (2**63))
    return torch.randint(0, POSES, (batch,), generator=gen).to(device)


def check_augment(augment: str, task_name: str, pose_invariant: bool) -> None:
    """A clear error when the task's label would not survive the augmentation."""
    if augment == "dihedral" and not pose_invariant:
        raise RunSetupError(
            f"train.augment=dihedral flips and turns images, which keeps the label of Pathfinder's tasks only "
            f"(pathfinder, path-64, path-x, path-256), not {task_name}'s; leave train.augment at none"
        )
