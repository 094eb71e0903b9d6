"""The result records' schema: one constructor per record kind, a `schema` version in each, and the one reader.

Every writer builds its record here (`run_record`, `bench_train_record`, `bench_attention_record`,
`bench_tiles_record`, `markers_baseline_record`, `numerics_forward_record`, `numerics_figure_record`,
`numerics_weights_record`), and every consumer reads records through `read_record` (the results store's
`load_records` does), which upgrades a record of an older schema to the current shape in memory; the files on disk
are never rewritten. A record without a `schema` field is version 0: what the writers stored before this module. Its
upgrade adds the fields the writers of the time did not write yet, with the value they meant by their absence, and
renames the ones that changed name; fields the schema does not know (a curated record's `provenance`, say) are kept
as they are.

`compile` is one shape in every record that has it: {"mode": the mode the steps took, "requested": the mode asked
for, "fallback": why compilation fell back to eager, or None}. A config's `train.compile` stays the string setting
it is (the config hash covers it); a bare string in a record's `compile` is upgraded to the dict.

Schema 2 adds a `bench_attention` record's `options`: the options its backend was built with beyond the shape ({} in
older records: the backend's defaults). `backend_label` names a backend with them, as tables show it. Each upgrade
only adds what a record lacks (or renames what it has under an old name), so one set serves any older version.

The module sits in `lra.core` because the training layer writes run records and sits below `lra.results`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from lra.core.errors import DataCorruptError

SCHEMA = 2
Record = dict[str, Any]

ENV_FIELDS = ("device", "torch", "triton", "python", "git_commit", "date")  # lra.core.environment.environment()
EAGER = {"mode": "none", "requested": "none", "fallback": None}  # the step before train.compile existed


def compile_info(value: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """`value` in the record's one `compile` shape: a dict as it is; a mode string as that mode taken without
    fallback; None (a record from before train.compile) as the eager step."""
    if value is None:
        return dict(EAGER)
    if isinstance(value, str):
        return {"mode": value, "requested": value, "fallback": None}
    mode = value["mode"]
    return {"mode": mode, "requested": value.get("requested", mode), "fallback": value.get("fallback")}


def _record(kind: str, env: Mapping[str, Any], fields: dict[str, Any]) -> Record:
    """A record of `kind`: the schema version, the environment fields of `env` (None where it lacks one), `fields`."""
    return {"schema": SCHEMA, "kind": kind, **{k: env.get(k) for k in ENV_FIELDS}, **fields}


def run_record(
    *,
    task: str,
    backend: str,
    preset: str,
    steps: int,
    seq_len: int,
    world_size: int,
    metrics: dict[str, Any],
    config: dict[str, Any],
    config_hash: str,
    compile: Mapping[str, Any] | str | None,
    attention_dropout_applied: bool | None,
    history: list[dict[str, Any]],
    sessions: list[dict[str, Any]],
    run_dir: str,
    env: Mapping[str, Any],
    kind: str = "run",
) -> Record:
    """A finished `lra run` (kind 'run'; 'pretrain' for train.objective=masked, whose figures name hidden tokens and
    stay out of the accuracy tables): its test and validation figures in `metrics`, the resolved config and its
    hash, the evaluation history, and the calls (`sessions`: steps and seconds of each, a run resumed across
    machines has several). `attention_dropout_applied`: None when the run asked for no attention dropout,
    False when its backend applies none."""
    fields = {"task": task, "backend": backend, "preset": preset, "steps": steps, "seq_len": seq_len}
    fields |= {"world_size": world_size, "metrics": metrics, "config": config, "config_hash": config_hash}
    fields |= {"compile": compile_info(compile), "attention_dropout_applied": attention_dropout_applied}
    return _record(kind, env, {**fields, "history": history, "sessions": sessions, "run_dir": run_dir})


def bench_train_record(
    *,
    task: str,
    backend: str,
    preset: str,
    seq_len: int,
    batch_size: int,
    config: dict[str, Any],
    config_hash: str,
    timed_steps: int,
    world_size: int,
    data: str,
    data_on_device: bool | None,
    status: str,
    compile: Mapping[str, Any] | str | None,
    attention_dropout_applied: bool | None,
    metrics: dict[str, Any],
    env: Mapping[str, Any],
) -> Record:
    """One `lra bench train` measurement (kind 'bench_train'): status 'ok' with timing `metrics`, 'oom' or
    'unsupported: why' with none. `data`: what the steps ran on (task data or synthetic tokens)."""
    fields = {"task": task, "backend": backend, "preset": preset, "seq_len": seq_len, "batch_size": batch_size}
    fields |= {"config": config, "config_hash": config_hash, "timed_steps": timed_steps, "world_size": world_size}
    fields |= {"data": data, "data_on_device": data_on_device, "status": status, "compile": compile_info(compile)}
    return _record("bench_train", env, {**fields, "attention_dropout_applied": attention_dropout_applied,
                                        "metrics": metrics})  # fmt: skip


def backend_label(rec: Mapping[str, Any]) -> str:
    """A bench attention record's (or row's) backend with its `options`, as tables show it: 'flash' without,
    'flash[block_m=64,compact_padding=true]' with (values as `--set` takes them, options sorted)."""
    options = rec.get("options") or {}
    if not options:
        return str(rec["backend"])
    shown = (f"{k}={v if isinstance(v, str) else json.dumps(v, default=str)}" for k, v in sorted(options.items()))
    return f"{rec['backend']}[{','.join(shown)}]"


def bench_attention_record(
    *,
    backend: str,
    seq: int,
    head_dim: int,
    heads: int,
    batch: int,
    dtype: str,
    mode: str,
    dropout: float,
    dropout_effective: float,
    ms: float | None,
    tflops: float | None,
    peak_mem_mb: float | None,
    density: float,
    layout: str | None,
    status: str,
    device: str,
    env: Mapping[str, Any],
    options: Mapping[str, Any] | None = None,
) -> Record:
    """One `lra bench attention` row (kind 'bench_attention'): one backend at one shape and mode. `device` is the
    GPU's name (it replaces env's); `dropout_effective` the dropout the backend applies (flash quantises p);
    `options` the backend's options beyond the shape (None: its defaults)."""
    shape = {"backend": backend, "seq": seq, "head_dim": head_dim, "heads": heads, "batch": batch, "dtype": dtype}
    timing = {"ms": ms, "tflops": tflops, "peak_mem_mb": peak_mem_mb, "density": density, "layout": layout}
    fields = {**shape, "mode": mode, "dropout": dropout, "dropout_effective": dropout_effective, **timing}
    fields |= {"status": status, "options": dict(options or {})}
    return _record("bench_attention", {**env, "device": device}, fields)


