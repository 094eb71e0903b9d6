"""Published accuracy rows shown beside measured ones (marked as published), as the papers report them.

LRA: Tay et al. 2020, "Long Range Arena", Table 1 (test accuracy, %; FAIL = not above chance on Path-X).
FlashAttention: Dao et al. 2022, Table 3 (LRA accuracy and training speed-up over their Transformer) and Table 6
(Path-X, Path-256). Each paper's rows are compared with runs of the recipe it trained with: the LRA paper's with the
LRA configs (preset `default`), the FlashAttention paper's with its recipe (preset `fa-paper`).
"""

from __future__ import annotations

from dataclasses import dataclass

LRA_TASKS = ("listops", "text", "retrieval", "image", "pathfinder")

# backend-like name -> {task: accuracy %}; None = FAIL / not run
LRA_PAPER: dict[str, dict[str, float | None]] = {
    "Transformer": dict(listops=36.37, text=64.27, retrieval=57.46, image=42.44, pathfinder=71.40, **{"path-x": None}),
    "Local Attention": dict(listops=15.82, text=52.98, retrieval=53.39, image=41.46, pathfinder=66.63),
    "Sparse Trans.": dict(listops=17.07, text=63.58, retrieval=59.59, image=44.24, pathfinder=71.71),
    "Longformer": dict(listops=35.63, text=62.85, retrieval=56.89, image=42.22, pathfinder=69.71),
    "Linformer": dict(listops=35.70, text=53.94, retrieval=52.27, image=38.56, pathfinder=76.34),
    "Reformer": dict(listops=37.27, text=56.10, retrieval=53.40, image=38.07, pathfinder=68.50),
    "Sinkhorn Trans.": dict(listops=33.67, text=61.20, retrieval=53.83, image=41.23, pathfinder=67.45),
    "Synthesizer": dict(listops=36.99, text=61.68, retrieval=54.67, image=41.61, pathfinder=69.45),
    "BigBird": dict(listops=36.05, text=64.02, retrieval=59.29, image=40.83, pathfinder=74.87),
    "Linear Trans.": dict(listops=16.13, text=65.90, retrieval=53.09, image=42.34, pathfinder=75.30),
    "Performer": dict(listops=18.01, text=65.40, retrieval=53.82, image=42.77, pathfinder=77.05),
}

FLASH_PAPER: dict[str, dict[str, float | None]] = {
    "Transformer": dict(listops=36.0, text=63.6, retrieval=81.6, image=42.3, pathfinder=72.7),
    "FlashAttention": dict(listops=37.6, text=63.9, retrieval=81.4, image=43.5, pathfinder=72.7, **{"path-x": 61.4}),
    "Block-sparse FlashAttention": dict(
        listops=37.0, text=63.0, retrieval=81.3, image=43.6, pathfinder=73.3, **{"path-x": 56.0, "path-256": 63.1}
    ),
    "Linformer": dict(listops=35.6, text=55.9, retrieval=77.7, image=37.8, pathfinder=67.6),
    "Linear Attention": dict(listops=38.8, text=63.2, retrieval=80.7, image=42.6, pathfinder=72.5),
    "Performer": dict(listops=36.8, text=63.6, retrieval=82.2, image=42.1, pathfinder=69.9),
    "Local Attention": dict(listops=36.1, text=60.2, retrieval=76.7, image=40.6, pathfinder=66.6),
    "Reformer": dict(listops=36.5, text=63.8, retrieval=78.5, image=39.6, pathfinder=69.4),
    "Smyrf": dict(listops=36.1, text=64.1, retrieval=79.0, image=39.6, pathfinder=70.5),
}

# FlashAttention paper Table 3: training speed-up over the Transformer baseline, averaged over the LRA tasks (A100)
FLASH_PAPER_SPEEDUP: dict[str, float] = {
    "FlashAttention": 2.4,
    "Block-sparse FlashAttention": 2.8,
    "Linformer": 2.5,
    "Linear Attention": 2.3,
    "Performer": 1.8,
    "Local Attention": 1.7,
    "Reformer": 1.3,
    "Smyrf": 1.7,
}


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
            **{"linformer": "Linformer", "linear": "Linear Attention", "performer": "Performer"},
            **{"local": "Local Attention", "reformer": "Reformer", "smyrf": "Smyrf"},
        },
    ),
)
SPEEDUP_PRESET = "fa-paper"  # FLASH_PAPER_SPEEDUP was measured on the FlashAttention paper's recipe


def paper_for(preset: str) -> Paper | None:
    """The paper whose rows were trained with `preset`'s recipe."""
    return next((p for p in PAPERS if p.preset == preset), None)
