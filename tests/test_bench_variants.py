"""`lra bench attention` with backend options: `--set BACKEND.OPTION=VALUE` and `--attn NAME@OPTION=VALUE` become
options of that backend only, checked as `lra run --set attention.*` is (one validator) before anything is timed;
the options are built into the backend, shown in the table, stored in the record (older records read as {}) and kept
apart from the plain backend's row in the leaderboard's kernel tables."""

from __future__ import annotations

import pytest

from lra.bench import attention as bench_mod
from lra.bench.variants import Variant, parse_variants
from lra.cli.main import build_parser, main
from lra.core import records as R
from lra.core.errors import ConfigError
from lra.results.kernels import attention_tables
from lra.results.store import load_records, save_record

CPU = ["--device", "cpu", "--seq", "128", "--head-dim", "16", "--heads", "2", "--batch", "2", "--dtype", "fp32"]


def test_set_becomes_options_of_that_backend_only():
    args = build_parser().parse_args(["bench", "attention", "--attn", "flash,naive", "--set", "flash.block_m=64",
                                      "--set", "flash.compact_padding=true"])  # fmt: skip
    flash, naive = parse_variants(args.attn.split(","), args.overrides)
    assert flash == Variant("flash", {"block_m": 64, "compact_padding": True}) and naive == Variant("naive", {})
    assert flash.label == "flash[block_m=64,compact_padding=true]" and naive.label == "naive"


def test_attn_variants_time_one_backend_twice_their_own_options_over_set():
    plain, small = parse_variants(["flash", "flash@block_m=32@num_warps=4.0"], ["flash.block_m=64"])
    assert plain.options == {"block_m": 64}
    assert small.options == {"block_m": 32, "num_warps": 4} and isinstance(small.options["num_warps"], int)
    assert small.label == "flash[block_m=32,num_warps=4]"


