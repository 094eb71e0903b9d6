"""The `fly` preset resolves to the FlashAttention authors' own LRA baseline configs (HazyResearch/fly,
configs/experiment/lra/TASK/*.yaml, transcribed here by hand as the reference), and a preset's `backends:` block
reaches the runs of its backend only: in `lra run`, in a sweep's cells and hashes, and in the leaderboard's check that
a record used its preset as it stands."""

from __future__ import annotations

import math
import textwrap

import pytest

from lra.core.errors import ConfigError
from lra.train.config import config_hash, load_config

LRA_TASKS = ("listops", "text", "retrieval", "image", "pathfinder")

# Per task: transformer.yaml's model and optimizer, the epochs times ceil(training examples / batch) as steps, one
# evaluation per epoch, the attention dropout of full.yaml (and of every baseline that has attention dropout).
FLY = {
    "listops": {"model.layers": 4, "model.dim": 512, "model.heads": 8, "model.mlp_dim": 1024, "model.pool": "cls",
                "model.pos_emb": "sinusoidal", "model.attention_dropout": 0.1, "train.batch_size": 32,
                "train.lr": 0.05, "train.schedule": "rsqrt", "train.warmup": 1000, "train.weight_decay": 0.1,
                "train.steps": 10 * math.ceil(96_000 / 32), "train.eval_every": math.ceil(96_000 / 32)},
    "text": {"model.layers": 4, "model.dim": 256, "model.heads": 4, "model.mlp_dim": 1024, "model.pool": "cls",
             "model.pos_emb": "sinusoidal", "model.attention_dropout": 0.1, "train.batch_size": 32, "train.lr": 0.05,
             "train.schedule": "rsqrt", "train.warmup": 8000, "train.weight_decay": 0.1, "data.max_length": 1000,
             "train.steps": 26 * math.ceil(25_000 / 32), "train.eval_every": math.ceil(25_000 / 32)},
    "retrieval": {"model.layers": 2, "model.dim": 64, "model.heads": 2, "model.mlp_dim": 128, "model.pool": "mean",
                  "model.pos_emb": "learned", "model.attention_dropout": 0.1, "train.batch_size": 32,
                  "train.lr": 0.05, "train.schedule": "rsqrt", "train.warmup": 8000, "train.weight_decay": 0.1,
                  "train.steps": 10 * math.ceil(147_086 / 32), "train.eval_every": math.ceil(147_086 / 32)},
    "image": {"model.layers": 1, "model.dim": 128, "model.heads": 8, "model.head_dim": 8, "model.mlp_dim": 128,
              "model.dropout": 0.3, "model.pool": "cls", "model.pos_emb": "learned", "model.attention_dropout": 0.2,
              "train.batch_size": 256, "train.lr": 5e-4, "train.schedule": "cosine", "train.weight_decay": 0.0,
              "train.warmup": math.ceil(45_000 / 256), "train.steps": 200 * math.ceil(45_000 / 256),
              "train.eval_every": math.ceil(45_000 / 256)},
    "pathfinder": {"model.layers": 2, "model.dim": 64, "model.heads": 2, "model.head_dim": 16, "model.mlp_dim": 128,
                   "model.dropout": 0.2, "model.pool": "mean", "model.pos_emb": "sinusoidal",
                   "model.attention_dropout": 0.2, "train.batch_size": 512, "train.lr": 1e-3,
                   "train.schedule": "cosine", "train.weight_decay": 0.0, "train.warmup": math.ceil(160_000 / 512),
                   "train.steps": 200 * math.ceil(160_000 / 512), "train.eval_every": math.ceil(160_000 / 512)},
}  # fmt: skip
# optimizer/adamw.yaml: torch.optim.AdamW at its defaults but lr, betas and weight decay; Lightning clips none.
OPTIMIZER = {"train.betas": [0.9, 0.98], "train.eps": 1e-8, "train.grad_clip": 0, "train.eval_batches": 0}
CASES = [(task, key, value) for task in LRA_TASKS for key, value in {**FLY[task], **OPTIMIZER}.items()]

