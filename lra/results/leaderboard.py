"""Turn stored result records into the leaderboard: LEADERBOARD.md and leaderboard.html from one page model, plus
plots with the `plots` extra.

Tables: accuracy per preset (the papers' rows beside the runs of their recipe), runs with other settings, smoke runs,
time to accuracy, training speed-up over `naive` with the geometric mean, peak memory, data-parallel scaling,
attention kernel throughput, numeric deviation, and every record behind them. Measured cells aggregate the seeds of
one config. Output depends only on the records (and where they lie), so regenerating gives the same bytes.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from lra.core.atomic import atomic_open
from lra.core.errors import ConfigError
from lra.results.accuracy import accuracy_tables
from lra.results.aggregate import SEEDS_NOTE, config_key, group_by, incomplete, newest, one_per_seed, seed_of
from lra.results.kernels import attention_tables
from lra.results.numerics_tables import knobs_table, reproduction_table, weights_table
from lra.results.speed import scaling_table, speed_tables
from lra.results.store import default_stores, display_path, load_records, results_dir, store_label
from lra.results.table import Cell, Page, Ref, Row, Table, md_escape, name, num
from lra.results.time_to_accuracy import time_to_accuracy_tables

FILES = {"md": "LEADERBOARD.md", "html": "leaderboard.html"}
PLOTS_MISSING = "Plots need matplotlib (the plots extra): pip install -e '.[plots]', then rerun lra leaderboard."


def numerics_table(records: list[dict[str, Any]]) -> Table | None:
    """Deviation at the longest length of each backend's newest study on N(0,1) inputs (outlier studies aside)."""
    normal = [r for r in records if r["inputs"] == "normal"]
    latest = {k: newest(v) for k, v in group_by(normal, lambda r: (r["backend"], r.get("device"))).items()}
    if not latest:
        return None
    dtypes = ["bf16", "fp16", "fp32"]
    header = ["backend", "device", *[f"{d} max / mean" for d in dtypes], "bf16 control", "bf16 rel. L2", "seq"]
    rows = []
    for (backend, device), rec in sorted(latest.items(), key=lambda kv: tuple(map(str, kv[0]))):
        dev = rec["metrics"]["deviation"]
        cells = []
        for d in dtypes:
            x = dev.get(d)
            cells.append("-" if not x else f"{x['max']:.2e} / {x['mean']:.2e}")
        bf16 = dev.get("bf16") or {}
        ratio = bf16.get("ctrl_ratio")
        cells.append("-" if ratio is None else f"{ratio:.2f}")
        cells.append("-" if bf16.get("rel_l2") is None else f"{bf16['rel_l2']:.2e}")
        rows.append([f"`{backend}`", str(device), *cells, str(rec["metrics"].get("seq", "-"))])
    return Table(
        "Numeric deviation against an fp64 golden attention",
        header,
        rows,
        [
            "max |out - golden| and its mean over elements on N(0,1) inputs, at the longest length of the newest study"
            " (`lra numerics forward`; Golden et al. 2024). The golden is naive attention in fp64 on the same"
            " (rounded) inputs and the same mask. bf16 control (the check FlashAttention's author recommends):"
            " max |backend - naive fp32| / max |naive bf16 - naive fp32|, naive under the same mask; below 1 = closer"
            " to fp32 than naive attention in bf16. Relative L2 ="
            " ||out - golden|| / ||golden||: sparse layouts average fewer keys, so their outputs and absolute"
            " deviations are larger at the same relative error."
        ],
        section="numerics",
    )


def build_tables(records: list[dict[str, Any]]) -> list[Table]:
    """Every leaderboard table the records support, in page order."""
    runs, repeated = one_per_seed([r for r in records if r.get("kind") == "run"])
    bench = [r for r in records if r.get("kind") == "bench_train"]
    tables: list[Table | None] = [
        *accuracy_tables(runs, markers=[r for r in records if r.get("kind") == "markers_baseline"]),
        *time_to_accuracy_tables(runs),
        *speed_tables([r for r in bench if r["world_size"] == 1]),
        scaling_table(bench),
        *attention_tables([r for r in records if r.get("kind") == "bench_attention"]),
        numerics_table([r for r in records if r.get("kind") == "numerics_forward"]),
        reproduction_table(records),
        knobs_table(records),
        weights_table(records),
    ]
    if records:
        tables.append(records_table(records, repeated))
    return [t for t in tables if t is not None]


def records_table(records: list[dict[str, Any]], repeated: list[dict[str, Any]] = ()) -> Table:
    """Every record read, with what identifies the cells it feeds (task, backend, preset, seed, config); `repeated`:
    the run records of a (config, seed) that a newer record replaces."""
    rows = []
    for r in sorted(records, key=lambda r: (r["_store"], r["_file"])):
        m = r.get("metrics", {})
        what = ", ".join(f"{k}={v:.4g}" for k, v in sorted(m.items()) if isinstance(v, (int, float)))[:160]
        seed = seed_of(r)
        rows.append(
            Row([Cell(r["_file"], refs=(Ref("json", Path(r["_path"])),), link=True)]
                + [Cell(str(r.get(k) or "-")) for k in ("kind", "task")] + [name(str(r.get("backend") or "-"))]
                + [Cell(str(r.get("preset") or "-")), num("-" if seed is None else str(seed))]
                + [Cell(str(config_key(r) or "-")[:8]), Cell(r["_store"]), Cell(str(r.get("device") or "-"))]
                + [Cell(str(r.get("git_commit") or "-")[:12]), Cell(what)])
        )  # fmt: skip
    header = ["file", "kind", "task", "backend", "preset", "seed", "config", "store", "device", "commit", "figures"]
    notes = ["Every figure above comes from these files; config = the hash of the resolved config without its seed."]
    if repeated:
        files = ", ".join(sorted(r["_file"] for r in repeated))
        notes.append(f"Not counted: a newer record of the same config and seed replaces {files}.")
    return Table("Records", header, rows, notes, section="records")