def bench_tiles_record(
    *, dtype: str, dropout: float, results: list[dict[str, Any]], env: Mapping[str, Any], backend: str = "flash"
) -> Record:
    """The `lra bench tiles` sweep (kind 'bench_tiles'): per head dim every candidate's time and the best tiles."""
    return _record("bench_tiles", env, {"backend": backend, "dtype": dtype, "dropout": dropout, "results": results})


def markers_baseline_record(
    *, task: str, preset: str, data: dict[str, Any], metrics: dict[str, Any], env: Mapping[str, Any]
) -> Record:
    """What the two markers' places alone tell on a generated Pathfinder task (kind 'markers_baseline', `lra data
    markers`): `data` the generator setting and the images used, `metrics` each markers-only classifier's test
    accuracy and the majority class's."""
    return _record("markers_baseline", env, {"task": task, "preset": preset, "data": data, "metrics": metrics})


def numerics_forward_record(
    *, backend: str, inputs: str, study: dict[str, Any], metrics: dict[str, Any], env: Mapping[str, Any]
) -> Record:
    """One implementation's forward deviation study (kind 'numerics_forward'): `inputs` 'normal' or 'outlier',
    `study` the study's settings, `metrics` the deviation per dtype at the representative length and every row."""
    return _record("numerics_forward", env, {"backend": backend, "inputs": inputs, "study": study, "metrics": metrics})


