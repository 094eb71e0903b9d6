"""Target pairs drawn ahead and carried: the costly part of a generated image, kept so that the rest is quick.

Growing the two target snakes (`grow_targets`: many pairs tried until one grows whole) takes 91% of a 64 px image's
time, 73% of a 128 px one's and 44% at 256 px. A targets cache holds, per image of a split, what that part leaves:
the margin, the pair (paddle stamps and starts, tails, heads, pairs tried) and the image's random stream where it
stopped (PCG64's 128-bit state and its buffered 32-bit word). Drawing from it restores the stream and runs the rest
(`finish`): the image is byte for byte the one drawn from scratch. The cache is small (about 210 bytes an image:
41 MiB for Path-X's 200,000) so it can be drawn on one machine and carried to another whose cores are dear (the lent
GPU machine: docs/path_x_campaign.md). It is keyed like the images (generator version, resolution, difficulty, seed,
split, size); the store (`GeneratedStore.usable_targets`) draws a split's first and last images both ways before
it uses a cache.
"""

from __future__ import annotations

import numpy as np

from tasks._pathfinder.draw import Drawing, finish, grow_targets, image_rng, labels_for
from tasks._pathfinder.settings import check_settings
from tasks._pathfinder.snakes import Pair, Snake

_LOW = (1 << 64) - 1


def fields(difficulty: int) -> dict[str, tuple[tuple[int, ...], type]]:
    """The arrays of a targets cache: per image, each one's shape and dtype."""
    return {
        "margin": ((), np.uint8),
        "stamps": ((2, difficulty), np.int16),  # per snake, its paddles from the tail
        "starts": ((2, difficulty), np.int32),
        "tails": ((2, 2), np.int16),  # (y, x) per snake
        "heads": ((2, 2), np.int16),
        "tried": ((), np.int32),
        "state": ((2,), np.uint64),  # PCG64's state: high and low 64 bits
        "buffered": ((2,), np.uint32),  # has_uint32, uinteger
    }


def draw_targets(
    resolution: int, difficulty: int, split: str, start: int, stop: int, seed: int
) -> dict[str, np.ndarray]:
    """The target pairs of images start..stop-1 of a split and their streams where `grow_targets` left them."""
    check_settings(resolution, difficulty)
    n = stop - start
    out = {name: np.empty((n, *shape), dtype) for name, (shape, dtype) in fields(difficulty).items()}
    for k, i in enumerate(range(start, stop)):
        rng = image_rng(resolution, difficulty, split, i, seed)
        margin, pair = grow_targets(resolution, difficulty, rng)
        out["margin"][k], out["tried"][k] = margin, pair.tried
        for s, snake in enumerate(pair.snakes):
            out["stamps"][k, s], out["starts"][k, s] = snake.stamps, snake.starts
        out["tails"][k], out["heads"][k] = pair.tails, pair.heads
        state = rng.bit_generator.state
        out["state"][k] = (state["state"]["state"] >> 64, state["state"]["state"] & _LOW)
        out["buffered"][k] = (state["has_uint32"], state["uinteger"])
    return out


def draw_from_targets(
    resolution: int, difficulty: int, split: str, index: int, seed: int, targets: dict[str, np.ndarray], row: int
) -> Drawing:
    """Image `index` of a split, its target pair taken from row `row` of a targets cache's arrays."""
    rng = image_rng(resolution, difficulty, split, index, seed)
    state = rng.bit_generator.state  # its increment is the image's own; the position comes from the cache
    high, low = (int(x) for x in targets["state"][row])
    state["state"]["state"] = (high << 64) | low
    state["has_uint32"], state["uinteger"] = (int(x) for x in targets["buffered"][row])
    rng.bit_generator.state = state
    snakes = tuple(
        Snake(targets["stamps"][row, s].astype(np.int64), targets["starts"][row, s].astype(np.int64)) for s in (0, 1)
    )
    pair = Pair(
        snakes,
        targets["tails"][row].astype(np.int64),
        targets["heads"][row].astype(np.int64),
        int(targets["tried"][row]),
    )
    label = int(labels_for(resolution, difficulty, split, seed, index, index + 1)[0])
    return finish(resolution, difficulty, rng, label, int(targets["margin"][row]), pair)


def images_from_targets(
    resolution: int, difficulty: int, split: str, start: int, stop: int, seed: int, targets: dict[str, np.ndarray]
) -> np.ndarray:
    """Images start..stop-1 of a split as one (n, H, W) uint8 array, from a targets cache covering them."""
    out = np.empty((stop - start, resolution, resolution), np.uint8)
    for i in range(start, stop):
        out[i - start] = draw_from_targets(resolution, difficulty, split, i, seed, targets, i).image
    return out
