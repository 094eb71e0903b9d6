"""The leaderboard's table model, rendered to Markdown here and to HTML by `lra.results.page`.

A table is a title, a header, rows of cells and notes. A cell carries plain text (no Markdown marks) plus what the
renderers need: whether it is a name (shown as code), a number (right-aligned), aggregated from fewer seeds than a
reliable spread needs, and the records behind it. Both renderers read the same model, so the HTML page and the
Markdown file show the same figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

FEW_MARK = "†"  # appended to a cell aggregated over fewer than MIN_SEEDS seeds
NO_DROPOUT_MARK = "‡"  # appended to a cell whose runs asked for attention dropout that the backend does not apply
NO_DROPOUT_NOTE = (
    f"{NO_DROPOUT_MARK}: attention dropout not applied. The config asks for it (model.attention_dropout), but the"
    " backend applies none, as its reference code does (the records' attention_dropout_applied: false; see the"
    " backend's docstring)."
)
SECTIONS = {
    "accuracy": "Accuracy",
    "time": "Time to accuracy and learning curves",
    "speed": "Training speed and memory",
    "kernels": "Attention kernels",
    "numerics": "Numerics",
    "records": "Records",
}
_NUMBER = re.compile(r"^[-+(]?[\d.,]+")
_CODE = re.compile(r"^`([^`]+)`$")


@dataclass(frozen=True)
class Ref:
    """One record file behind a cell: a short label (the seed, e.g. `s0`) and the file's path."""

    label: str
    path: Path


@dataclass(frozen=True)
class Cell:
    """One table cell: `text` is what both renderers show; the flags only style it."""

    text: str
    code: bool = False
    num: bool = False
    few: bool = False
    refs: tuple[Ref, ...] = ()
    link: bool = False  # the text itself links to refs[0] (a record file's name)


def skips_dropout(records) -> bool:
    """Whether any of `records` asked for attention dropout that its backend did not apply."""
    return any(r.get("attention_dropout_applied") is False for r in records)


def dropout_marked(text: str, records) -> str:
    """`text` with NO_DROPOUT_MARK appended when `records` skipped the attention dropout they asked for."""
    return f"{text} {NO_DROPOUT_MARK}" if skips_dropout(records) else text


class Row(list):
    """A list of cells; `published` marks a paper's figures (shown apart from measured rows)."""

    def __init__(self, cells=(), published: bool = False) -> None:
        super().__init__(cells)
        self.published = published


@dataclass
class Table:
    """A titled table in one page section (a key of SECTIONS). Rows are `Row`s or plain lists of cells."""

    title: str
    header: list[str]
    rows: list[list]
    notes: list[str] = field(default_factory=list)
    section: str = "accuracy"

    def cells(self) -> list[list[Cell]]:
        """Every row as `Cell`s (plain strings converted by `as_cell`)."""
        return [[as_cell(c) for c in row] for row in self.rows]

    def markdown(self, link: Callable[[Path], str] | None = None) -> str:
        """The table as GitHub Markdown; `link(path)` gives the href of a record file for cells with `link` set."""
        lines = [f"### {md_escape(self.title)}", ""]
        lines += [*map(md_note, self.notes), ""] if self.notes else []
        lines.append("| " + " | ".join(md_escape(h) for h in self.header) + " |")
        align = ["---:" if _numeric_column(self, i) else "---" for i in range(len(self.header))]
        lines.append("|" + "|".join(align) + "|")
        for row, cells in zip(self.rows, self.cells()):
            texts = [_md_cell(c, link) for c in cells]
            if getattr(row, "published", False):
                texts[0] += " *(published)*"
            lines.append("| " + " | ".join(texts) + " |")
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Figure:
    """A plot file shown in one page section."""

    path: Path
    caption: str
    section: str


@dataclass
class Page:
    """What both renderers show: the stores read (label, shown path), the tables and the figures, in sections."""

    stores: list[tuple[str, str]]
    tables: list[Table]
    figures: list[Figure]
    plots_note: str | None = None  # why there are no plots (the `plots` extra is missing), if so

    def sections(self) -> list[tuple[str, str, list[Table], list[Figure]]]:
        """(key, heading, tables, figures) of each non-empty section, in SECTIONS order."""
        out = []
        for key, heading in SECTIONS.items():
            tables = [t for t in self.tables if t.section == key]
            figures = [f for f in self.figures if f.section == key]
            if tables or figures:
                out.append((key, heading, tables, figures))
        return out


def as_cell(value: Cell | str) -> Cell:
    """A `Cell` as is; a string as plain text, `` `name` `` as a code name, a leading number as a number."""
    if isinstance(value, Cell):
        return value
    text = str(value)
    code = _CODE.match(text)
    if code:
        return Cell(code.group(1), code=True)
    return Cell(text, num=bool(_NUMBER.match(text)))


def name(text: str) -> Cell:
    """A backend (or other identifier) cell, shown as code."""
    return Cell(text, code=True)


def num(text: str, refs: tuple[Ref, ...] = (), few: bool = False) -> Cell:
    """A right-aligned figure, optionally with the records behind it."""
    return Cell(text, num=True, refs=refs, few=few)


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell (pipes, emphasis and code marks escaped)."""
    return re.sub(r"([|*`])", r"\\\1", text)


def md_note(text: str) -> str:
    """A note as Markdown: its `code` spans kept, emphasis marks elsewhere escaped (4*B*H stays 4*B*H)."""
    parts = re.split(r"(`[^`]+`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"([*\\])", r"\\\1", p) for p in parts)


def _md_cell(cell: Cell, link: Callable[[Path], str] | None) -> str:
    text = f"`{cell.text}`" if cell.code else md_escape(cell.text)
    if cell.link and cell.refs and link is not None:
        return f"[{text}]({link(cell.refs[0].path)})"
    return text


def _numeric_column(table: Table, index: int) -> bool:
    """Whether every non-empty cell of column `index` is a number (the column is right-aligned)."""
    column = [row[index] for row in table.cells() if index < len(row) and row[index].text not in ("-", "")]
    return bool(column) and all(c.num for c in column)
