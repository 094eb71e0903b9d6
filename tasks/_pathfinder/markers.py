"""How much of a generated Pathfinder task the two markers' places alone tell.

Three classifiers see only where the two circles are, never a path: the label's rate per distance between them, per
(|dy|, |dx|) cell, and a small MLP on both centres and their offset. Fitted on training images and scored on test
images, their accuracy is what a model could reach without tracing anything: on this generator (and on the original
one) the MLP reaches 66-78% at 32, 64 and 256 px and 56% at 128 px (docs/path_x_campaign.md, "What round 8's model
reads"). `lra data markers TASK` prints it and stores it as a record; the leaderboard lists it under the accuracy
tables beside the majority class, so that a Pathfinder figure is read against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from lra.core.pools import run_jobs
from tasks._pathfinder.draw import draw
from tasks._pathfinder.store import GeneratedStore, open_targets
from tasks._pathfinder.targets import draw_from_targets

RULES = ("distance", "offset", "mlp")  # the classifiers, weakest reading first
CHUNK = 500  # images per worker job


@dataclass(frozen=True)
class Sample:
    """The labels (n,) and marker centres (n, 2, 2: (y, x) of each) of the first n images of a split."""

    labels: np.ndarray
    centres: np.ndarray


def _markers(
    resolution: int, difficulty: int, split: str, seed: int, start: int, stop: int, targets: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """Worker: labels and marker centres of images start..stop-1 (from the targets cache at `targets`, if given)."""
    arrays = open_targets(Path(targets)) if targets else None
    found = [
        draw(resolution, difficulty, split, i, seed)
        if arrays is None
        else draw_from_targets(resolution, difficulty, split, i, seed, arrays, i)
        for i in range(start, stop)
    ]
    return np.array([d.label for d in found], np.int64), np.array([d.markers for d in found], np.int64)


def sample(store: GeneratedStore, split: str, n: int, workers: int = 1) -> Sample:
    """Labels and marker centres of images 0..n-1 of `split`, drawn as `lra data prepare` draws them (from the
    store's target pairs where a checked cache covers them: several times faster)."""
    if n == 0:
        return Sample(np.zeros(0, np.int64), np.zeros((0, 2, 2), np.int64))
    cache = store.usable_targets(split, n)
    targets = None if cache is None else str(cache.path)
    jobs = [
        (store.resolution, store.difficulty, split, store.seed, a, min(n, a + CHUNK), targets)
        for a in range(0, n, CHUNK)
    ]
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    run_jobs(_markers, jobs, workers, lambda _, result: parts.append(result), ordered=True)
    return Sample(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def unordered(centres: np.ndarray) -> np.ndarray:
    """Centres (n, 2, 2) with the two of each image in reading order (row, then column): a model sees two alike
    circles, not which one the generator put on a tail, so the classifiers must not be told either."""
    m = np.asarray(centres)
    first = (m[:, 0, 0] < m[:, 1, 0]) | ((m[:, 0, 0] == m[:, 1, 0]) & (m[:, 0, 1] <= m[:, 1, 1]))
    return np.where(first[:, None, None], m, m[:, ::-1]).astype(float)


def rate_rule(train_keys: np.ndarray, train_labels: np.ndarray, test_keys: np.ndarray) -> np.ndarray:
    """Label 1 where the training images of the same key were mostly positive (add-one smoothed; an unseen key: 0)."""
    size = int(max(train_keys.max(initial=0), test_keys.max(initial=0))) + 1
    rate = (np.bincount(train_keys, train_labels, size) + 1) / (np.bincount(train_keys, None, size) + 2)
    return (rate > 0.5)[test_keys].astype(np.int64)


def mlp_rule(resolution: int, train: Sample, test_centres: np.ndarray, seed: int = 0) -> np.ndarray:
    """Labels of the test images from a small MLP fitted (60 epochs, Adam) on the training images' centres and their
    offset, scaled by the resolution."""

    def feats(m: np.ndarray) -> torch.Tensor:
        m = unordered(m)
        d = m[:, 0] - m[:, 1]
        x = np.concatenate([m.reshape(len(m), 4), np.abs(d), np.hypot(d[:, 0], d[:, 1])[:, None]], 1) / resolution
        return torch.tensor(x, dtype=torch.float32)

    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Linear(7, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 128),
            torch.nn.ReLU(),
            torch.nn.Linear(128, 2),
        )
    x, y = feats(train.centres), torch.as_tensor(train.labels, dtype=torch.long)
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    for _ in range(60):
        for batch in torch.randperm(len(x), generator=gen).split(512):
            loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return net(feats(test_centres)).argmax(1).numpy()


def accuracies(resolution: int, train: Sample, test: Sample, seed: int = 0) -> dict[str, float]:
    """Test accuracy of each markers-only classifier (RULES), fitted on `train`."""
    tr, te = unordered(train.centres), unordered(test.centres)
    width, cell = max(1, resolution // 64), max(1, resolution // 32)  # distance bins of `width` px, cells of `cell`
    dist = [(np.hypot(*(m[:, 0] - m[:, 1]).T) / width).astype(np.int64) for m in (tr, te)]
    cells = [(np.abs(m[:, 0] - m[:, 1]) // cell).astype(np.int64) @ np.array([1000, 1]) for m in (tr, te)]
    guesses = {
        "distance": rate_rule(dist[0], train.labels, dist[1]),
        "offset": rate_rule(cells[0], train.labels, cells[1]),
        "mlp": mlp_rule(resolution, train, test.centres, seed=seed),
    }
    return {rule: float(np.mean(guesses[rule] == test.labels)) for rule in RULES}