def numerics_figure_record(
    *,
    figure: str,
    title: str,
    inputs: str,
    study: dict[str, Any],
    implementations: dict[str, Any],
    metrics: dict[str, Any],
    env: Mapping[str, Any],
) -> Record:
    """One figure of the numerics study (kind 'numerics_figure'): its rows and series, verdicts or drivers."""
    fields = {"figure": figure, "title": title, "inputs": inputs, "study": study}
    return _record("numerics_figure", env, {**fields, "implementations": implementations, "metrics": metrics})


def numerics_weights_record(
    *,
    task: str,
    backend_a: str,
    backends_b: list[str],
    preset: str,
    steps: int,
    controls: list[str],
    deterministic: bool,
    loss_scaling: bool | None,
    metrics: dict[str, Any],
    config: dict[str, Any],
    env: Mapping[str, Any],
) -> Record:
    """The weights study (kind 'numerics_weights'): A against each B and the controls; `backend` lists the Bs."""
    fields = {"task": task, "backend": ",".join(backends_b), "backend_a": backend_a, "backends_b": list(backends_b)}
    fields |= {"preset": preset, "steps": steps, "controls": list(controls), "deterministic": deterministic}
    return _record("numerics_weights", env, {**fields, "loss_scaling": loss_scaling, "metrics": metrics,
                                             "config": config})  # fmt: skip


def _fill(rec: Record, defaults: Mapping[str, Any]) -> None:
    for key, value in defaults.items():
        rec.setdefault(key, value)


def _upgrade_run(rec: Record) -> None:
    _fill(rec, {"world_size": 1, "attention_dropout_applied": None, "history": [], "sessions": []})
    rec["compile"] = compile_info(rec.get("compile"))


def _upgrade_bench_train(rec: Record) -> None:
    _fill(rec, {"status": "ok", "world_size": 1, "data_on_device": None, "attention_dropout_applied": None})
    rec["compile"] = compile_info(rec.get("compile"))
    if "run_dir" in rec and rec["run_dir"] is None:  # early bench records carried an always-empty run_dir
        del rec["run_dir"]


def _upgrade_bench_attention(rec: Record) -> None:
    _fill(rec, {"status": "ok", "dropout": 0.0})  # timed without dropout before the option existed
    _fill(rec, {"dropout_effective": rec["dropout"], "options": {}})  # options: schema 2


def _upgrade_numerics_weights(rec: Record) -> None:
    if "backend_b" in rec:  # the study compared A with one B
        rec.setdefault("backends_b", [rec.pop("backend_b")])
    _fill(rec, {"loss_scaling": None})


UPGRADES: dict[str, Callable[[Record], None]] = {
    "run": _upgrade_run,
    "bench_train": _upgrade_bench_train,
    "bench_attention": _upgrade_bench_attention,
    "bench_tiles": lambda rec: _fill(rec, {"dropout": 0.0}),
    "numerics_forward": lambda rec: _fill(rec, {"inputs": "normal"}),
    "numerics_figure": lambda rec: _fill(rec, {"inputs": "normal"}),
    "numerics_weights": _upgrade_numerics_weights,
}


def upgrade(record: Mapping[str, Any], *, source: str = "record") -> Record:
    """A copy of `record` in the current schema's shape (see the module doc); a record of a newer schema than this
    code reads is a DataCorruptError naming `source`."""
    version = record.get("schema", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise DataCorruptError(f"{source}: schema {version!r} is not a record schema version; fix or remove it")
    if version > SCHEMA:
        raise DataCorruptError(
            f"{source}: record schema {version} is newer than this lra reads (up to {SCHEMA}); update lra to read it"
        )
    rec = dict(record)
    if version < SCHEMA:
        _fill(rec, {k: None for k in ENV_FIELDS if k != "date"})  # every writer has always written the date
        UPGRADES.get(str(rec.get("kind")), lambda r: None)(rec)
        rec["schema"] = SCHEMA
    return rec


def read_record(path: str | os.PathLike[str]) -> Record:
    """The record in the JSON file `path`, upgraded to the current schema; an unreadable file, one that holds no
    JSON object or one of a newer schema is a DataCorruptError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataCorruptError(f"results store: {path} is not a readable JSON record ({e}); fix or remove it") from None
    if not isinstance(rec, dict):
        raise DataCorruptError(f"results store: {path} holds a {type(rec).__name__}, not a record; remove it")
    return upgrade(rec, source=f"results store: {path}")
