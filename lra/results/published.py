"""Published accuracy rows shown beside measured ones (marked as published), as the papers report them.

LRA: Tay et al. 2020, "Long Range Arena", Table 1 (test accuracy, %; FAIL = not above chance on Path-X).
FlashAttention: Dao et al. 2022, Table 3 (LRA accuracy and training speed-up over their Transformer) and Table 6
(Path-X, Path-256). Xiong et al. 2021 ("Nystromformer", arXiv 2102.03902), Table 3: the PyTorch LRA code and settings
that the FlashAttention paper's recipe follows, run by its authors. Each paper's rows are compared with runs of the
recipe it trained with: the LRA paper's with the LRA configs (preset `default`), the FlashAttention paper's and Xiong
et al.'s with that recipe (preset `fa-paper`), and the FlashAttention paper's approximate baselines' rows, tuned per
method (its app. E.3), also with its authors' configs for them (preset `fly`). The figures are in `published.csv`
beside this module (one line per paper and row; paper `lra`, `flash` or `xiong`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

LRA_TASKS = ("listops", "text", "retrieval", "image", "pathfinder")

PUBLISHED_CSV = Path(__file__).with_name("published.csv")


def _read_published(path: Path) -> tuple[dict[str, dict[str, dict[str, float | None]]], dict[str, float]]:
    """The papers' rows as {paper: {row name: {task: accuracy %}}} in file order, and the speed-ups by row name.

    One line per (paper, row): an empty cell is a task the paper does not report (absent from the row), `FAIL` one it
    reports as not above chance (None); `speedup` is filled only where the paper gives one."""
    rows: dict[str, dict[str, dict[str, float | None]]] = {}
    speedups: dict[str, float] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for line in csv.DictReader(f):
            paper, model, speedup = line.pop("paper"), line.pop("model"), line.pop("speedup")
            rows.setdefault(paper, {})[model] = {t: None if v == "FAIL" else float(v) for t, v in line.items() if v}
            if speedup:
                speedups[model] = float(speedup)
    return rows, speedups


_ROWS, _SPEEDUPS = _read_published(PUBLISHED_CSV)
# row name (backend-like) -> {task: accuracy %}; None = FAIL / not run
LRA_PAPER: dict[str, dict[str, float | None]] = _ROWS["lra"]
FLASH_PAPER: dict[str, dict[str, float | None]] = _ROWS["flash"]
XIONG_PAPER: dict[str, dict[str, float | None]] = _ROWS["xiong"]
# FlashAttention paper Table 3: training speed-up over the Transformer baseline, averaged over the LRA tasks (A100)
FLASH_PAPER_SPEEDUP: dict[str, float] = _SPEEDUPS


@dataclass(frozen=True)
class Paper:
    """A paper's accuracy rows and the preset whose recipe they were trained with (the rows are matched to it)."""

    name: str
    cite: str
    preset: str
    rows: dict[str, dict[str, float | None]]
    counterparts: dict[str, str]  # our backend -> the paper's row of the same attention


_EXACT = ("naive", "sdpa_flash", "sdpa_cudnn", "sdpa_mem_efficient", "sdpa_math", "flex", "flash_blockwise")
_EXACT += ("flash_attn",)
# the FlashAttention paper's approximate baselines: our backend -> its row
_BASELINES = {"linformer": "Linformer", "linear": "Linear Attention", "performer": "Performer"}
_BASELINES |= {"local": "Local Attention", "reformer": "Reformer", "smyrf": "Smyrf"}

_XIONG = {"reformer": "Reformer", "linformer": "Linformer", "performer": "Performer", "nystrom": "Nyströmformer"}

PAPERS = (
    Paper(
        "LRA paper",
        "Tay et al. 2020, Table 1",
        "default",
        LRA_PAPER,
        {
            **dict.fromkeys(_EXACT, "Transformer"),
            **{"flash": "Transformer", "local": "Local Attention"},
            **{"sparse_transformer": "Sparse Trans.", "longformer": "Longformer", "linformer": "Linformer"},
            **{"reformer": "Reformer", "sinkhorn": "Sinkhorn Trans.", "synthesizer": "Synthesizer"},
            **{"bigbird": "BigBird", "linear": "Linear Trans.", "performer": "Performer"},
        },
    ),
    Paper(
        "FlashAttention paper",
        "Dao et al. 2022, Tables 3 and 6",
        "fa-paper",
        FLASH_PAPER,
        {
            **dict.fromkeys(_EXACT, "Transformer"),
            **{"flash": "FlashAttention", "block_sparse_flash": "Block-sparse FlashAttention"},
            **_BASELINES,
        },
    ),
    Paper(
        "Nyströmformer paper",
        "Xiong et al. 2021, Table 3: the code and settings this recipe follows, run by its authors",
        "fa-paper",
        XIONG_PAPER,
        {
            **dict.fromkeys((*_EXACT, "flash", "block_sparse_flash"), "Standard (Xiong et al.)"),
            **{b: f"{row} (Xiong et al.)" for b, row in _XIONG.items()},
        },
    ),
    Paper(
        "FlashAttention paper",
        "Dao et al. 2022, Table 3, its approximate baselines (tuned per method, app. E.3; configs: its authors' fly)",
        "fly",
        {row: FLASH_PAPER[row] for row in _BASELINES.values()},
        _BASELINES,
    ),
)
SPEEDUP_PRESET = "fa-paper"  # FLASH_PAPER_SPEEDUP was measured on the FlashAttention paper's recipe


def papers_for(preset: str) -> list[Paper]:
    """The papers whose rows were trained with `preset`'s recipe, the one it is named for first."""
    return [p for p in PAPERS if p.preset == preset]


def paper_for(preset: str) -> Paper | None:
    """The paper `preset`'s recipe is named for (the first of `papers_for`)."""
    return next(iter(papers_for(preset)), None)
