"""The stages of a campaign: the target's preset names the stage it starts from (train.init_from: a task, read as a
folder of the campaign's state), that one the stage before it, and so on back to a stage that starts from scratch.

`configs/path-x.yaml`'s curriculum preset starts from `path-64`, whose preset starts from `pathfinder`: the chain
Pathfinder-32 -> Path-64 -> Path-X lives in the YAML, one line per link, beside what the paper does there.
Every stage must build the same model (only the positional table may differ in length: it is upsampled), or one
could not start from another; settings that hold no weights (dropout, packing, mean or mean_all pooling) may differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from attention_impls import BACKENDS
from lra.core.errors import ConfigError
from lra.train.config import RunConfig, available_configs, load_config

MAX_STAGES = 8


@dataclass(frozen=True)
class Stage:
    """One stage: its 1-based place, its task (also its folder in the state) and its resolved config."""

    index: int
    task: str
    config: RunConfig

    @property
    def init_from(self) -> str | None:
        return self.config.train.init_from

    @property
    def steps(self) -> int:
        return self.config.train.steps


def split_sets(items: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """`--set` values into (for every stage, {task: for that stage only}): 'path-x:train.lr=5e-4' is Path-X's."""
    common: list[str] = []
    per_stage: dict[str, list[str]] = {}
    for item in items:
        key = item.partition("=")[0]
        if ":" in key:
            task, _, rest = item.partition(":")
            if not task or not rest:
                raise ConfigError(f"--set {item!r}: a stage's setting is TASK:KEY=VALUE, e.g. path-x:train.lr=5e-4")
            per_stage.setdefault(task, []).append(rest)
        else:
            common.append(item)
    return common, per_stage


def plan_stages(target: str, *, attn: str, preset: str, seed: int, overrides: list[str]) -> list[Stage]:
    """The stages that lead to `target`, first stage first, each resolved with `preset`, `seed` and `overrides`
    (`--set` values: 'KEY=VALUE' for every stage, 'TASK:KEY=VALUE' for one), as a run of `attn` sees it."""
    BACKENDS.get(attn)  # an unknown backend fails here, naming the known ones, before a state folder is written
    common, per_stage = split_sets(overrides)
    chain: list[tuple[str, RunConfig]] = []
    task: str | None = target
    while task is not None:
        if task in (t for t, _ in chain):
            raise ConfigError(f"campaign {target}: train.init_from goes round in a circle at {task}")
        if task not in available_configs():
            where = f"{chain[-1][0]}'s train.init_from" if chain else "the target"
            raise ConfigError(f"campaign {target}: {where} names {task!r}, which is no task; known: "
                              f"{', '.join(available_configs())}")  # fmt: skip
        config = load_config(task, preset, [*common, *per_stage.get(task, []), f"train.seed={seed}"], backend=attn)
        chain.append((task, config.for_backend(attn)))
        task = config.train.init_from
        if len(chain) > MAX_STAGES:
            raise ConfigError(f"campaign {target}: more than {MAX_STAGES} stages; check the train.init_from chain")
    unknown = sorted(set(per_stage) - {t for t, _ in chain})
    if unknown:
        raise ConfigError(f"--set {unknown[0]}:...: {unknown[0]} is no stage of this campaign "
                          f"({' -> '.join(t for t, _ in reversed(chain))})")  # fmt: skip
    stages = [Stage(i, t, c) for i, (t, c) in enumerate(reversed(chain), 1)]
    check_same_model(stages)
    masked = [s.task for s in stages if s.config.train.objective != "classify"]
    if masked:
        raise ConfigError(f"campaign: stage {masked[0]} has train.objective=masked; a campaign's stages classify "
                          "(self-pretrain with `lra run TASK --set train.objective=masked` and start a run from it "
                          "with train.init_from)")  # fmt: skip
    return stages


# Model settings that hold no weights, so a stage may set its own: dropout rates, packing, and a pooling among those
# that add no parameter (cls adds its token).
FREE = ("dropout", "attention_dropout", "pack_tokens")
FREE_POOLS = ("mean", "mean_all")


def check_same_model(stages: list[Stage]) -> None:
    """Every stage's model settings equal the first's, but for those that hold no weights (FREE, FREE_POOLS): the
    weights carry over (positions aside)."""
    first = stages[0]
    model = first.config.to_dict()["model"]
    for stage in stages[1:]:
        theirs = stage.config.to_dict()["model"]
        pools_free = {model.get("pool"), theirs.get("pool")} <= set(FREE_POOLS)
        diffs = [k for k in sorted(model) if model[k] != theirs.get(k) and k not in FREE
                 and not (k == "pool" and pools_free)]  # fmt: skip
        if diffs:
            key = diffs[0]
            raise ConfigError(
                f"campaign: stage {stage.task} builds another model than {first.task} (model.{key}: "
                f"{theirs[key]!r} vs {model[key]!r}); one starts from the other, so "
                "their models must match (set it for every stage, or with TASK:model.KEY=... for one)"
            )
