"""Pathfinder, Path-64, Path-X and Path-256: are the two circles connected by a dashed snake? (2 classes)

Images are drawn as Linsley et al.'s generator draws them with LRA's settings per resolution (tasks/_pathfinder/, a
fast step-by-step rewrite), deterministic in (resolution, difficulty, split, index, seed), or read from LRA's release
(`source`). Tokens are pixel + 1 (0 is padding, so a black pixel is not), one per pixel in row-major order, vocab 257.

Data settings (the config's `data:` keys):
- difficulty: contour length in paddles, 14 (LRA's "hard", the benchmark), 9 or 6.
- num_train / num_val / num_test: LRA has 200k images per difficulty, split 80/10/10 = 160k / 20k / 20k (its input
  pipeline takes [:80%], [80%:90%], [90%:] of the release). With `source` they cap the release's splits.
- seed: generator seed.
- generator: the generator's version, 2 (issue 32: the original's algorithm). Part of the config hash and the cache
  name, so runs on other versions' images stay apart. Records from before the key existed were drawn by version 1.
- cache: true stores each split once as a uint8 .npy file (memory-mapped at training time); false draws images on the
  fly when a batch asks for them (no disk; for Path-256, 160k images are 10 GiB).
- source: a folder in LRA's release layout to read instead of generating. Its images are imported once into a cache
  that records the release folder it came from (tasks/_cache.py); a run whose release differs imports it again.
- black_padding: feed the raw grey levels, as LRA's input pipeline and Xiong et al.'s Nystromformer code did, so that
  black pixels (about two thirds of an image) are padding: left out of attention, and with `model.pool: mean_all` out of
  the pooled mean as that code's model does. Off by default (the project's rule: a black pixel is a pixel); on, it
  needs a backend that takes any key mask (naive, sdpa_*), and the cache is the same either way.
- downsample: average-pool the image by this factor before tokenising (1 = off). Only for CPU smoke runs of the long
  tasks: Path-X at downsample 4 is 32x32 tokens of Path-X's snakes. Not a benchmark setting.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from lra.core.errors import ConfigError, DataCorruptError
from lra.core.progress import console, make_progress
from tasks._cache import TaskCache, describe_source, source_fingerprint
from tasks._pathfinder import release
from tasks._pathfinder.draw import GENERATOR_VERSION, check_generator, check_settings, labels_for
from tasks._pathfinder.settings import SPECS
from tasks._pathfinder.store import GeneratedStore, auto_workers
from tasks._pathfinder.views import LazyImages, PixelTokens
from tasks.base import SPLITS, Split, Task
from tasks.registry import register_task

VOCAB_SIZE = 257  # 256 grey levels + padding


class PathfinderTask(Task):
    """Shared implementation; each registered subclass below fixes the resolution."""

    resolution: ClassVar[int] = 32
    num_classes = 2
    pose_invariant = True  # joined or not, whatever the image's flips and quarter turns

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int | None = None,
        difficulty: int = 14,
        num_train: int = 160_000,
        num_val: int = 20_000,
        num_test: int = 20_000,
        seed: int = 0,
        cache: bool = True,
        source: str | os.PathLike[str] | None = None,
        downsample: int = 1,
        generator: int = GENERATOR_VERSION,
        black_padding: bool = False,
    ) -> None:
        if not isinstance(black_padding, bool):
            raise ValueError(f"data setting black_padding must be true or false, got {black_padding!r}")
        self.black_padding = black_padding
        res = self.resolution
        check_settings(res, int(difficulty))
        self.generator = check_generator(int(generator))
        self.difficulty = int(difficulty)
        self.downsample = int(downsample)
        if self.downsample < 1 or res % self.downsample:
            raise ValueError(f"{self.name}: downsample must divide {res}, got {downsample}")
        side = res // self.downsample
        if max_length is not None and int(max_length) != side * side:
            raise ValueError(
                f"{self.name}: images are {side}x{side} = {side * side} tokens, so max_length must be {side * side} "
                f"(or left out), got {max_length}"
            )
        super().__init__(data_dir, side * side)
        self.counts = {"train": int(num_train), "val": int(num_val), "test": int(num_test)}
        for split, n in self.counts.items():
            if n < 0:
                raise ValueError(f"{self.name}: num_{split} must be >= 0, got {n}")
        self.seed = int(seed)
        self.cache = bool(cache)
        self.source = Path(source).expanduser() if source else None
        self.store = GeneratedStore(self.data_dir, self.name, res, self.difficulty, self.seed)
        self._release_checked = False

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    @property
    def side(self) -> int:
        """Image side after downsampling (the model's 2-D grid is side x side)."""
        return self.resolution // self.downsample

    @classmethod
    def pads_inside(cls, data: dict[str, Any]) -> bool:
        return bool(data.get("black_padding"))

    def release_cache(self) -> TaskCache:
        """Where images imported from `source` live (one import per resolution and difficulty)."""
        settings = {"release": True, "resolution": self.resolution, "difficulty": self.difficulty}
        return TaskCache(self.data_dir, self.name, settings, name=f"release-{self.resolution}px-d{self.difficulty}")

    # ---- loading
    def load(self, split: str) -> Split:
        """Images of `split` as tokens: from the release import, the cache (drawn first when missing) or on the fly."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; {self.name} has {', '.join(SPLITS)}")
        n = self.counts[split]
        if self.source is not None:
            images, labels = self._release_split(split)
        elif not self.cache:
            images = LazyImages(self.resolution, self.difficulty, split, self.seed, 0, n)
            labels = labels_for(self.resolution, self.difficulty, split, self.seed, 0, n)
        else:
            found = self.store.open(split, n)
            if found is None:
                self._generate({split: n}, auto_workers(n, self.resolution))
                found = self.store.open(split, n)
            if found is None:
                raise DataCorruptError(f"{self.store.path}: {split} images were generated but cannot be read back")
            images, labels = found
        return Split(PixelTokens(images, self.downsample, offset=0 if self.black_padding else 1), labels)

    def _generate(self, counts: dict[str, int], workers: int) -> None:
        what = " + ".join(f"{n} {split}" for split, n in counts.items())
        self.store.generate(counts, workers=workers, description=f"drawing {self.name} ({what})")

    # ---- preparing
    def prepare(self, source: str | os.PathLike[str] | None = None, workers: int = 1) -> None:
        """Draw every split into the cache (missing ones only), or import LRA's release from `source`."""
        if source is not None:
            self.source = Path(source).expanduser()
        if self.source is not None:
            src = release.find_release(self.source, self.resolution, self.difficulty)
            self._import_release(src, source_fingerprint(str(src)), workers)
            return
        with self.store.drawing():  # another process drawing these images: wait, then take what it drew
            missing = {s: n for s, n in self.counts.items() if n > 0 and self.store.covering(s, n) is None}
            if missing:
                self._generate(missing, workers)

    def prepare_targets(self, workers: int = 1) -> None:
        """Draw every split's target pairs into targets caches (missing ones only): the costly part of the images,
        small enough to carry to a machine that then draws the images quickly (tasks/_pathfinder/targets.py)."""
        if self.source is not None:
            raise ConfigError(f"{self.name} reads LRA's release ({self.source}): it has no target pairs to draw")
        with self.store.drawing():
            counts = self.counts.items()
            missing = {s: n for s, n in counts if n > 0 and self.store.covering(s, n, targets=True) is None}
            if missing:
                what = " + ".join(f"{n} {split}" for split, n in missing.items())
                description = f"drawing {self.name}'s target pairs ({what})"
                self.store.generate_targets(missing, workers, description=description)

    def _release_split(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        cache = self._checked_release()
        try:
            images, labels = cache.array("images"), cache.array("labels")
            lo, hi = cache.meta()["splits"][split]
        except (OSError, ValueError, KeyError) as err:
            raise DataCorruptError(
                f"{cache.path}: unreadable import ({err}); delete the folder to import again"
            ) from None
        hi = min(hi, lo + self.counts[split])
        return images[lo:hi], np.asarray(labels[lo:hi], dtype=np.int64)

    def _checked_release(self) -> TaskCache:
        """The release import, made (again) when there is none or it came from a different release folder."""
        cache = self.release_cache()
        if not self._release_checked:
            src = release.find_release(self.source, self.resolution, self.difficulty)
            fingerprint = source_fingerprint(str(src))
            why = cache.stale_reason(fingerprint) if cache.exists() else "there is no import yet"
            if why is not None:
                if cache.exists():
                    console.print(
                        f"{self.name}: release {src}: {why}; importing it again", highlight=False, soft_wrap=True
                    )
                self._import_release(src, fingerprint, auto_workers(1000, self.resolution))
            self._release_checked = True
        return cache

    def _import_release(self, src: Path, fingerprint: dict[str, Any], workers: int) -> None:
        """Decode the release's PNGs into one uint8 array (metadata order) with its labels and split bounds."""
        items, empty = release.list_images(src)
        n = len(items)
        bounds = release.split_bounds(n)
        res = self.resolution
        with self.release_cache().writer() as w, make_progress() as progress:
            w.save("labels", np.array([label for _, label, _ in items], np.int64))
            out = w.array("images", (n, res, res), np.uint8)
            bar = progress.add_task(f"importing {self.name} release", total=n)
            release.decode_into(
                out, [(str(p), where) for p, _, where in items], res, workers, lambda k: progress.advance(bar, k)
            )
            out.flush()
            del out
            w.meta.update(
                source=fingerprint,
                images=n,
                empty_skipped=empty,
                splits=bounds,
                counts={s: b - a for s, (a, b) in bounds.items()},
            )
        self._release_checked = False  # a later load checks `source` against what was just imported

    # ---- reporting
    def settings(self) -> dict[str, Any]:
        """The generator's settings at this resolution and difficulty."""
        spec = SPECS[self.resolution]
        return {
            "resolution": self.resolution,
            "difficulty": self.difficulty,
            "seed": self.seed,
            "generator_version": self.generator,
            "margins": list(spec.margins),
            "padding": spec.padding,
            "seed_distance": spec.seed_distance,
            "marker_radius": spec.marker_radius,
            "paddle_length": spec.paddle_length,
            "thickness": spec.thickness,
            "continuity": spec.continuity,
            "target_contrast": spec.target_contrast,
            "distractor_contrast": spec.distractor_contrast,
            "distractor_length": spec.distractor_length(self.difficulty),
            "distractors_tried": spec.num_distractors(self.difficulty),
        }

    def cache_options(self) -> dict[str, Any]:
        if self.source is not None:
            return {"difficulty": self.difficulty}
        counts = {f"num_{s}": n for s, n in self.counts.items()}
        return {"difficulty": self.difficulty, "seed": self.seed, "generator": self.generator, **counts}

    def info(self) -> dict[str, Any]:
        """Where the images are, whether every split is cached, and how big they are."""
        details: dict[str, Any] = {"seq_len": self.seq_len, "downsample": self.downsample}
        if self.source is not None:
            return self._release_info(details)
        covering = {s: self.store.covering(s, n) for s, n in self.counts.items() if n > 0}
        pairs = {s: self.store.covering(s, n, targets=True) for s, n in self.counts.items() if n > 0}
        details.update(
            generator=self.settings(),
            caches={s: c.path.name if c else None for s, c in covering.items()},
            cached_sizes={s: self.store.sizes(s) for s in SPLITS},
            targets={s: c.path.name for s, c in pairs.items() if c},
        )
        if not self.cache:
            details["note"] = "cache: false, images are drawn on the fly"
        ahead = f"; target pairs drawn ahead: {', '.join(details['targets'])}" if details["targets"] else ""
        return self.info_fields(
            source=f"generated (Pathfinder generator v{self.generator}, seed {self.seed}){ahead}",
            where=self.store.path,
            splits=self.counts,
            size=sum(c.size() for c in covering.values() if c is not None),
            ready=not self.cache or all(c is not None for c in covering.values()),
            details=details,
        )

    def _release_info(self, details: dict[str, Any]) -> dict[str, Any]:
        cache = self.release_cache()
        meta = cache.meta() if cache.exists() else {}
        splits = {s: min(n, self.counts[s]) for s, n in meta.get("counts", {}).items()}
        if meta:
            details.update(built_from=describe_source(meta["source"]), images=meta["images"])
            details["empty_skipped"] = meta["empty_skipped"]
            try:
                src = release.find_release(self.source, self.resolution, self.difficulty)
                details["stale"] = cache.stale_reason(source_fingerprint(str(src)))
            except (DataCorruptError, OSError) as e:  # DataMissingError is an OSError
                details["stale"] = str(e).split("\n")[0]
        return self.info_fields(
            source=str(self.source),
            where=cache.path,
            splits=splits,
            size=cache.size(),
            ready=bool(meta) and details.get("stale") is None,
            details=details,
            prepare_from=str(self.source),
        )


@register_task("pathfinder")
class Pathfinder(PathfinderTask):
    """LRA Pathfinder: 32x32 images (1,024 pixel tokens)."""

    resolution = 32
    description = "LRA Pathfinder: 32x32 images (1,024 pixel tokens)"


@register_task("path-64")
class Path64(PathfinderTask):
    """64x64 Pathfinder images (4,096 pixel tokens): pre-training for the Path-X recipe."""

    resolution = 64
    description = "64x64 Pathfinder images (4,096 pixel tokens): pre-training for the Path-X recipe"


@register_task("path-x")
class PathX(PathfinderTask):
    """LRA Path-X: 128x128 Pathfinder images (16,384 pixel tokens)."""

    resolution = 128
    description = "LRA Path-X: 128x128 Pathfinder images (16,384 pixel tokens)"


@register_task("path-256")
class Path256(PathfinderTask):
    """Path-256: 256x256 Pathfinder images (65,536 pixel tokens)."""

    resolution = 256
    description = "Path-256: 256x256 Pathfinder images (65,536 pixel tokens)"
