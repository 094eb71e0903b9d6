"""The command line: clear errors for bad names, `lra list`, a run through `main`, data export, leaderboard."""

from __future__ import annotations

import pytest
import torch

from lra.cli.main import main
from lra.results.store import load_records
from tests.toy_task import toy_config_path


def test_unknown_backend_task_and_preset_list_valid_names(tmp_path, capsys):
    cfg = toy_config_path(tmp_path)
    assert main(["run", cfg, "--attn", "nosuch", "--out", str(tmp_path / "r"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "unknown attention backend 'nosuch'" in err and "naive" in err
    assert main(["run", "nosuch", "--attn", "naive"]) == 2
    assert "no config for task 'nosuch'" in capsys.readouterr().err
    assert main(["run", cfg, "--attn", "naive", "--preset", "huge"]) == 2
    assert "presets: tiny" in capsys.readouterr().err
    assert main(["run", cfg, "--attn", "naive", "--set", "model.nope=1"]) == 2
    assert "valid here" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_gpu_only_backend_on_cpu_says_why(tmp_path, capsys):
    code = main(["run", toy_config_path(tmp_path), "--attn", "sdpa_flash", "--device", "cpu", "--out", str(tmp_path)])
    assert code == 2
    assert "runs only on cuda" in capsys.readouterr().err


def test_list_shows_tasks_and_backends(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("listops", "naive", "sdpa_math", "sdpa_flash"):
        assert name in out


def test_run_then_leaderboard(tmp_path, monkeypatch):
    store = tmp_path / "store"
    code = main(
        ["run", toy_config_path(tmp_path), "--attn", "sdpa_math", "--device", "cpu", "--set", "train.steps=20",
         "--set", "train.eval_every=10", "--out", str(tmp_path / "run"), "--results", str(store)]
    )  # fmt: skip
    assert code == 0
    (rec,) = load_records(store)
    assert rec["backend"] == "sdpa_math" and rec["steps"] == 20
    assert main(["leaderboard", "--results", str(store), "--out", str(tmp_path), "--no-plots"]) == 0
    assert "`sdpa_math`" in (tmp_path / "LEADERBOARD.md").read_text()
    assert main(["leaderboard", "--results", str(store), "--out", str(tmp_path), "--format", "html"]) == 0
    assert "<table>" in (tmp_path / "leaderboard.html").read_text()


def test_listops_export_reads_back(tmp_path):
    data = tmp_path / "data"
    args = ["--preset", "tiny", "--data-dir", str(data)]
    assert main(["data", "export", "listops", str(tmp_path / "tsv"), *args]) == 0
    for split in ("train", "val", "test"):
        assert (tmp_path / "tsv" / f"basic_{split}.tsv").is_file()
    from lra.train.config import load_config
    from tasks import build_task

    cfg = load_config("listops", "tiny")
    generated = build_task("listops", data_dir=data, **cfg["data"]).load("val")
    cfg["data"]["source"] = str(tmp_path / "tsv")
    read = build_task("listops", data_dir=data, **cfg["data"]).load("val")
    assert (generated.tokens == read.tokens).all() and (generated.labels == read.labels).all()
