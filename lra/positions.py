"""Where a token is, told to the model: additive position tables (1-D sinusoidal, 2-D row and column), the 2-D
rotary rotation of queries and keys (`model.pos_emb=rope2d`), and how `train.init_from` fits a smaller image's learned
positions onto a larger grid (`train.init_positions`)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lra.core.errors import ConfigError, RunSetupError


def sinusoidal_positions(n: int, dim: int) -> torch.Tensor:
    """Fixed 1-D positions (1, n, dim) of Vaswani et al.: sines in the even features, cosines in the odd."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(n, dim)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq[: dim // 2])
    return pe[None]


def grid_sinusoidal_positions(n: int, dim: int) -> torch.Tensor:
    """Fixed positions of a square image of `n` pixels in row-major order (model.pos_emb=sincos2d): the first half of
    the features encode the row and the second the column, each as `sinusoidal_positions` does.

    A pixel's code depends on its row and column alone, not on the image's size: a model moves from one size to the
    next at the same pixel scale with nothing to resize (Pathfinder's paddles are 5 pixels long at 64, 128 and 256 px).
    """
    side = math.isqrt(n)
    if side * side != n or dim % 4:
        raise ConfigError(
            f"model.pos_emb=sincos2d needs a square image and model.dim divisible by 4, got {n} tokens and dim {dim}"
        )
    axis = sinusoidal_positions(side, dim // 2)[0]
    rows = axis[:, None, :].expand(side, side, dim // 2)
    cols = axis[None, :, :].expand(side, side, dim // 2)
    return torch.cat([rows, cols], dim=-1).reshape(1, n, dim)


# The additive tables by model.pos_emb (rope2d adds none: it turns queries and keys instead).
POSITIONS = {"sinusoidal": sinusoidal_positions, "sincos2d": grid_sinusoidal_positions}


def _grid_sides(n: int, new_len: int) -> tuple[int, int]:
    side, new_side = math.isqrt(n), math.isqrt(new_len)
    if side * side != n or new_side * new_side != new_len:
        raise RunSetupError(f"init_from: positional grids must be square to resize, got {n} -> {new_len} positions")
    return side, new_side


def upsample_grid_positions(pos: torch.Tensor, new_len: int) -> torch.Tensor:
    """Learned positions of a square image (1, s*s, dim) resized to (1, new_len, dim) on the 2-D grid (bilinear).

    The FlashAttention paper's Path-X recipe: train on Path-64, then initialise Path-X with the positions upsampled.
    A feature k pixels long at the small size is then as long as one 2k pixels long at twice the size.
    """
    _, n, dim = pos.shape
    side, new_side = _grid_sides(n, new_len)
    grid = pos.reshape(1, side, side, dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new_side, new_side), mode="bilinear", align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(1, new_len, dim)


def mirror_grid_positions(pos: torch.Tensor, new_len: int) -> torch.Tensor:
    """Learned positions of a square image (1, s*s, dim) tiled by reflection onto a larger grid (1, new_len, dim).

    Row (and column) r of the large grid takes row r of the small one, folded back and forth: 0..s-1, s-1..0, 0..
    Neighbours stay neighbours at the same pixel scale, where upsampling halves it; far apart pixels may share a
    position. For Pathfinder's larger sizes, whose paddles are as long in pixels at 128 and 256 px as at 64.
    """
    _, n, dim = pos.shape
    side, new_side = _grid_sides(n, new_len)
    if new_side < side:
        got = f"{side}x{side} -> {new_side}x{new_side}"
        raise RunSetupError(f"init_from: mirror tiles a grid onto a larger one, got {got}; use init_positions=upsample")
    r = torch.arange(new_side, device=pos.device) % (2 * side)
    rows = torch.where(r < side, r, 2 * side - 1 - r)
    grid = pos.reshape(side, side, dim)
    return grid[rows][:, rows].reshape(1, new_len, dim)


GRID_RESIZE = {"upsample": upsample_grid_positions, "mirror": mirror_grid_positions}


# Heo et al. 2024 (Rotary Position Embedding for Vision Transformer) use base 100 for axial 2-D rotary positions:
# its slowest wave (head dim 32: 100^(-7/8) rad a pixel) turns once in ~350 pixels, past Path-256's 256.
ROTARY_BASE = 100.0


def grid_rotary_angles(n: int, head_dim: int, *, base: float = ROTARY_BASE) -> torch.Tensor:
    """(n, head_dim // 2) rotation angles of a square image's `n` pixels in row-major order (model.pos_emb=rope2d):
    angle j is row * base^(-j/f) for j < f and column * base^(-(j-f)/f) after, f = head_dim / 4.

    `rotate` turns each query and key by its pixel's angles, so their dot depends on the two pixels' offset alone: the
    same function at every image size and every place in it, with no table to learn or resize between stages.
    """
    side = math.isqrt(n)
    if side * side != n or head_dim % 4:
        raise ConfigError(
            f"model.pos_emb=rope2d needs a square image and a head dim divisible by 4, got {n} tokens and head dim "
            f"{head_dim}"
        )
    f = head_dim // 4
    theta = base ** (-torch.arange(f, dtype=torch.float64) / f)
    pixel = torch.arange(n, dtype=torch.float64)
    rows, cols = torch.div(pixel, side, rounding_mode="floor"), pixel % side
    return torch.cat([rows[:, None] * theta, cols[:, None] * theta], dim=1)  # fp64: the caller picks its precision


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`x` (..., N, D) with each pair (x_j, x_{j + D/2}) turned by the angle whose cosine and sine are cos[..., j] and
    sin[..., j] ((..., N, D/2), broadcast over x's leading dims); computed in fp32 at least, returned in x's dtype."""
    half, work = x.shape[-1] // 2, torch.promote_types(x.dtype, torch.float32)
    x1, x2 = x[..., :half].to(work), x[..., half:].to(work)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)