# Each method's file: performer.yaml nb_features, linformer.yaml k, reformer.yaml and smyrf.yaml bucket and cluster
# sizes, local.yaml local_context; the head dim of the reformer's softmax_temp 1/sqrt(E).
METHODS = {
    "listops": {"performer": 64, "linformer": 128, "reformer": 64, "smyrf": 64, "local": 128, "head_dim": 64},
    "text": {"performer": 32, "linformer": 64, "reformer": 32, "smyrf": 32, "local": 64, "head_dim": 64},
    "retrieval": {"performer": 128, "linformer": 256, "reformer": 128, "smyrf": 128, "local": 256, "head_dim": 32},
    "image": {"performer": 32, "linformer": 64, "reformer": 32, "smyrf": 32, "local": 64, "head_dim": 8},
    "pathfinder": {"performer": 32, "linformer": 64, "reformer": 32, "smyrf": 32, "local": 64, "head_dim": 16},
}


def _get(config, key: str):
    section, name = key.split(".")
    return config.to_dict()[section][name]


@pytest.mark.parametrize(("task", "key", "expected"), CASES, ids=[f"{t}-{k}" for t, k, _ in CASES])
def test_fly_value(task, key, expected):
    assert _get(load_config(task, "fly", backend="flash"), key) == expected


@pytest.mark.parametrize("task", LRA_TASKS)
def test_each_method_gets_its_own_file_s_options_and_no_other_backend_sees_them(task):
    want = METHODS[task]
    config = load_config(task, "fly")
    assert config.options_of("performer") == {"nb_features": want["performer"], "pad_keys": "kept"}
    linformer = {"k": want["linformer"], "drop_attention": True, "share_kv": False, "proj_init": "k"}
    assert config.options_of("linformer") == linformer
    reformer = config.options_of("reformer")
    assert (reformer["bucket_size"], reformer["n_hashes"], reformer["drop_attention"]) == (want["reformer"], 2, True)
    assert reformer["scale"] == pytest.approx(want["head_dim"] ** -0.5, rel=1e-15)
    assert config.options_of("smyrf") == {"q_cluster_size": want["smyrf"], "k_cluster_size": want["smyrf"],
                                          "n_hashes": 2}  # fmt: skip
    assert config.options_of("local") == {"window": want["local"]}
    assert config.model.resolved_head_dim == want["head_dim"]
    assert config.for_backend("flash").to_dict()["attention"] == {}


@pytest.mark.parametrize("task", LRA_TASKS)
def test_backends_block_reaches_its_backend_only(task):
    """Performer trains in fp32 (app. E.3); local pools by the mean where fly's local.yaml says MEAN; others keep the
    shared settings, and a config loaded for no backend is the shared one."""
    shared = load_config(task, "fly")
    assert load_config(task, "fly", backend="performer").train.amp == "none"
    assert load_config(task, "fly", backend="linear").train.amp == shared.train.amp == "bf16"
    assert load_config(task, "fly", backend="local").model.pool == "mean"
    assert load_config(task, "fly", backend="flash").model == shared.model
    smyrf_pool = load_config(task, "fly", backend="smyrf").model.pool
    assert smyrf_pool == ("mean" if task == "image" else shared.model.pool)


def test_set_overrides_beat_the_backends_block():
    config = load_config("listops", "fly", ["model.pool=cls", "train.amp=bf16"], backend="local")
    assert config.model.pool == "cls"
    config = load_config("listops", "fly", ["train.amp=bf16"], backend="performer")
    assert config.train.amp == "bf16"


def test_other_presets_are_untouched_by_the_backend_argument():
    for preset in (None, "fa-paper", "tiny"):
        for backend in ("local", "performer"):
            assert load_config("listops", preset, backend=backend) == load_config("listops", preset)


