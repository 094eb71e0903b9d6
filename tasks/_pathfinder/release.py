"""Reader of LRA's released Pathfinder images (`lra_release/pathfinderN/<difficulty>/`).

Layout: `imgs/<batch>/sample_<i>.png` and `metadata/<batch>.npy`, where each metadata file is text, one row per image
with 11 space-separated fields (subpath, file name, index, label, continuity, contour length, distractor length,
paddle length, thickness, margin, contrasts), e.g. `imgs/0 sample_0.png 0 0 1.8 14 4 5 1.5 3 1`. The folders are
`curv_baseline` (contour length 6), `curv_contour_length_9` and `curv_contour_length_14`. Like LRA's input pipeline,
images are taken in metadata order (batches in numeric order) and split 80% / 10% / 10% into train / val / test, and
empty image files (the release has a few) are skipped. The PNGs are 8-bit grey; Pillow decodes them, and a colour
image is brought to grey with ITU-R 601 luma weights, rounded (as Pillow's `convert("L")` defines it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from lra.core.errors import DataCorruptError, DataMissingError
from lra.core.pools import run_jobs
from tasks._imagefile import decode_image

DIFFICULTY_DIRS = {6: "curv_baseline", 9: "curv_contour_length_9", 14: "curv_contour_length_14"}
SPLIT_SHARES = {"train": (0.0, 0.8), "val": (0.8, 0.9), "test": (0.9, 1.0)}


def find_release(source: str | os.PathLike[str], resolution: int, difficulty: int) -> Path:
    """The difficulty folder inside `source`, which may be that folder, `pathfinderN/`, or the release's root."""
    root = Path(source).expanduser()
    sub = DIFFICULTY_DIRS[difficulty]
    candidates = [root, root / sub, root / f"pathfinder{resolution}" / sub]
    candidates += [root / "lra_release" / f"pathfinder{resolution}" / sub]
    candidates += [root / "lra_release" / "lra_release" / f"pathfinder{resolution}" / sub]
    for c in candidates:
        if (c / "metadata").is_dir():
            if c == root and root.name in DIFFICULTY_DIRS.values() and root.name != sub:
                raise DataMissingError(f"{root} holds difficulty {root.name!r}, but difficulty {difficulty} is {sub!r}")
            return c
    raise DataMissingError(
        f"no Pathfinder {resolution}px release for difficulty {difficulty} under {root}: expected "
        f"{root}/pathfinder{resolution}/{sub}/metadata/*.npy and .../imgs/<batch>/sample_<i>.png (LRA's "
        f"lra_release.gz unpacked). Without it, drop `source` and the images are generated instead."
    )


def read_metadata(path: Path) -> list[tuple[str, str, int, int]]:
    """Rows (subpath, file name, label, row number) of one metadata file (text rows, or a real .npy string array)."""
    raw = path.read_bytes()
    if raw.startswith(b"\x93NUMPY"):
        try:
            table = np.load(path, allow_pickle=False)
        except ValueError as err:
            raise DataCorruptError(f"{path}: unreadable metadata array ({err})") from None
        lines = [" ".join(str(v) for v in row) for row in np.atleast_2d(table)]
    else:
        lines = raw.decode("utf-8", errors="replace").splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 4:
            raise DataCorruptError(f"{path}, row {number}: expected >= 4 space-separated fields, got {line!r}")
        try:
            label = int(float(fields[3]))
        except ValueError:
            raise DataCorruptError(f"{path}, row {number}: label field {fields[3]!r} is not a number") from None
        if label not in (0, 1):
            raise DataCorruptError(f"{path}, row {number}: label must be 0 or 1, got {label}")
        rows.append((fields[0], fields[1], label, number))
    return rows


def list_images(folder: Path) -> tuple[list[tuple[Path, int, str]], int]:
    """(image path, label, where) for every non-empty image in metadata order, and the number of empty files skipped.

    `where` names the metadata file and row, for error messages.
    """
    meta_files = sorted((folder / "metadata").glob("*.npy"), key=lambda p: (not p.stem.isdigit(), _num(p.stem)))
    if not meta_files:
        raise DataMissingError(f"{folder / 'metadata'} holds no .npy metadata files")
    out, empty = [], 0
    for meta in meta_files:
        for sub, name, label, number in read_metadata(meta):
            path = folder / sub / name
            where = f"{meta}, row {number}"
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise DataCorruptError(f"{where} names {path}, which does not exist") from None
            if size == 0:
                empty += 1
                continue
            out.append((path, label, where))
    return out, empty


def _num(stem: str) -> int | str:
    return int(stem) if stem.isdigit() else stem


def split_bounds(n: int) -> dict[str, tuple[int, int]]:
    """LRA's 80/10/10 split of n images, as [start, stop) per split."""
    return {s: (int(round(a * n)), int(round(b * n))) for s, (a, b) in SPLIT_SHARES.items()}


def read_grey(path: str | os.PathLike[str], name: str | None = None) -> np.ndarray:
    """A Pathfinder PNG as a (height, width) uint8 grey array; errors start with `name` (default: the path)."""
    pix = decode_image(path, str(path) if name is None else name)
    if pix.shape[2] == 1:
        return np.ascontiguousarray(pix[:, :, 0])
    grey = pix.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)
    return np.clip(np.floor(grey + 0.5), 0, 255).astype(np.uint8)


def decode_many(items: list[tuple[str, str]], resolution: int) -> np.ndarray:
    """Decode (path, where) images to (n, res, res) uint8; a bad file raises DataCorruptError naming it and `where`."""
    out = np.empty((len(items), resolution, resolution), np.uint8)
    for i, (path, where) in enumerate(items):
        img = read_grey(path, f"{path} (listed in {where})")
        if img.shape != (resolution, resolution):
            raise DataCorruptError(
                f"{path}: image is {img.shape[1]}x{img.shape[0]}, expected {resolution}x{resolution}"
            )
        out[i] = img
    return out


def decode_into(
    out: np.ndarray,
    items: list[tuple[str, str]],
    resolution: int,
    workers: int,
    on_done: Callable[[int], None] = lambda n: None,
) -> None:
    """Decode images into out[i] in chunks, in `workers` spawned processes when > 1."""
    chunk = 512
    starts = list(range(0, len(items), chunk))

    def take(i: int, images: np.ndarray) -> None:
        out[starts[i] : starts[i] + len(images)] = images
        on_done(len(images))

    run_jobs(decode_many, [(items[lo : lo + chunk], resolution) for lo in starts], workers, take)