def markdown(page: Page, link, with_html: bool) -> str:
    """The page as GitHub Markdown: tables per section, plots as linked images."""
    stores = " and ".join(f"`{shown}` ({label})" for label, shown in page.stores) or "no store"
    lines = [
        "# LRA leaderboard",
        "",
        f"Generated by `lra leaderboard` from the result records in {stores}; do not edit by hand."
        + (f" The same page as HTML: [{FILES['html']}]({FILES['html']})." if with_html else ""),
        "",
        f"Rows marked *(published)* are the papers' figures, not measured here. {md_escape(SEEDS_NOTE)}",
        "",
    ]
    lines += [page.plots_note, ""] if page.plots_note else []
    sections = page.sections()
    lines += ["Contents: " + " · ".join(f"[{h}](#{_slug(h)})" for _, h, _, _ in sections), ""]
    for _, heading, tables, figures in sections:
        lines += [f"## {heading}", ""]
        lines += [t.markdown(link) for t in tables]
        lines += [f"[![{md_escape(f.caption)}]({link(f.path)})]({link(f.path)})\n" for f in figures]
    return "\n".join(lines).rstrip("\n") + "\n"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")


def linker(out_dir: Path):
    """href of a file as seen from a page in `out_dir`: relative when the file lies below it, else a file:// URI."""
    base = out_dir.resolve()

    def link(path: Path) -> str:
        path = Path(path).resolve()
        return path.relative_to(base).as_posix() if path.is_relative_to(base) else path.as_uri()

    return link


def read_stores(stores: list[Path] | None, *, strict: bool = False) -> tuple[list[Path], list[dict[str, Any]]]:
    """The stores to read (the curated and the user's when None) and their records; a named store must exist. A file
    that is no readable record is skipped with a warning naming it, or with `strict` a DataCorruptError."""
    if stores is None:
        stores = default_stores()
    else:
        for store in stores:
            if not store.is_dir():
                raise ConfigError(f"--results {store}: no such results store (a folder of record .json files)")
    skip = None if strict else _warn_unreadable
    return stores, [rec for store in stores for rec in load_records(store, on_unreadable=skip)]


def _warn_unreadable(path: Path, err: Exception) -> None:
    """The warning for a store file that is no readable record (`err` names it), which the leaderboard leaves out."""
    from rich.markup import escape

    from lra.core.progress import console

    text = f"[yellow]warning:[/] {escape(str(err))} (skipped; --strict refuses)"
    console.print(text, highlight=False, soft_wrap=True)


def write_leaderboard(
    stores: str | os.PathLike[str] | list | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    formats: str | tuple[str, ...] = ("md", "html"),
    plots: bool = True,
    strict: bool = False,
) -> list[Path]:
    """Write LEADERBOARD.md and/or leaderboard.html (and the plots) from the records in `stores`; the files written.

    `stores`: the folders to read, exactly (one or a list); None reads the curated records and the user's store.
    `out_dir`: where to write; default next to the first store named, or the user's store's parent when none is.
    A file in a store that is no readable record is skipped with a warning naming it; `strict` refuses instead (a
    DataCorruptError, nothing written).
    """
    if isinstance(stores, (str, os.PathLike)):
        stores = [stores]
    named = None if stores is None else [Path(s) for s in stores]
    formats = (formats,) if isinstance(formats, str) else tuple(formats)
    unknown = sorted(set(formats) - set(FILES))
    if unknown:
        raise ConfigError(f"unknown leaderboard format {unknown[0]!r}; use {' or '.join(FILES)}")
    read, records = read_stores(named, strict=strict)
    records = _complete(records)
    out = Path(out_dir) if out_dir is not None else (named[0] if named else results_dir()).expanduser().parent
    figures, note = [], None
    if plots:
        from lra.results.plots import write_plots

        figures = write_plots(records, out)
        note = None if figures or not records or _have_matplotlib() else PLOTS_MISSING
    page = Page([(store_label(s), display_path(s)) for s in read], build_tables(records), figures, note)
    pages = []
    for fmt in formats:
        pages.append(out / FILES[fmt])
        with atomic_open(pages[-1], "w", encoding="utf-8") as f:
            f.write(render(page, fmt, out, formats))
    return pages + [f.path for f in figures]


def _complete(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the incomplete run records, each of which is skipped with a warning naming its file."""
    from lra.core.progress import console

    kept = []
    for rec in records:
        missing = incomplete(rec)
        if missing:
            console.print(f"[yellow]warning:[/] {rec['_path']}: a run record without {', '.join(missing)}; skipped "
                          "(fix or remove it)", highlight=False, soft_wrap=True)  # fmt: skip
        else:
            kept.append(rec)
    return kept


def render(page: Page, fmt: str, out_dir: Path, formats: tuple[str, ...] = ("md", "html")) -> str:
    """The page as Markdown or HTML, with links relative to `out_dir`."""
    if fmt == "md":
        return markdown(page, linker(out_dir), with_html="html" in formats)
    from lra.results.page import html_page

    return html_page(page, linker(out_dir), with_md="md" in formats)


def _have_matplotlib() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