BAD = [
    (["--attn", "naive", "--set", "flsh.block=16"], "--set flsh: no attention backend 'flsh' (did you mean 'flash'?)"),
    (["--attn", "naive", "--set", "flash.block_m=64"], "--set flash.block_m: backend 'flash' is not in --attn (naive)"),
    (["--attn", "flash", "--set", "flash.blockm=64"], "'flash' has no option 'blockm' (did you mean 'block_m'?)"),
    (["--attn", "flash", "--set", "flash.block_m=abc"], "--set flash.block_m = 'abc' is not valid: expected an"),
    (["--attn", "flash", "--set", "flash.compact_padding=2"], "flash.compact_padding = 2 is not valid: expected true"),
    (["--attn", "flash", "--set", "block_m=64"], "--set 'block_m=64': give BACKEND.OPTION=VALUE"),
    (["--attn", "flash@block_m"], "--attn 'flash@block_m': give NAME or NAME@OPTION=VALUE"),
    (["--attn", "flash@tiles=1"], "--attn flash@tiles=1: flash.tiles: 'flash' has no option 'tiles'"),
    (["--attn", "naive,naive"], "--attn names naive twice; drop one, or tell them apart by options"),
    (["--attn", "flsh"], "--attn flsh: no attention backend 'flsh'"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_options_exit_2_with_one_line_before_anything_is_timed(argv, message, tmp_path, monkeypatch, capsys):
    def timed(*args, **kwargs):
        raise AssertionError("a backend was timed")

    monkeypatch.setattr(bench_mod, "_bench_one", timed)
    results = tmp_path / "results"
    assert main(["bench", "attention", *argv, *CPU, "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err
    assert not results.exists()  # nothing written


def test_lra_run_refuses_a_wrong_type_by_the_same_check():
    from lra.train.config import load_config

    with pytest.raises(ConfigError, match=r"attention.flash.block_m = 'abc' is not valid: expected an integer"):
        load_config("listops", "tiny", ["attention.flash.block_m=abc"])
    assert load_config("listops", "tiny", ["attention.flash.block_m=64.0"]).attention["flash"]["block_m"] == 64


def test_a_cpu_bench_builds_each_variant_with_its_options(tmp_path, monkeypatch, capsys):
    """block_sparse_flash (dense-masked on the CPU) with block 16 keeps a different share of the 128 x 128 scores
    than with block 32: the option reaches the backend, and each variant is its own row and record."""
    monkeypatch.setattr("lra.core.progress.out.width", 160)
    argv = ["bench", "attention", "--attn", "naive,block_sparse_flash,block_sparse_flash@block=32", "--set",
            "block_sparse_flash.block=16", "--modes", "fwd", *CPU, "--results", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "│ block_sparse_flash[block=16] │" in text and "│ block_sparse_flash[block=32] │" in text
    recs = {R.backend_label(r): r for r in load_records(tmp_path)}
    assert sorted(recs) == ["block_sparse_flash[block=16]", "block_sparse_flash[block=32]", "naive"]
    assert recs["block_sparse_flash[block=16]"]["options"] == {"block": 16} and recs["naive"]["options"] == {}
    assert all(r["status"] == "ok" for r in recs.values()), [r["status"] for r in recs.values()]
    assert recs["block_sparse_flash[block=16]"]["density"] == 0.5  # butterfly over 8 x 8 blocks
    assert recs["block_sparse_flash[block=32]"]["density"] == 0.75  # over 4 x 4 blocks
    assert recs["naive"]["density"] == 1.0


def test_records_without_options_read_as_the_backends_defaults():
    rec = R.bench_attention_record(backend="flash", seq=1024, head_dim=64, heads=8, batch=128, dtype="bf16",
                                   mode="fwd", dropout=0.0, dropout_effective=0.0, ms=1.0, tflops=2.0, peak_mem_mb=None,
                                   density=1.0, layout=None, status="ok", device="cpu", env={})  # fmt: skip
    assert rec["options"] == {} and R.backend_label(rec) == "flash"
    schema_1 = {k: v for k, v in rec.items() if k != "options"} | {"schema": 1}
    assert R.upgrade(schema_1) == rec


def _kernel_record(options: dict, ms: float, seq: int = 1024, batch: int = 128, heads: int = 8) -> dict:
    return R.bench_attention_record(backend="flash", seq=seq, head_dim=64, heads=heads, batch=batch, dtype="bf16",
                                    mode="fwd", dropout=0.0, dropout_effective=0.0, ms=ms, tflops=100 / ms,
                                    peak_mem_mb=None, density=1.0, layout=None, status="ok", device="H200", env={},
                                    options=options)  # fmt: skip


def test_kernel_tables_keep_an_optioned_backend_apart_from_the_plain_one(tmp_path):
    for rec in (_kernel_record({}, 2.0), _kernel_record({}, 4.0, seq=2048), _kernel_record({"block_m": 64}, 1.0)):
        save_record(rec, tmp_path)
    (table,) = attention_tables(load_records(tmp_path))
    assert table.header == ["backend", "N=1024", "N=2048"]
    rows = {row[0].text: [c.text for c in row[1:]] for row in table.rows}
    assert rows == {"flash": ["50 (2.00 ms)", "25 (4.00 ms)"], "flash[block_m=64]": ["100 (1.00 ms)", "-"]}


def test_kernel_tables_give_each_batch_and_head_count_its_own_column(tmp_path):
    # The same N timed at two shapes: neither hides the other, and the header says which is which.
    for rec in (
        _kernel_record({}, 2.0),
        _kernel_record({}, 8.0, batch=512, heads=4),
        _kernel_record({}, 4.0, seq=2048),
    ):
        save_record(rec, tmp_path)
    (table,) = attention_tables(load_records(tmp_path))
    assert table.header == ["backend", "N=1024 B=128 H=8", "N=1024 B=512 H=4", "N=2048"]
    assert [c.text for c in table.rows[0][1:]] == ["50 (2.00 ms)", "12 (8.00 ms)", "25 (4.00 ms)"]
