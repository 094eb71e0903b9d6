"""LRA's Pathfinder settings per resolution: the lines `lra_benchmarks/data/pathfinder.py` customises in Linsley
et al.'s `snakes2_wrapper.py`, the wrapper's values for the rest (3 draws per paddle, 5 tries per distractor, no
single-paddle distractors). The wrapper ran under Python 2, so `contour_length / 3` and `N / distractor_length` are
integer divisions (the release's metadata rows say distractor length 4 for contour length 14)."""

from __future__ import annotations

from dataclasses import dataclass

DIFFICULTIES = (6, 9, 14)  # LRA's "easy" (curv_baseline), "intermediate", "hard" (contour length in paddles)
FOREGROUND = 64  # a pixel of value >= 64 counts as drawn (statistics and tests)
PADDLE_TRIES = 3  # max_paddle_retrial = 2: draws per paddle before a snake fails (the first plus two)
DISTRACTOR_TRIES = 5  # max_distractor_contour_retrial = 4: tries per distractor snake
SEED_TRIES = 3  # seed_snake / initialize_two_seeds: orientations tried while the seed's head or pivot is outside


@dataclass(frozen=True)
class Spec:
    """The generator's settings at one resolution."""

    resolution: int
    padding: int  # border band marked occupied in the mask
    margins: tuple[int, ...]  # paddle_margin_list: one margin drawn per image
    seed_distance: int  # the two target tails sit this far apart
    marker_radius: float
    paddle_length: int
    thickness: float
    continuity: float  # turn penalty: weight cos(min(continuity * turn, 90 deg))^2
    distractor_budget: int  # num_distractor_snakes = distractor_budget // distractor_length
    snake_contrast: float  # snake_contrast_list[0]: the distractors' contrast, and the targets' with paddle_contrast
    paddle_contrast: float = 1.0  # paddle_contrast_list[0]
    antialias: int = 2  # antialias_scale

    @property
    def target_contrast(self) -> float:
        return self.paddle_contrast * self.snake_contrast

    @property
    def distractor_contrast(self) -> float:
        return self.snake_contrast

    def distractor_length(self, contour_length: int) -> int:
        return contour_length // 3

    def num_distractors(self, contour_length: int) -> int:
        return self.distractor_budget // self.distractor_length(contour_length)


# fmt: off
SPECS: dict[int, Spec] = {
    32: Spec(resolution=32, padding=1, margins=(1,), seed_distance=7, marker_radius=1.5, paddle_length=2,
             thickness=0.5, continuity=1.0, distractor_budget=20, snake_contrast=2.0, paddle_contrast=0.75),
    64: Spec(resolution=64, padding=1, margins=(1,), seed_distance=12, marker_radius=2.5, paddle_length=5,
             thickness=1.0, continuity=1.8, distractor_budget=22, snake_contrast=0.8),
    128: Spec(resolution=128, padding=1, margins=(2, 3), seed_distance=20, marker_radius=3.0, paddle_length=5,
              thickness=1.5, continuity=1.8, distractor_budget=35, snake_contrast=0.9),
    256: Spec(resolution=256, padding=22, margins=(3,), seed_distance=27, marker_radius=5.0, paddle_length=5,
              thickness=2.0, continuity=1.8, distractor_budget=30, snake_contrast=1.0),
}
# fmt: on


def check_settings(resolution: int, difficulty: int) -> Spec:
    """The spec for `resolution`, or a clear error for an unknown resolution or difficulty."""
    if resolution not in SPECS:
        raise ValueError(f"no Pathfinder settings for {resolution} px; choose one of {sorted(SPECS)}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"difficulty (contour length) must be one of {DIFFICULTIES}, got {difficulty!r}")
    return SPECS[resolution]
