"""`retrieval`: LRA's byte-level document matching on the ACL Anthology Network (Radev et al. 2013), 2 classes.

An example is two papers; the label says whether one cites the other. Tokens are shaped (N, 2, max_length): each
document's bytes as id = byte + 1 (0 is padding), truncated to `max_length` (LRA: 4000) and right-padded. The model
encodes each document separately and classifies [e1, e2, e1*e2, e1-e2] (the dual-tower head; see `pair = True`).

Source: a folder with LRA's release files `new_aan_pairs.{train,eval,test}.tsv` (from `lra_release.gz`,
tsv_data/). Each line is `label <TAB> id1 <TAB> id2 <TAB> text1 <TAB> text2`, no header; the label is a number (0 or 1,
LRA parses it as float). Quotes are not special (LRA reads with use_quote_delim=False), so lines are split on tabs and
nothing else. 'eval' is the validation split. A row without exactly five fields or with a label other than 0/1 is
corrupt input: the error names the file and the line.

LRA's TSVs hold each text as it was printed from Python bytes, e.g. `b'Abstract ...'`, and LRA encoded that printed form
as is (the b, the quotes and backslash escapes included). That is the default here too; `decode_literals: true`
turns such a `b'...'` field back into the bytes it stands for before encoding (a field that is not a literal is kept).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any

import numpy as np

from lra.core.errors import DataMissingError
from lra.core.progress import make_progress
from tasks._cache import CacheWriter
from tasks._realdata import CachedTask, check_count, corrupt
from tasks.registry import register_task

LRA_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz (the LRA repo's data; AAN: tsv_data/)"
STORE_LENGTH = 4000
FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}


def find_aan_folder(source: Path) -> Path | None:
    """The folder holding the three TSVs: `source` itself, or `source/tsv_data`, or `source/lra_release/tsv_data`."""
    for folder in (source, source / "tsv_data", source / "lra_release" / "tsv_data"):
        if all((folder / f).is_file() for f in FILES.values()):
            return folder
    return None


def decode_literal(field: bytes) -> bytes:
    """`b'...'` / `b"..."` -> the bytes it denotes; anything else unchanged."""
    if len(field) >= 3 and field[:1] == b"b" and field[1:2] in (b"'", b'"') and field[-1:] == field[1:2]:
        try:
            value = ast.literal_eval(field.decode("latin-1"))
        except (ValueError, SyntaxError):
            return field
        if isinstance(value, bytes):
            return value
    return field


def parse_row(line: bytes, where: str) -> tuple[int, bytes, bytes]:
    """One TSV line -> (label, text1, text2); `where` names the file and line for errors."""
    fields = line.split(b"\t")
    if len(fields) != 5:
        raise corrupt(where, f"expected 5 tab-separated fields (label, id1, id2, text1, text2), found {len(fields)}")
    try:
        value = float(fields[0])
    except ValueError:
        value = None
    if value not in (0.0, 1.0):
        raise corrupt(where, f"label {fields[0][:20]!r} is not 0 or 1")
    return int(value), fields[3], fields[4]


def _lines(path: Path):
    """(line number, line without its newline) for the non-empty lines of a file."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip(b"\n").rstrip(b"\r")
            if line:
                yield number, line


def read_aan_split(
    path: Path, length: int, decode_literals: bool = False, progress=None, alloc=None
) -> tuple[np.ndarray, np.ndarray]:
    """Tokens (N, 2, length) uint16 and labels (N,) of one TSV file.

    `alloc(shape)` supplies the zero-filled token array (a memory-mapped cache file for large splits).
    """
    rows = 0
    with open(path, "rb") as f:
        for line in f:
            rows += bool(line.strip(b"\r\n"))
    shape = (rows, 2, length)
    tokens = alloc(shape) if alloc is not None else np.zeros(shape, dtype=np.uint16)
    labels = np.zeros(rows, dtype=np.int64)
    bar = progress.add_task(f"reading {path.name}", total=rows) if progress is not None else None
    i = 0
    for number, line in _lines(path):
        label, text1, text2 = parse_row(line, f"{path}: line {number}")
        for j, text in enumerate((text1, text2)):
            if decode_literals:
                text = decode_literal(text)
            ids = np.frombuffer(text[:length], dtype=np.uint8)
            tokens[i, j, : len(ids)] = ids.astype(np.uint16) + 1
        labels[i] = label
        i += 1
        if bar is not None and i % 256 == 0:
            progress.update(bar, completed=i)
    if bar is not None:
        progress.update(bar, completed=i)
    return tokens, labels


@register_task("retrieval")
class RetrievalTask(CachedTask):
    """Byte-level AAN citation matching, two documents per example (LRA "Retrieval")."""

    num_classes = 2
    pair = True
    description = "AAN paper pairs as bytes: does one cite the other? (LRA Retrieval)"
    dataset = "AAN document pairs (LRA's new_aan_pairs.{train,eval,test}.tsv)"
    url = LRA_URL
    source_example = "/path/to/lra_release/tsv_data"

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        max_length: int = 4000,
        num_val: int | None = None,
        decode_literals: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(data_dir, max_length, **options)
        self.num_val = check_count("num_val", num_val, 1)
        if not isinstance(decode_literals, bool):
            raise ValueError(f"data setting decode_literals must be true or false, got {decode_literals!r}")
        self.decode_literals = decode_literals

    def caps(self) -> dict[str, int | None]:
        return {"train": self.num_train, "val": self.num_val, "test": self.num_test}

    def cache_settings(self) -> dict[str, Any]:
        return {"store_length": max(self.max_length, STORE_LENGTH), "decode_literals": self.decode_literals}

    def cache_options(self) -> dict[str, Any]:
        longer = {"max_length": self.max_length} if self.max_length > STORE_LENGTH else {}
        return {**longer, "decode_literals": self.decode_literals}

    def fingerprint(self, source: str) -> dict[str, Any]:
        folder = find_aan_folder(Path(source)) if source != "tfds" else None
        return super().fingerprint(str(folder) if folder is not None else source)

    def import_into(self, source: str, writer: CacheWriter, workers: int) -> None:
        if source == "tfds":
            raise DataMissingError("AAN is not in TFDS: pass the folder with LRA's new_aan_pairs.*.tsv files")
        folder = find_aan_folder(Path(source))
        if folder is None:
            names = ", ".join(FILES.values())
            raise DataMissingError(f"{source}: expected a folder with {names}. They come from {self.url}")
        length = self.cache_settings()["store_length"]
        counts = writer.meta["counts"]
        with make_progress() as progress:
            for split, name in FILES.items():
                # Written straight into the cache file: AAN's train split is ~2.4 GB of tokens at 4000 bytes.
                alloc = lambda shape, split=split: writer.array(f"{split}_tokens", shape, np.uint16)
                tokens, labels = read_aan_split(folder / name, length, self.decode_literals, progress, alloc)
                tokens.flush()
                del tokens
                writer.save(f"{split}_labels", labels)
                counts[split] = len(labels)
        for split, n in counts.items():
            if n == 0:
                raise corrupt(str(folder / FILES[split]), "no rows")
        writer.meta["folder"] = str(folder)