def test_a_sweep_cell_hashes_as_the_run_it_launches():
    from lra.sweep.grid import build_grid

    runs = build_grid(tasks=["listops"], attns=["local", "flash"], seeds=[0], presets=["fly"], overrides=[],
                      root="/tmp/unused")  # fmt: skip
    for run in runs:
        own = load_config("listops", "fly", ["train.seed=0"], backend=run.attn).for_backend(run.attn)
        assert run.config_hash == config_hash(own)
    assert runs[0].config_hash != runs[1].config_hash


def test_the_leaderboard_counts_a_run_canonical_under_its_own_backend_only():
    from lra.results.aggregate import is_canonical

    config = load_config("listops", "fly", ["train.seed=1"], backend="local").for_backend("local").to_dict()
    record = {"task": "listops", "preset": "fly", "backend": "local", "config": config}
    assert is_canonical(record)
    # The same settings under another backend are not that backend's preset (its pool is [CLS]).
    assert not is_canonical({**record, "backend": "naive", "config": {**config, "attention": {}}})


def _preset_file(tmp_path, backends: str):
    path = tmp_path / "listops-variant.yaml"
    path.write_text(textwrap.dedent(f"""\
        task: listops
        presets:
          p:
            train: {{steps: 10}}
            backends: {backends}
        """))  # fmt: skip
    return str(path)


def test_a_misspelt_backend_is_named_with_the_closest(tmp_path):
    path = _preset_file(tmp_path, "{locl: {model: {pool: mean}}}")
    with pytest.raises(ConfigError, match=r"backends\.locl: no attention backend 'locl'.*local"):
        load_config(path, "p")


def test_a_backends_block_takes_model_and_train_only(tmp_path):
    path = _preset_file(tmp_path, "{local: {attention: {local: {window: 8}}}}")
    with pytest.raises(ConfigError, match=r"model and train only.*attention\.local block"):
        load_config(path, "p", backend="local")
    path = _preset_file(tmp_path, "[local]")
    with pytest.raises(ConfigError, match="backends must map backend names"):
        load_config(path, "p")


def test_a_backends_block_setting_is_checked_like_any_other(tmp_path):
    path = _preset_file(tmp_path, "{local: {model: {pool: max}}}")
    with pytest.raises(ConfigError, match="pool"):
        load_config(path, "p", backend="local")
    path = _preset_file(tmp_path, "{local: {model: {poool: mean}}}")
    with pytest.raises(ConfigError, match="poool"):
        load_config(path, "p", backend="local")


def test_the_fly_table_puts_a_run_beside_the_paper_s_row_of_its_method():
    """A canonical fly run of `linear` lands in the preset's own accuracy table, beside the FlashAttention paper's
    Linear Attention row (38.8 on ListOps, its Table 3) and the other five baselines' rows, and in no other table."""
    from lra.results.accuracy import accuracy_tables

    def record(seed: int, acc: float) -> dict:
        config = load_config("listops", "fly", [f"train.seed={seed}"], backend="linear").for_backend("linear")
        return {"kind": "run", "task": "listops", "backend": "linear", "preset": "fly", "config": config.to_dict(),
                "metrics": {"test_acc": acc, "val_acc": acc}, "_store": "curated", "_path": f"r{seed}.json",
                "date": f"2026-12-0{seed + 1}"}  # fmt: skip

    tables = accuracy_tables([record(0, 0.30), record(1, 0.34)])
    fly = [t for t in tables if t.title.startswith("Accuracy, preset fly")]
    assert len(fly) == 1
    rows = {row[0].text: row for row in fly[0].rows}
    assert rows["linear"][1].text.startswith("32.0 ± 2.8 (n=2)")
    paper = {name: row for name, row in rows.items() if row.published}
    assert sorted(paper) == sorted(["Linformer", "Linear Attention", "Performer", "Local Attention", "Reformer",
                                    "Smyrf"])  # fmt: skip
    assert paper["Linear Attention"][1].text == "38.8"
    others = [t for t in tables if t is not fly[0]]
    assert not any(row[0].text == "linear" for t in others for row in t.rows if not row.published)
