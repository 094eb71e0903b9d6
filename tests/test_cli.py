"""The command line: one red line and exit 2 for user errors (bad names, bad --device), tracebacks for bugs, `lra
list` with capabilities and notes, `lra data info` as a table, `lra run` storing its record where asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attention_impls import BACKENDS
from lra.cli import listing
from lra.cli.args import int_list
from lra.cli.data import info_table
from lra.cli.main import main
from lra.core.errors import ConfigError
from lra.core.progress import out
from lra.results.store import load_records
from tests.toy_task import toy_config_path


def _row(text: str, first_cell: str) -> str:
    """The line of a rich table whose first cell is `first_cell`."""
    return next(line for line in text.splitlines() if line.startswith(f"│ {first_cell} "))


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


DEVICE_COMMANDS = {
    "run": ["run", "listops", "--preset", "tiny", "--attn", "naive"],
    "bench attention": ["bench", "attention", "--attn", "naive", "--seq", "64"],
    "bench train": ["bench", "train", "listops", "--preset", "tiny", "--attn", "naive"],
    "numerics forward": ["numerics", "forward", "--attn", "naive", "--seq", "64"],
    "numerics weights": ["numerics", "weights", "listops"],
}


@pytest.mark.parametrize("command", DEVICE_COMMANDS)
@pytest.mark.parametrize("device", ["tpu", "cuda", "cuda:3"])
def test_bad_device_is_refused_before_anything_starts(command, device, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LRA_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("LRA_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("LRA_RUNS", str(tmp_path / "runs"))
    if device == "cuda":  # a machine without CUDA
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        expected = (
            f"error: --device cuda: CUDA is not available on this machine (torch {torch.__version__}, {build}); "
            "use --device cpu"
        )
    elif device == "cuda:3":  # a machine with two GPUs
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        expected = "error: --device cuda:3: there is no such GPU; this machine has 2 (cuda:0 to cuda:1)"
    else:
        expected = "error: --device 'tpu' is not a device; use cpu, cuda or cuda:N"
    assert main([*DEVICE_COMMANDS[command], "--device", device]) == 2
    assert capsys.readouterr().err == expected + "\n"
    assert not any(tmp_path.iterdir())  # no data, run directory or record


def test_device_kinds_other_than_cpu_and_cuda_are_refused(capsys):
    assert main(["bench", "attention", "--attn", "naive", "--device", "mps"]) == 2
    assert capsys.readouterr().err == "error: --device 'mps' is not supported; use cpu, cuda or cuda:N\n"


def test_length_lists():
    assert int_list("512, 1k,4K") == [512, 1024, 4096]
    with pytest.raises(ConfigError, match=r"^'1x' is not a length; use integers such as 512,1024 or 1k,4k$"):
        int_list("512,1x")


def test_user_error_is_one_line_and_a_bug_keeps_its_traceback(monkeypatch, capsys):
    def user_error():
        raise ConfigError("setting x: bad [value]; use 1 or 2")

    def bug():
        raise ValueError("a bug")

    monkeypatch.setattr(listing, "tasks_table", user_error)
    assert main(["list"]) == 2
    assert capsys.readouterr().err == "error: setting x: bad [value]; use 1 or 2\n"
    monkeypatch.setattr(listing, "tasks_table", bug)
    with pytest.raises(ValueError, match="a bug"):
        main(["list"])
    monkeypatch.setattr(listing, "tasks_table", user_error)
    monkeypatch.setenv("LRA_DEBUG", "1")
    with pytest.raises(ConfigError):
        main(["list"])


def test_ctrl_c_exits_130_with_what_is_kept(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(listing, "tasks_table", interrupted)
    assert main(["list"]) == 130
    assert capsys.readouterr().err == "interrupted\n"  # nothing to keep
    import lra.cli.data
    import lra.cli.run

    monkeypatch.setattr(lra.cli.run, "cmd_run", interrupted)
    monkeypatch.setattr(lra.cli.data, "cmd_prepare", interrupted)
    assert main(["run", "listops", "--attn", "naive"]) == 130
    assert capsys.readouterr().err.startswith("interrupted; checkpoints written so far are intact")
    assert main(["data", "prepare", "listops"]) == 130
    assert " ".join(capsys.readouterr().err.split()) == (
        "interrupted; splits already drawn are kept, a half-drawn one is not (the same command goes on)"
    )


def test_list_shows_every_backend_with_capabilities_and_notes(monkeypatch, capsys):
    monkeypatch.setattr(out, "width", 1000)
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    assert "tiny" in _row(text, "listops")
    for name, cls in BACKENDS.items():
        row = _row(text, name)
        assert cls.capabilities.summary() in row and (cls.capabilities.notes or "-") in row
    assert "│ yes" in _row(text, "naive")
    if not torch.cuda.is_available():
        assert "no: 'sdpa_flash' runs only on cuda" in _row(text, "sdpa_flash")


def test_info_table_renders_each_field(monkeypatch, capsys):
    infos = [
        {"task": "text", "source": "IMDB (aclImdb_v1.tar.gz)", "where": "/data/text/abc", "splits": {},
         "bytes": 0, "ready": False, "prepare": "lra data prepare text --from PATH", "details": {}},
        {"task": "listops", "source": "generated", "where": "/data/listops/def",
         "splits": {"train": 96000, "val": 2000, "test": 2000}, "bytes": 1_500_000, "ready": True, "prepare": None,
         "details": {}},
    ]  # fmt: skip
    monkeypatch.setattr(out, "width", 300)
    out.print(info_table(infos))
    text = capsys.readouterr().out
    cells = {name: [c.strip() for c in _row(text, name).split("│")[1:-1]] for name in ("text", "listops")}
    assert cells["text"] == [
        "text", "IMDB (aclImdb_v1.tar.gz)", "/data/text/abc", "-", "-", "no", "lra data prepare text --from PATH"
    ]  # fmt: skip
    assert cells["listops"] == [
        "listops", "generated", "/data/listops/def", "train 96,000, val 2,000, test 2,000", "1.5 MB", "yes", "-"
    ]  # fmt: skip


def test_data_info_before_and_after_prepare(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(out, "width", 400)
    fixture = Path(__file__).parent / "fixtures" / "retrieval"
    args = ["--data-dir", str(tmp_path)]
    assert main(["data", "info", "retrieval", *args, "--json"]) == 0
    (before,) = json.loads(capsys.readouterr().out)
    assert before["task"] == "retrieval" and before["ready"] is False
    assert before["prepare"].startswith("lra data prepare retrieval")
    assert main(["data", "info", "retrieval", *args]) == 0
    row = _row(capsys.readouterr().out, "retrieval")
    assert "│ no " in row and before["prepare"] in row
    assert main(["data", "prepare", "retrieval", "--from", str(fixture), *args]) == 0
    assert main(["data", "info", "retrieval", *args, "--json"]) == 0
    (after,) = json.loads(capsys.readouterr().out)
    assert after["ready"] is True and after["prepare"] is None
    assert after["splits"] == {"train": 384, "val": 64, "test": 64}
    assert main(["data", "info", "retrieval", *args]) == 0
    row = _row(capsys.readouterr().out, "retrieval")
    assert "│ yes " in row and "train 384, val 64, test 64" in row


def test_run_records_go_to_the_users_store_or_where_asked(tmp_path, monkeypatch, capsys):
    store = tmp_path / "user-store"
    monkeypatch.setenv("LRA_RESULTS", str(store))
    cfg = toy_config_path(tmp_path)
    run = ["run", cfg, "--attn", "sdpa_math", "--device", "cpu", "--set", "train.steps=8", "--set",
           "train.eval_every=4", "--runs-root", str(tmp_path / "runs")]  # fmt: skip
    assert main(run) == 0
    (rec,) = load_records(store)
    assert rec["backend"] == "sdpa_math" and rec["steps"] == 8
    assert Path(rec["run_dir"]).parent.parent == tmp_path / "runs"
    assert f"record: {store / rec['_file']}" in capsys.readouterr().err
    other = tmp_path / "other-store"
    assert main([*run, "--results", str(other)]) == 0
    assert len(load_records(other)) == 1 and len(load_records(store)) == 1
    assert main([*run, "--no-record"]) == 0
    assert main([*run, "--stop-after", "2"]) == 0  # an interrupted run has no result yet
    assert len(load_records(store)) == 1 and len(load_records(other)) == 1


def test_leaderboard_reads_the_store_it_is_given(tmp_path):
    store = tmp_path / "store"
    run = ["run", toy_config_path(tmp_path), "--attn", "sdpa_math", "--device", "cpu", "--set", "train.steps=20",
           "--set", "train.eval_every=10", "--out", str(tmp_path / "run"), "--results", str(store)]  # fmt: skip
    assert main(run) == 0
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
    generated = build_task("listops", data_dir=data, **cfg.data).load("val")
    cfg = cfg.with_settings([f"data.source={tmp_path / 'tsv'}"])
    read = build_task("listops", data_dir=data, **cfg.data).load("val")
    assert (generated.tokens == read.tokens).all() and (generated.labels == read.labels).all()


def test_export_of_a_real_data_task_is_a_user_error(tmp_path, capsys):
    assert main(["data", "export", "text", str(tmp_path / "out"), "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == "error: lra data export: task 'text' has no export (tasks that have one: listops)\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, says",
    [
        (["run", "TOY", "--attn", "naive", "--set", "train.lr=0"], "train.lr = 0 is not valid: expected a number > 0"),
        (["run", "TOY", "--attn", "naive", "--nproc", "0"], "--nproc must be at least 1 (processes to train with)"),
        (["run", "TOY", "--attn", "naive", "--nproc", "-2"], "--nproc must be at least 1 (processes to train"),
        (["bench", "train", "TOY", "--attn", "naive", "--nproc", "0", "--device", "cpu"], "--nproc must be at least 1"),
        (["data", "prepare", "listops", "--workers", "0"], "--workers must be at least 1 (leave it out to use every"),
        (["sweep", "--tasks", "TOY", "--attn", "naive", "--per-gpu", "0", "--dry-run"], "--per-gpu must be at least 1"),
        (["bench", "attention", "--attn", "naive", "--seq", "0", "--device", "cpu"], "--seq 0: give positive integers"),
        (["bench", "attention", "--attn", "naive", "--head-dim", "-8", "--device", "cpu"], "--head-dim -8: give"),
        (["run", "TOY", "--attn", "naive", "--device", "cpu", "--set", "data.max_length=1000000"],
         "'naive' materialises a (32, 2, 1000000, 1000000) fp32 score matrix of 256,000.0 GB, more than this cpu"),
    ],
)  # fmt: skip
def test_impossible_settings_are_one_line_errors(argv, says, tmp_path, monkeypatch, capsys):
    """Issue 38's rows that were accepted silently or ended in a traceback: exit 2 and one line, nothing written."""
    monkeypatch.setenv("LRA_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("LRA_RESULTS", str(tmp_path / "results"))
    argv = [toy_config_path(tmp_path) if a == "TOY" else a for a in argv] + ["--no-record"] * (argv[0] == "run")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and says in " ".join(err.split()) and err.count("\n") == 1
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()


def test_block_sparse_flash_on_the_cpu_is_refused_where_its_fallback_scores_cannot_fit(tmp_path, monkeypatch, capsys):
    """Without CUDA or the interpreter, block_sparse_flash computes its function densely in PyTorch: `lra run path-x
    --attn block_sparse_flash` on a CPU drew 18 minutes of images, then died allocating 137 GB of scores."""
    from attention_impls import registry

    monkeypatch.setattr(registry, "_total_memory", lambda device: 2 * 10**9)  # a 2 GB host
    monkeypatch.setenv("LRA_RUNS", str(tmp_path / "runs"))
    argv = ["run", toy_config_path(tmp_path), "--attn", "block_sparse_flash", "--device", "cpu", "--no-record",
            "--data-dir", str(tmp_path / "data"), "--set", "data.max_length=4096"]  # fmt: skip
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    # (32, 2, 4096, 4096) fp32 = 32 * 2 * 4096 * 4096 * 4 bytes = 4.29 GB
    assert "'block_sparse_flash' (on the CPU, without its Triton kernel" in err and "of 4.3 GB, more than" in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()  # refused before any data
    # The kernel (here emulated) builds no scores, and neither does the fallback at a size that fits.
    shape = {"batch": 32, "heads": 2, "seq_len": 4096, "device": "cpu"}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert registry.scores_too_big("block_sparse_flash", **shape) is None
    monkeypatch.delenv("TRITON_INTERPRET")
    assert registry.scores_too_big("block_sparse_flash", **{**shape, "seq_len": 2048}) is None  # 1.07 GB


def test_export_to_a_path_that_cannot_be_written_is_one_line(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    small = ["--set", "data.num_train=20", "--set", "data.num_val=10", "--set", "data.num_test=10"]
    argv = ["data", "export", "listops", str(tmp_path / "a_file" / "out"), "--data-dir", str(tmp_path), *small]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: lra data export: cannot write {tmp_path / 'a_file' / 'out'}: a part of the path is a file, not a "
        "folder; choose a writable DIR\n"
    )


@pytest.mark.parametrize("plots", [[], ["--no-plots"]])
def test_a_leaderboard_written_where_it_cannot_be_is_one_line(tmp_path, capsys, plots):
    (tmp_path / "store").mkdir()
    (tmp_path / "a_file").write_text("")
    out = tmp_path / "a_file" / "board"
    assert main(["leaderboard", "--results", str(tmp_path / "store"), "--out", str(out), *plots]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: lra leaderboard: cannot write ") and err.count("\n") == 1
    assert " ".join(err.split()).endswith("a part of the path is a file, not a folder; choose a writable --out")
    assert (tmp_path / "a_file").read_text() == ""


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_bench_tables_fit_80_columns_without_cutting_a_name(monkeypatch, capsys):
    from lra.bench.attention import format_attention_table
    from lra.cli.bench import train_table
    from lra.core.tables import print_table

    rows = []
    for i, name in enumerate(("flex_block_sparse", "block_sparse_flash", "naive")):
        row = {"backend": name, "seq": 16384, "head_dim": 64, "heads": 8, "batch": 8, "dtype": "bf16", "mode": "fwd"}
        ok = name != "naive"
        row |= {"dropout": 0.1, "dropout_effective": 0.1, "density": 0.122, "ms": 138.12345 + i if ok else None}
        row |= {"tflops": 123.4 if ok else None, "peak_mem_mb": 4096.0, "status": "ok" if ok else "oom"}
        rows.append(row)
    monkeypatch.setattr(out, "width", 80)
    print_table(out, format_attention_table(rows, width=80))
    text = capsys.readouterr().out
    assert max(map(len, _lines(text))) <= 80 and "…" not in text
    assert all(f"│ {name} " in text for name in ("flex_block_sparse", "block_sparse_flash", "naive"))
    assert "138.123" in text and "139.123" in text and "bf16" in text  # a constant column moves to the title
    print_table(out, format_attention_table(rows, width=80, wide=True), wide=True)
    wide = capsys.readouterr().out
    assert max(map(len, _lines(wide))) > 80 and all(f" {h} " in wide for h in ("H", "B", "dtype", "p", "density"))

    recs = [
        {"backend": name, "seq_len": 2048, "status": "ok", "compile": {"mode": "max", "fallback": None},
         "metrics": {"ms_per_step": 12.5, "steps_per_s": 80.0, "tokens_per_s": 5_242_880.0, "peak_mem_mb": 2048.0,
                     "compile_s": 41.2, "speedup_vs_eager": 1.31, "speedup_vs_naive": 2.13}}
        for name in ("block_sparse_flash", "sdpa_mem_efficient")
    ]  # fmt: skip
    print_table(out, train_table(recs, "bench train listops", width=80))
    text = capsys.readouterr().out
    assert max(map(len, _lines(text))) <= 80 and "…" not in text
    assert "│ block_sparse_flash " in text and "│ sdpa_mem_efficient " in text and "5,242,880" in text


def test_data_info_at_80_columns_keeps_paths_and_commands_whole(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(out, "width", 80)
    data = ["--data-dir", str(tmp_path / "a-rather-long-folder-name-for-the-data-cache")]
    assert main(["data", "info", "image", *data]) == 0 and main(["data", "info", "listops", *data]) == 0
    text = capsys.readouterr().out
    assert "lra data prepare image --from /path/to/cifar-10-python.tar.gz" in text
    assert f"  where:   {tmp_path / 'a-rather-long-folder-name-for-the-data-cache' / 'listops'}/" in text
    assert "…" not in text and "┃" not in text  # one block per task, no table cut to fit


def test_bench_attention_says_each_row_where_no_progress_bar_shows(monkeypatch, capsys):
    from lra.bench.attention import bench_attention
    from lra.core.progress import console

    monkeypatch.setenv("LRA_QUIET", "0")
    assert not console.is_terminal  # stderr captured: what a pipe or a log file gets
    rows = bench_attention(["naive"], [16], [8], "fp32", batch=1, device="cpu", rep_ms=1.0, warmup_ms=0.0)
    err = capsys.readouterr().err
    for i, row in enumerate(rows, 1):
        assert f"bench attention {i}/2: naive N=16 D=8 B=1 {row['mode']}: {row['ms']:.3f} ms" in err
