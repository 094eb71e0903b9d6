"""The leaderboard page: every table cell rendered as text in the HTML (no Markdown marks left), every plot and
record it references present, deterministic plots, and a headless Chromium that loads the page and its images."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest

from lra.results.leaderboard import build_tables, write_leaderboard
from lra.results.store import load_records, save_record
from tests.test_leaderboard import bench_record, run_record

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class PageParser(HTMLParser):
    """Collects each <table>'s rows of <td> text, the text outside tags, and every src/href."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.links: list[str] = []
        self.images: list[dict[str, str]] = []
        self.text: list[str] = []
        self._td: list[str] | None = None
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._in_style = tag == "style"
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag == "td":
            self._td = []
        elif tag == "img":
            self.images.append(attrs)
        for key in ("src", "href"):
            if key in attrs:
                self.links.append(attrs[key])

    def handle_endtag(self, tag):
        if tag == "td" and self._td is not None:
            self.tables[-1][-1].append("".join(self._td))
            self._td = None
        self._in_style = False

    def handle_data(self, data):
        if self._td is not None:
            self._td.append(data)
        if not self._in_style:
            self.text.append(data)


def history(final, steps=(100, 200, 300)):
    return [{"step": s, "val_acc": final * s / steps[-1], "time": s / 10} for s in steps]


def page_records():
    """Runs over seeds (with evaluation history), a smoke run, training benchmarks, kernel benchmarks with and
    without dropout."""
    recs = [
        run_record("listops", b, a + 0.01 * s, seed=s, history=history(a))
        for b, a in (("flash", 0.36), ("naive", 0.35))
        for s in range(3)
    ]
    recs += [run_record("text", "flash", 0.6, seed=0, history=history(0.6))]
    recs += [run_record("image", "naive", 0.2, preset="tiny")]
    for t in ("listops", "text"):
        recs += [bench_record(t, "naive", 1.0), bench_record(t, "flash", 3.0)]
    for backend, p in (("flash", 0.0), ("flash", 0.1), ("sdpa_flash", 0.0)):
        for seq in (1024, 4096):
            ms = seq / 1000 * (1 + p)
            recs.append(
                {"kind": "bench_attention", "backend": backend, "dtype": "bf16", "head_dim": 64, "heads": 8,
                 "mode": "fwd", "seq": seq, "dropout": p, "ms": ms, "tflops": 100.0, "peak_mem_mb": seq / 10,
                 "device": "NVIDIA H200", "date": "2026-11-30T10:00:00Z", "status": "ok"}
            )  # fmt: skip
    return recs


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    pytest.importorskip("matplotlib")
    root = tmp_path_factory.mktemp("page")
    for rec in page_records():
        save_record(rec, root / "results")
    written = write_leaderboard([root / "results"], root)
    return root, written


def test_every_table_cell_is_in_the_html_as_text(page):
    root, _ = page
    parser = PageParser()
    parser.feed((root / "leaderboard.html").read_text())
    tables = build_tables(load_records(root / "results"))
    assert len(parser.tables) == len(tables)
    for table, rendered in zip(tables, parser.tables):
        body = [row for row in rendered if row]  # the header row has <th>s only
        assert len(body) == len(table.rows), table.title
        for cells, tds in zip(table.cells(), body):
            assert len(cells) == len(tds)
            for c, td in zip(cells, tds):
                assert td.startswith(c.text), (table.title, c.text, td)
    text = "".join(parser.text)
    for mark in ("`", "*(", "**", "](", "|---"):
        assert mark not in text, f"raw Markdown {mark!r} in the page"


def test_every_referenced_file_exists_and_the_plots_are_there(page):
    root, written = page
    parser = PageParser()
    parser.feed((root / "leaderboard.html").read_text())
    local = [unquote(link) for link in parser.links if not link.startswith(("#", "http", "file:"))]
    assert local and all((root / link).is_file() for link in local)
    md = (root / "LEADERBOARD.md").read_text()
    plots = {p.name for p in written if p.suffix == ".png"}
    for name in plots:
        assert f"](plots/{name})" in md and f'src="plots/{name}"' in (root / "leaderboard.html").read_text()
    assert {"accuracy-default.png", "time-to-accuracy-default.png", "curves-listops-default.png"} <= plots
    assert {"curves-text-default.png", "speedup-default-NVIDIA_H200.png"} <= plots
    assert "attention-fwd-bf16-d64-NVIDIA_H200.png" in plots
    images = {Path(i["src"]).name for i in parser.images}
    assert images == plots


def test_plots_are_deterministic(page, tmp_path):
    root, written = page
    again = write_leaderboard([root / "results"], tmp_path)
    assert [p.name for p in again] == [p.name for p in written]
    for a, b in zip(written, again):
        assert a.read_bytes() == b.read_bytes() or a.suffix != ".png", a.name
    assert (tmp_path / "plots" / "accuracy-default.png").stat().st_size > 1000


def test_without_matplotlib_the_page_says_how_to_get_plots(tmp_path, monkeypatch):
    import lra.results.leaderboard as lb
    import lra.results.plots as plots

    monkeypatch.setattr(plots, "pyplot", lambda: None)
    monkeypatch.setattr(lb, "_have_matplotlib", lambda: False)
    save_record(run_record("listops", "flash", 0.3), tmp_path / "results")
    md, page = write_leaderboard([tmp_path / "results"], tmp_path)
    assert "pip install -e '.[plots]'" in md.read_text() and "pip install -e" in page.read_text()
    assert not (tmp_path / "plots").exists()


def chromium(*args, cwd):
    profile = cwd / "chromium-profile"
    cmd = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (Debian: apt-get install -y chromium)")
def test_a_real_browser_renders_tables_and_images(page, tmp_path):
    from PIL import Image

    root, _ = page
    # a copy beside the original (same relative links) that records each image's natural size in the DOM on load
    probe = "<script>addEventListener('load',()=>{for(const i of document.images)i.dataset.natural=" \
            "i.naturalWidth+'x'+i.naturalHeight;document.body.dataset.loaded='yes'})</script></body>"  # fmt: skip
    check = root / "check.html"
    check.write_text((root / "leaderboard.html").read_text().replace("</body>", probe))
    dom = chromium("--virtual-time-budget=10000", "--dump-dom", check.as_uri(), cwd=tmp_path).stdout
    parser = PageParser()
    parser.feed(dom)
    assert 'data-loaded="yes"' in dom
    assert len(parser.tables) >= 5 and all(parser.tables)
    sizes = [i.get("data-natural") for i in parser.images]
    assert sizes and all(s and not s.startswith("0x") and not s.endswith("x0") for s in sizes), sizes
    shot = tmp_path / "shot.png"
    chromium("--window-size=1280,1600", f"--screenshot={shot}", (root / "leaderboard.html").as_uri(), cwd=tmp_path)
    with Image.open(shot) as im:
        gray = im.convert("L")
        lo, hi = gray.getextrema()
        colours = len(im.convert("RGB").getcolors(maxcolors=1 << 20) or [])
    assert hi - lo > 100 and colours > 50  # text, tables and plots, not a blank page
