"""How much of a generated Pathfinder task the two markers' places alone tell: a diagnostic, outside the suite.

    python scripts/markers_baseline.py RES [N_TRAIN N_TEST]     # RES: 32, 64, 128 or 256; run in the repository root

Draws the labels and marker centres of the first N_TRAIN training and N_TEST test images (data seed 0, contour 14,
as the curriculum preset; from the target pairs in .device/data64, data, data256 where they are, so Path-X's and
Path-256's take ~1.5 minutes on two cores) and fits three markers-only classifiers on the training images: the label's
rate per distance between the markers, per (|dy|, |dx|) cell, and a small MLP on both centres and their offset. Their
test accuracy is what a model could reach without tracing a single path (docs/path_x_campaign.md, session 17).
"""

from __future__ import annotations

import sys
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tasks._pathfinder.draw import draw  # noqa: E402
from tasks._pathfinder.targets import draw_from_targets, fields  # noqa: E402

PAIRS = {64: ".device/data64/path-64", 128: ".device/data/path-x", 256: ".device/data256/path-256"}
SPLIT_SIZE = {"train": 160000, "test": 20000}
_pairs: dict[tuple[int, str], dict[str, np.ndarray]] = {}


def markers(job: tuple[int, str, int]) -> tuple[int, tuple]:
    """(label, marker centres) of one image, from its carried target pair where there is one."""
    res, split, i = job
    folder = Path(PAIRS.get(res, "-")) / f"{res}px-d14-seed0-v2" / f"targets-{split}-{SPLIT_SIZE[split]}"
    if not folder.is_dir():
        d = draw(res, 14, split, i, 0)
        return d.label, d.markers
    if (res, split) not in _pairs:
        _pairs[res, split] = {f: np.load(folder / f"{f}.npy", mmap_mode="r") for f in fields(14)}
    d = draw_from_targets(res, 14, split, i, 0, _pairs[res, split], i)
    return d.label, d.markers


def unordered(m: np.ndarray) -> np.ndarray:
    """Marker centres (n, 2, 2) with the two of each image in reading order (row, then column): a model sees two
    alike circles, not which one the generator put on a tail, so the classifiers must not be told either."""
    first = (m[:, 0, 0] < m[:, 1, 0]) | ((m[:, 0, 0] == m[:, 1, 0]) & (m[:, 0, 1] <= m[:, 1, 1]))
    return np.where(first[:, None, None], m, m[:, ::-1]).astype(float)


def rate_rule(train_keys: np.ndarray, train_labels: np.ndarray, test_keys: np.ndarray) -> np.ndarray:
    """Label 1 where the training images of the same key were mostly positive (add-one smoothed)."""
    size = max(train_keys.max(), test_keys.max()) + 1
    rate = (np.bincount(train_keys, train_labels, size) + 1) / (np.bincount(train_keys, None, size) + 2)
    return (rate > 0.5)[test_keys].astype(int)


def mlp_rule(res: int, train_m: np.ndarray, train_labels: np.ndarray, test_m: np.ndarray) -> np.ndarray:
    """Labels of the test images from a small MLP fitted on the training images' centres and their offset."""

    def feats(m: np.ndarray) -> torch.Tensor:
        d = m[:, 0] - m[:, 1]
        x = np.concatenate([m.reshape(len(m), 4), np.abs(d), np.hypot(d[:, 0], d[:, 1])[:, None]], 1) / res
        return torch.tensor(x, dtype=torch.float32)

    torch.manual_seed(0)
    x, y = feats(train_m), torch.tensor(train_labels)
    net = torch.nn.Sequential(torch.nn.Linear(7, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, 2))  # fmt: skip
    opt = torch.optim.Adam(net.parameters(), 3e-3)
    for _ in range(60):
        for batch in torch.randperm(len(x)).split(512):
            loss = torch.nn.functional.cross_entropy(net(x[batch]), y[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return net(feats(test_m)).argmax(1).numpy()


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("32", "64", "128", "256"):
        sys.exit("usage: python scripts/markers_baseline.py RES [N_TRAIN N_TEST]  (RES: 32, 64, 128 or 256)")
    res = int(argv[0])
    n_train, n_test = (int(a) for a in argv[1:3]) if len(argv) >= 3 else (40000, 20000)
    with Pool() as pool:
        train = pool.map(markers, [(res, "train", i) for i in range(n_train)], chunksize=64)
        test = pool.map(markers, [(res, "test", i) for i in range(n_test)], chunksize=64)
    (tr_l, tr_m), (te_l, te_m) = ((np.array(a) for a in zip(*s)) for s in (train, test))
    tr_m, te_m = unordered(tr_m), unordered(te_m)
    dist = [np.hypot(*(m[:, 0] - m[:, 1]).T) for m in (tr_m, te_m)]
    width, cell = max(1, res // 64), max(1, res // 32)
    cells = [(np.abs(m[:, 0] - m[:, 1]) // cell).astype(int) @ np.array([1000, 1]) for m in (tr_m, te_m)]
    rules = {
        "distance": rate_rule((dist[0] / width).astype(int), tr_l, (dist[1] / width).astype(int)),
        "(|dy|, |dx|)": rate_rule(cells[0], tr_l, cells[1]),
        "MLP on both centres": mlp_rule(res, tr_m, tr_l, te_m),
    }
    majority = max(te_l.mean(), 1 - te_l.mean())
    print(
        f"{res} px, {n_train:,} training and {n_test:,} test images; majority class {100 * majority:.1f}%, one "
        f"standard error {100 * np.sqrt(0.25 / n_test):.2f} points"
    )
    for name, guess in rules.items():
        print(f"  markers only, {name}: {100 * np.mean(guess == te_l):.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
