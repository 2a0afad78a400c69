"""Transfer recipes: the chains of `lra train` runs in `lra/presets/transfer/<target>.yaml`.

A recipe names its stages in order; each stage is a run of one task from a section (`base_preset`)
of that task's preset file, recorded under its own preset name, with its length in epochs and,
for a fine-tune, the stage whose checkpoint initialises it. `lra.transfer_chain` plans and runs them.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from lra.coercion import coerce
from lra.config import PRESET_DIR, read_yaml_mapping

RECIPE_DIR = PRESET_DIR / "transfer"
TARGETS = ("pathx", "path256")
STAGE_KEYS = {"task", "preset", "base_preset", "attention", "epochs", "warmup_epochs", "evals_per_epoch",
              "init", "overrides"}
EPOCH_KEYS = ("epochs", "warmup_epochs", "evals_per_epoch")  # recipe-level knobs an override may set
# `STAGE:preset=NAME` records a stage under another preset name (run id, table rows, plot curves),
# e.g. a pretraining variant with other hyper-parameters that must not share rows with the recipe's.
PRESET_KEY = "preset"
PRESET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
SCRATCH = "scratch"


@dataclass
class StageSpec:
    """One stage of a recipe: an `lra train` run of `task` whose length is given in epochs."""

    name: str
    task: str
    preset: str                      # recorded in the run (run id, tables): names the stage's role
    base_preset: str = "paper"       # section of lra/presets/<task>.yaml the run starts from
    attention: str | None = None     # None: the recipe's attention (target stages) / pretrain_attention
    epochs: float = 1.0
    warmup_epochs: float | None = None   # None: keep the base preset's optim.warmup_steps
    evals_per_epoch: float = 1.0
    init_stage: str | None = None    # stage whose checkpoint initialises this one
    init_checkpoint: str = "best"    # best | last
    overrides: list = field(default_factory=list)

    @property
    def is_target(self) -> bool:
        """Stages on the target task use the recipe's (or --attention's) attention."""
        return self.init_stage is not None or self.name == SCRATCH


@dataclass
class Recipe:
    target: str
    name: str
    attention: str
    pretrain_attention: str
    stages: list                                # [StageSpec] in order; `scratch` is separate
    scratch: StageSpec | None = None
    attention_options: dict = field(default_factory=dict)   # {attention: {option: value}}
    overrides: list = field(default_factory=list)           # applied to every stage
    source: str = ""

    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages] + ([SCRATCH] if self.scratch else [])


def recipe_path(target: str) -> Path:
    return RECIPE_DIR / f"{target}.yaml"


def recipe_names(target: str) -> list[str]:
    return [k for k in _load_recipe_file(target) if not str(k).startswith("_")]


def _load_recipe_file(target: str) -> dict:
    if target not in TARGETS:
        raise ValueError(f"unknown transfer target {target!r}; choose from {', '.join(TARGETS)}")
    path = recipe_path(target)
    if not path.is_file():
        raise ValueError(f"no transfer recipes for {target!r}: {path} is missing")
    return read_yaml_mapping(path, "recipe names to recipes")


def _override_list(value, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, dict):
        return [f"{k}={'none' if v is None else v}" for k, v in value.items()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{where}: overrides must be a mapping key: value or a list of key=value strings")


def parse_number(value, where: str, *, minimum: float = 0.0, allow_none: bool = False):
    """A finite number >= `minimum` (or None when allowed); ValueError naming `where`."""
    if value is None and allow_none:
        return None
    value = coerce(value, float, where)
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{where}: must be a number >= {minimum:g}, got {value!r}")
    return float(value)


def _stage_spec(name: str, raw, where: str) -> StageSpec:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: stage {name!r} must be a mapping")
    unknown = set(raw) - STAGE_KEYS
    if unknown:
        raise ValueError(f"{where}: stage {name!r} has unknown key(s) {sorted(unknown)}; allowed: {sorted(STAGE_KEYS)}")
    for key in ("task", "preset"):
        if not raw.get(key):
            raise ValueError(f"{where}: stage {name!r} needs {key!r}")
    init = raw.get("init")
    init_stage, init_checkpoint = None, "best"
    if init is not None:
        if not isinstance(init, dict) or set(init) - {"from", "checkpoint"} or "from" not in init:
            raise ValueError(f"{where}: stage {name!r}: init must be {{from: STAGE, checkpoint: best|last}}")
        init_stage, init_checkpoint = str(init["from"]), str(init.get("checkpoint", "best"))
        if init_checkpoint not in ("best", "last"):
            raise ValueError(f"{where}: stage {name!r}: init.checkpoint must be best or last, got {init_checkpoint!r}")
    return StageSpec(
        name=name, task=str(raw["task"]), preset=str(raw["preset"]),
        base_preset=str(raw.get("base_preset", "paper")), attention=raw.get("attention"),
        epochs=parse_number(raw.get("epochs", 1), f"{where}: {name}.epochs", minimum=1e-9),
        warmup_epochs=parse_number(raw.get("warmup_epochs"), f"{where}: {name}.warmup_epochs", allow_none=True),
        evals_per_epoch=parse_number(raw.get("evals_per_epoch", 1), f"{where}: {name}.evals_per_epoch", minimum=1e-9),
        init_stage=init_stage, init_checkpoint=init_checkpoint,
        overrides=_override_list(raw.get("overrides"), f"{where}: stage {name!r}"))


def load_recipe(target: str, name: str) -> Recipe:
    """Recipe `name` of `lra/presets/transfer/<target>.yaml`."""
    data = _load_recipe_file(target)
    where = f"{recipe_path(target).name} [{name}]"
    if name not in data or str(name).startswith("_"):
        raise ValueError(f"no transfer recipe {name!r} for target {target}; available: "
                         f"{', '.join(recipe_names(target))}")
    raw = data[name] or {}
    allowed = {"attention", "pretrain_attention", "attention_options", "overrides", "stages", "scratch"}
    unknown = set(raw) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    if not isinstance(raw.get("stages"), dict) or not raw["stages"]:
        raise ValueError(f"{where}: 'stages' must be a non-empty mapping of stage names to stages")
    stages = [_stage_spec(str(k), v, where) for k, v in raw["stages"].items()]
    names = [s.name for s in stages]
    if SCRATCH in names:
        raise ValueError(f"{where}: {SCRATCH!r} is reserved for the from-scratch baseline")
    for i, stage in enumerate(stages):
        if stage.init_stage is not None and stage.init_stage not in names[:i]:
            raise ValueError(f"{where}: stage {stage.name!r} starts from {stage.init_stage!r}, "
                             f"which is not an earlier stage ({', '.join(names[:i]) or 'none'})")
    scratch = _stage_spec(SCRATCH, raw["scratch"], where) if raw.get("scratch") is not None else None
    if scratch is not None and scratch.init_stage is not None:
        raise ValueError(f"{where}: the scratch baseline cannot start from another stage")
    options = raw.get("attention_options") or {}
    if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
        raise ValueError(f"{where}: attention_options must map attention names to option mappings")
    attention = str(raw.get("attention") or "flash")
    return Recipe(target=target, name=name, attention=attention,
                  pretrain_attention=str(raw.get("pretrain_attention") or attention), stages=stages,
                  scratch=scratch, attention_options=options,
                  overrides=_override_list(raw.get("overrides"), where), source=str(recipe_path(target)))
