"""Resolution transfer: Path-64 pretraining -> Path-X (128 x 128) / Path-256 fine-tuning.

The recipe of the FlashAttention paper (Dao et al. 2022, Appendix E.4, "Path-X and Path-256"),
the first Transformers above chance on both tasks:

1. pretrain on Path-64 (4,096 tokens) with the Pathfinder-32 hyper-parameters for 200 epochs;
2. copy every weight into the model for the larger image and upsample the learned 2-D positional
   embedding by *grid duplication* (each 64 x 64 position becomes a 2 x 2 block for 128 x 128 and a
   4 x 4 block for 256 x 256), then fine-tune 200 epochs with one epoch of linear warm-up and cosine
   decay;
3. Path-X only: take the best-validation checkpoint of that fine-tune and fine-tune another 200
   epochs with the same warm-up and learning rate (about +4 points in the paper; more overfits).

This module holds the two halves of it:

* **Initial weights** — `load_initial_weights(model, ckpt)` reads a Lightning checkpoint written by
  `lra train` (its `state_dict` and the resolved run config + data spec that `LraModule` stores as
  hyper-parameters), checks that it fits the model (same sizes, vocabulary, classes, pooling; a grid
  positional embedding and an integer upsampling factor when the image grows) and copies it in.
  Anything that does not fit is one `IncompatibleCheckpoint` (a `ValueError`) naming every mismatch.
  `InitialWeights` is the same as a Lightning callback, for a `Trainer` that builds its own module.
* **The chain** — recipes (`lra/presets/transfer/<target>.yaml`) list the stages; `run_chain`
  runs them in order as ordinary `lra.train.train` runs, each leaving its own run folder and
  `result.json`. A completed stage is skipped, an interrupted one resumes from its `last.ckpt`, and
  each stage that starts from another one records where its weights came from in `init.json`.
  Stage lengths are given in epochs and turned into optimizer steps from the size of the training
  split (and `estimate_cost` turns them into GPU-hours from measured step times).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pytorch_lightning as pl
import torch
from torch import nn

from lra.config import (PRESET_DIR, ModelConfig, RunConfig, RunLocation, parse_devices, parse_overrides,
                        read_yaml_mapping, resolve)
from lra.model import DataSpec, MultiHeadSelfAttention
from lra.positional import AxialPositionalEmbedding, GridPositionalEmbedding, upsample_axial, upsample_grid
from lra.records import RECORD_NAME, atomic_write_text, read_record

# Lightning checkpoints of `LraModule` prefix every weight with the attribute holding the network.
STATE_PREFIX = "model."
INIT_RECORD = "init.json"

# Model-config fields that must agree between a checkpoint and the model it initialises, with the
# words an error uses for them.
ARCHITECTURE_FIELDS = {
    "dim": "width (model.dim)",
    "depth": "depth (model.depth)",
    "num_heads": "heads (model.num_heads)",
    "head_dim": "head dim (model.head_dim)",
    "mlp_dim": "MLP width (model.mlp_dim)",
    "pooling": "pooling (model.pooling)",
    "activation": "activation (model.activation)",
    "positional": "positional embedding (model.positional)",
    "pixel_embedding": "pixel embedding (model.pixel_embedding)",
}


class IncompatibleCheckpoint(ValueError):
    """The checkpoint cannot initialise the model; the message names the file and every mismatch."""


# ================================================================================================
# reading a checkpoint
# ================================================================================================
@dataclass(frozen=True)
class SourceCheckpoint:
    """What a checkpoint of an `lra train` run holds that a transfer needs."""

    path: Path
    state_dict: dict            # network weights, without the "model." prefix
    config: RunConfig           # the run that wrote it
    data_spec: DataSpec

    @property
    def model_config(self) -> ModelConfig:
        return self.config.model

    def describe(self) -> str:
        shape = self.data_spec.image_shape
        size = f"{shape[0]}x{shape[1]}" if shape else f"{self.data_spec.max_len} tokens"
        return f"{self.config.task}/{self.config.attention} {self.config.run_id()} ({size})"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip().rstrip(":")


def read_checkpoint(path: str | Path) -> SourceCheckpoint:
    """Load `path` (a `.ckpt` written by `lra train`) on the CPU; IncompatibleCheckpoint if it is not one."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("**/*.ckpt"))
        hint = (f"; it holds {', '.join(found[:4])}{' ...' if len(found) > 4 else ''}" if found else
                "; pass a .ckpt file such as <run>/checkpoints/last.ckpt")
        raise IncompatibleCheckpoint(f"checkpoint {path} is a folder, not a checkpoint file{hint}")
    if not path.is_file():
        raise IncompatibleCheckpoint(f"checkpoint {path}: no such file")
    try:
        # weights_only: a checkpoint is data; nothing in it may run code when it is read.
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - zip / pickle / truncation errors all mean "not readable"
        raise IncompatibleCheckpoint(f"{path} is not a readable PyTorch checkpoint ({_first_line(err)})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("state_dict"), dict):
        what = "a bare state_dict" if isinstance(raw, dict) and raw and all(
            isinstance(v, torch.Tensor) for v in raw.values()) else f"a {type(raw).__name__}"
        raise IncompatibleCheckpoint(f"{path} is not a Lightning checkpoint of an lra run (it holds {what} "
                                     f"without 'state_dict'); use a checkpoint that `lra train` wrote")
    hparams = raw.get("hyper_parameters") or {}
    if not isinstance(hparams, dict) or "config" not in hparams or "data_spec" not in hparams:
        raise IncompatibleCheckpoint(f"{path} is a Lightning checkpoint but not of an lra run: its "
                                     f"hyper-parameters lack the run config and data spec that `lra train` stores")
    try:
        config = RunConfig.from_dict(hparams["config"])
        spec = DataSpec.from_dict(hparams["data_spec"])
    except (TypeError, ValueError) as err:
        raise IncompatibleCheckpoint(f"{path}: the run config stored in it cannot be read ({err})") from None
    state = {}
    for key, value in raw["state_dict"].items():
        if not key.startswith(STATE_PREFIX):
            continue  # metric states and the like belong to the LightningModule, not the network
        state[key[len(STATE_PREFIX):].replace("_orig_mod.", "")] = value
    if not state:
        raise IncompatibleCheckpoint(f"{path}: its state_dict holds no network weights (no '{STATE_PREFIX}*' keys)")
    return SourceCheckpoint(path=path, state_dict=state, config=config, data_spec=spec)


# ================================================================================================
# compatibility and the upsampling factor
# ================================================================================================
def _size(shape) -> str:
    return f"{shape[0]}x{shape[1]}"


def grid_factor(source_shape: tuple[int, int], target_shape: tuple[int, int]) -> int:
    """The integer k >= 1 with target = k * source on both image sides; ValueError otherwise."""
    (sh, sw), (th, tw) = source_shape, target_shape
    if th < sh or tw < sw:
        raise IncompatibleCheckpoint(f"the target image {_size(target_shape)} is smaller than the checkpoint's "
                                     f"{_size(source_shape)}: grid duplication only enlarges")
    if th % sh or tw % sw:
        raise IncompatibleCheckpoint(f"the target image {_size(target_shape)} is not an integer multiple of the "
                                     f"checkpoint's {_size(source_shape)} (factor {th / sh:g} x {tw / sw:g}); "
                                     f"grid duplication needs an integer factor")
    if th // sh != tw // sw:
        raise IncompatibleCheckpoint(f"the target image {_size(target_shape)} scales the checkpoint's "
                                     f"{_size(source_shape)} by {th // sh} x {tw // sw}: grid duplication "
                                     f"needs the same factor on both sides")
    return th // sh


def check_compatible(source: SourceCheckpoint, model_config: ModelConfig, data_spec: DataSpec) -> int:
    """Raise IncompatibleCheckpoint unless `source` can initialise a model of `model_config` for data
    `data_spec`; returns the grid-duplication factor (1 = same positions, copied as they are)."""
    src_cfg, src_spec = source.model_config, source.data_spec
    problems = []
    for name, words in ARCHITECTURE_FIELDS.items():
        a, b = getattr(src_cfg, name), getattr(model_config, name)
        if a != b:
            problems.append(f"{words} {a} in the checkpoint vs {b} here")
    if src_spec.vocab_size != data_spec.vocab_size:
        problems.append(f"vocabulary {src_spec.vocab_size} tokens in the checkpoint vs {data_spec.vocab_size} here")
    if src_spec.num_classes != data_spec.num_classes:
        problems.append(f"{src_spec.num_classes} classes in the checkpoint vs {data_spec.num_classes} here")
    if src_spec.dual != data_spec.dual:
        problems.append(f"{'dual' if src_spec.dual else 'single'}-sequence model in the checkpoint vs "
                        f"{'dual' if data_spec.dual else 'single'}-sequence here")
    if problems:
        raise IncompatibleCheckpoint(f"checkpoint {source.path} ({source.describe()}) does not fit this model: "
                                     + "; ".join(problems))

    same_positions = (src_spec.max_len == data_spec.max_len and src_spec.image_shape == data_spec.image_shape
                      and src_cfg.grid_positions == model_config.grid_positions)
    if same_positions:
        return 1  # nothing to upsample: every positional kind copies as it is
    where = f"checkpoint {source.path} ({source.describe()})"
    target = (_size(data_spec.image_shape) if data_spec.image_shape else f"{data_spec.max_len} tokens")
    if src_cfg.positional not in ("learned", "axial"):
        raise IncompatibleCheckpoint(f"{where} uses {src_cfg.positional} positions, which have no learned 2-D grid "
                                     f"to upsample to {target}; transfer needs model.positional=learned with "
                                     f"model.grid_positions=true (or model.positional=axial)")
    for side, cfg, spec in (("checkpoint", src_cfg, src_spec), ("target model", model_config, data_spec)):
        if spec.image_shape is None:
            raise IncompatibleCheckpoint(f"{where}: the {side} is not of an image task ({spec.max_len} tokens, "
                                         f"no image shape), so its positions cannot be upsampled by grid duplication")
        if cfg.positional == "learned" and not cfg.grid_positions:
            raise IncompatibleCheckpoint(f"{where}: the {side} has flat learned positions (model.grid_positions="
                                         f"false), not a 2-D grid; grid duplication needs model.grid_positions=true")
    try:
        return grid_factor(src_spec.image_shape, data_spec.image_shape)
    except IncompatibleCheckpoint as err:
        raise IncompatibleCheckpoint(f"{where}: {err}") from None


# ================================================================================================
# copying the weights
# ================================================================================================
@dataclass
class TransferReport:
    """What `load_initial_weights` did (also written to a stage's init.json)."""

    source: str
    source_run: str
    factor: int
    copied: int = 0                                     # tensors copied (upsampled ones included)
    upsampled: list = field(default_factory=list)       # grid positional tables, duplicated factor x factor
    kept: list = field(default_factory=list)            # attention-core state absent from the checkpoint
    ignored: list = field(default_factory=list)         # attention-core state of the checkpoint not used here

    def describe(self) -> str:
        text = f"initial weights from {self.source} ({self.source_run}): {self.copied} tensors copied"
        if self.upsampled:
            text += f", positional grid duplicated {self.factor}x{self.factor}"
        if self.kept:
            text += f"; kept this attention's own {', '.join(self.kept)}"
        if self.ignored:
            text += f"; ignored the checkpoint's attention state {', '.join(self.ignored)}"
        return text

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _core_prefixes(net: nn.Module) -> tuple[str, ...]:
    """Key prefixes of the attention mechanisms' own state (random features, Linformer projections)."""
    return tuple(f"{name}.core." for name, module in net.named_modules()
                 if isinstance(module, MultiHeadSelfAttention))


def transferred_state_dict(source: SourceCheckpoint, net: nn.Module, factor: int) -> tuple[dict, TransferReport]:
    """The checkpoint's weights, grid tables duplicated `factor` x `factor`, checked key by key
    against `net`'s own state. State owned by an attention mechanism (`<block>.attention.core.*`)
    may be absent on one side — e.g. Performer's random features when the checkpoint was trained
    with FlashAttention — and is then left as the model built it; everything else must match."""
    target = net.state_dict()
    # key -> (rank, what it is, its grid duplication): the (H, W, dim) grid tables, and the rows and
    # columns of axial positions, each duplicated factor times (= grid duplication of their sum)
    upsample = {f"{name}.weight": (3, "an (H, W, dim) grid", upsample_grid) for name, module in net.named_modules()
                if isinstance(module, GridPositionalEmbedding)}
    upsample.update({f"{name}.{axis}": (2, "an (L, dim) axis table", upsample_axial)
                     for name, module in net.named_modules() if isinstance(module, AxialPositionalEmbedding)
                     for axis in ("rows", "cols")})
    cores = _core_prefixes(net)
    report = TransferReport(source=str(source.path), source_run=source.describe(), factor=factor)
    missing = [k for k in target if k not in source.state_dict]
    unexpected = [k for k in source.state_dict if k not in target]
    report.kept = [k for k in missing if k.startswith(cores)]
    report.ignored = [k for k in unexpected if k.startswith(cores)]
    missing = [k for k in missing if k not in report.kept]
    unexpected = [k for k in unexpected if k not in report.ignored]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"the model has {len(missing)} weight(s) the checkpoint lacks ({', '.join(missing[:4])}"
                         f"{' ...' if len(missing) > 4 else ''})")
        if unexpected:
            parts.append(f"the checkpoint has {len(unexpected)} weight(s) the model lacks ({', '.join(unexpected[:4])}"
                         f"{' ...' if len(unexpected) > 4 else ''})")
        raise IncompatibleCheckpoint(f"checkpoint {source.path} ({source.describe()}) does not fit this model: "
                                     + "; ".join(parts))
    state: dict = {}
    for key, ref in target.items():
        if key in report.kept:
            continue
        value = source.state_dict[key]
        if not isinstance(ref, torch.Tensor) or not isinstance(value, torch.Tensor):
            if isinstance(ref, torch.Tensor) != isinstance(value, torch.Tensor):
                raise IncompatibleCheckpoint(f"checkpoint {source.path}: {key} is a {type(value).__name__} "
                                             f"but the model needs a {type(ref).__name__}")
            state[key] = value  # a module's extra state (e.g. Performer's feature-redraw counters)
            continue
        if key in upsample and factor != 1:
            rank, what, duplicate = upsample[key]
            if value.dim() != rank:
                raise IncompatibleCheckpoint(f"checkpoint {source.path}: {key} has shape {tuple(value.shape)}, "
                                             f"not {what}")
            value = duplicate(value, factor)
            report.upsampled.append(key)
        if value.shape != ref.shape:
            after = f" after {factor}x{factor} grid duplication" if key in report.upsampled else ""
            owner = (f" (state of the attention mechanism: {source.config.attention} in the checkpoint; it depends "
                     f"on the sequence length and cannot be transferred)" if key.startswith(cores) else "")
            raise IncompatibleCheckpoint(f"checkpoint {source.path}: {key} has shape {tuple(value.shape)}{after} "
                                         f"but the model needs {tuple(ref.shape)}{owner}")
        state[key] = value.to(dtype=ref.dtype) if value.is_floating_point() else value
        report.copied += 1
    if upsample and factor != 1 and not report.upsampled:
        raise IncompatibleCheckpoint(f"checkpoint {source.path}: no grid positional table to upsample")
    return state, report


def _unwrap(model: nn.Module, model_config: ModelConfig | None, data_spec: DataSpec | None):
    """(network, model config, data spec) of an `LraModule` or of a bare network plus its configs."""
    run_config = getattr(model, "run_config", None)
    if isinstance(run_config, RunConfig) and isinstance(getattr(model, "model", None), nn.Module):
        return model.model, model_config or run_config.model, data_spec or model.spec
    if model_config is None or data_spec is None:
        raise TypeError("load_initial_weights: pass model_config= and data_spec= with a bare network "
                        "(an LraModule carries both)")
    return model, model_config, data_spec


def load_initial_weights(model: nn.Module, ckpt_path: str | Path, *, model_config: ModelConfig | None = None,
                         data_spec: DataSpec | None = None) -> TransferReport:
    """Initialise `model` (an `LraModule`, or the network of `lra.model.build_model` together with its
    `model_config` and `data_spec`) from the checkpoint `ckpt_path` of an `lra train` run.

    Every weight is copied; the grid positional table is upsampled by duplication with factor
    target side / source side (64 -> 128: 2, 64 -> 256: 4). Raises `IncompatibleCheckpoint` (a
    ValueError) naming the mismatch for a missing or unreadable file, a checkpoint of another
    architecture (width, depth, heads, head dim, MLP, pooling, activation), vocabulary, number of
    classes, for a non-grid positional embedding when the length changes, and for a non-integer
    factor. Nothing is modified unless everything fits.
    """
    net, model_config, data_spec = _unwrap(model, model_config, data_spec)
    source = read_checkpoint(ckpt_path)
    factor = check_compatible(source, model_config, data_spec)
    state, report = transferred_state_dict(source, net, factor)
    with torch.no_grad():
        net.load_state_dict(state, strict=False)  # strictness was checked above, key by key
    return report


class InitialWeights(pl.Callback):
    """Load initial weights into the LightningModule when a fresh `fit` starts.

    A run resumed from its own checkpoint restores its weights from there instead: the callback's
    state (saved in every checkpoint of the run) marks the run as initialised, and Lightning restores
    it before `on_fit_start`.
    """

    def __init__(self, ckpt_path: str | Path, *, verbose: bool = True, on_load=None):
        super().__init__()
        self.ckpt_path = Path(ckpt_path)
        self.verbose = verbose
        self.on_load = on_load          # called with the TransferReport on global rank 0
        self.restored = False
        self.report: TransferReport | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.restored:
            return
        self.report = load_initial_weights(pl_module, self.ckpt_path)
        if trainer.is_global_zero:
            if self.verbose:
                print(self.report.describe(), flush=True)
            if self.on_load is not None:
                self.on_load(self.report)

    def state_dict(self) -> dict:
        return {"init_from": str(self.ckpt_path)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.restored = True


# ================================================================================================
# recipes
# ================================================================================================
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


def _number(value, where: str, *, minimum: float = 0.0, allow_none: bool = False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise ValueError(f"{where}: expected a number, got {value!r}") from None
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
        epochs=_number(raw.get("epochs", 1), f"{where}: {name}.epochs", minimum=1e-9),
        warmup_epochs=_number(raw.get("warmup_epochs"), f"{where}: {name}.warmup_epochs", allow_none=True),
        evals_per_epoch=_number(raw.get("evals_per_epoch", 1), f"{where}: {name}.evals_per_epoch", minimum=1e-9),
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


# ================================================================================================
# planning: recipe + command line -> one RunConfig per stage
# ================================================================================================
@dataclass
class ChainOptions:
    """The command line of `lra transfer`, minus the target and recipe."""

    attention: str | None = None           # target stages (and scratch)
    pretrain_attention: str | None = None  # stages without an init
    seed: int = 0
    runs_dir: str = "runs"
    data_dir: str | None = None
    overrides: list = field(default_factory=list)  # key=value (every stage) or STAGE:key=value
    devices: str | None = None
    num_nodes: int | None = None
    strategy: str | None = None
    compile: bool | None = None


def split_overrides(items: Iterable[str], stage_names: list[str]) -> dict[str | None, list[tuple[str, str]]]:
    """`["optim.lr=1e-4", "pretrain:epochs=5"]` -> {None: [("optim.lr", "1e-4")], "pretrain": [("epochs", "5")]}."""
    out: dict[str | None, list[tuple[str, str]]] = {}
    for key, value in parse_overrides(list(items)):
        stage = None
        if ":" in key:
            stage, _, key = key.partition(":")
            if stage not in stage_names:
                raise ValueError(f"override {stage}:{key}={value}: no stage {stage!r}; "
                                 f"stages: {', '.join(stage_names)}")
        out.setdefault(stage, []).append((key, value))
    return out


@dataclass
class PlannedStage(RunLocation):
    """A stage resolved against the command line; `config` gets its step counts in `fix_length`."""

    spec: StageSpec
    config: RunConfig
    epochs: float
    warmup_epochs: float | None
    evals_per_epoch: float
    config_overrides: list        # key=value, applied after the epoch-derived ones
    steps_per_epoch: int | None = None
    train_examples: int | None = None
    val_batches: int | None = None  # batches of one validation (counted when the data is prepared)

    @property
    def name(self) -> str:
        return self.spec.name

    def state(self) -> str:
        """done | resume | failed | new (from the files in the run folder)."""
        record = _read(self.record_path)
        if record is not None and record.get("status") == "completed":
            return "done"
        if (self.run_dir / "checkpoints" / "last.ckpt").exists():
            return "resume"
        if record is not None and record.get("status") in ("failed", "oom"):
            return "failed"
        return "new"


def _read(path: Path) -> dict | None:
    try:
        return read_record(path) if path.exists() else None
    except (OSError, ValueError):
        return None


def plan_chain(recipe: Recipe, options: ChainOptions, *, from_scratch: bool = False) -> list[PlannedStage]:
    """The stages to run, in order (the pretrain/fine-tune chain, or the scratch baseline alone),
    each with its resolved config (step counts still those of the base preset; see `fix_length`)."""
    names = recipe.stage_names()
    from_recipe = split_overrides(recipe.overrides, names)
    from_cli = split_overrides(options.overrides, names)
    for key, value in [*from_recipe.get(None, []), *from_cli.get(None, [])]:
        if key == PRESET_KEY:
            raise ValueError(f"override preset={value}: name the stage it renames (STAGE:preset=NAME); "
                             "every stage of a chain keeps its own preset name")
    if from_scratch:
        if recipe.scratch is None:
            raise ValueError(f"recipe {recipe.name!r} ({recipe.source}) has no scratch baseline")
        specs = [recipe.scratch]
    else:
        specs = list(recipe.stages)
    planned = []
    for spec in specs:
        knobs = {"epochs": spec.epochs, "warmup_epochs": spec.warmup_epochs, "evals_per_epoch": spec.evals_per_epoch}
        config_items = []
        preset = spec.preset
        # Later wins: the recipe's overrides for every stage, the stage's own, then the command line's
        # for every stage and for this one.
        ordered = [*from_recipe.get(None, []), *from_recipe.get(spec.name, []), *parse_overrides(spec.overrides),
                   *from_cli.get(None, []), *from_cli.get(spec.name, [])]
        for key, value in ordered:
            if key in EPOCH_KEYS:
                knobs[key] = _number(value, f"override {key}", minimum=0.0 if key == "warmup_epochs" else 1e-9,
                                     allow_none=key == "warmup_epochs" and value.lower() in ("none", ""))
            elif key == PRESET_KEY:
                if not PRESET_NAME.fullmatch(value):
                    raise ValueError(f"override {spec.name}:preset={value!r}: a preset name is letters, digits "
                                     "and . _ + - (it becomes part of the run directory's name)")
                preset = value
            else:
                config_items.append(f"{key}={value}")
        if spec.is_target:
            attention = options.attention or spec.attention or recipe.attention
        else:
            attention = options.pretrain_attention or spec.attention or recipe.pretrain_attention
        # The recipe's options of this attention come first, so `attention.<option>=` overrides win.
        recipe_options = [f"attention.{k}={'none' if v is None else v}"
                          for k, v in (recipe.attention_options.get(attention) or {}).items()]
        config_items = recipe_options + config_items
        base_items = [i for i in config_items if not i.startswith(("train.max_steps=", "optim.warmup_steps=",
                                                                   "train.val_check_interval="))]
        config = resolve(spec.task, attention, preset=spec.base_preset, seed=options.seed, overrides=base_items,
                         runs_dir=options.runs_dir, data_dir=options.data_dir, devices=options.devices,
                         num_nodes=options.num_nodes, strategy=options.strategy, compile=options.compile)
        config = dataclasses.replace(config, preset=preset)
        planned.append(PlannedStage(spec=spec, config=config, epochs=knobs["epochs"],
                                    warmup_epochs=knobs["warmup_epochs"], evals_per_epoch=knobs["evals_per_epoch"],
                                    config_overrides=config_items))
    return planned


def world_size(config: RunConfig) -> int:
    """Processes a run trains on: devices per node x nodes (`auto`: every visible GPU, else 1)."""
    devices = parse_devices(config.train.devices)
    if devices == "auto":
        per_node = torch.cuda.device_count() if torch.cuda.is_available() else 1
    elif isinstance(devices, list):
        per_node = len(devices)
    else:
        per_node = int(devices)
    return max(1, per_node) * max(1, config.train.num_nodes)


def steps_per_epoch(train_examples: int, config: RunConfig, *, batches_one_device: int | None = None) -> int:
    """Optimizer steps in one pass over `train_examples` examples: per device ceil(n / world) examples
    in batches of train.batch_size, one step every train.accumulate_grad_batches batches."""
    world = world_size(config)
    if world == 1 and batches_one_device is not None:
        batches = batches_one_device
    else:
        batches = math.ceil(math.ceil(train_examples / world) / config.train.batch_size)
    return max(1, math.ceil(batches / config.train.accumulate_grad_batches))


def fix_length(stage: PlannedStage, train_examples: int, *, batches_one_device: int | None = None) -> None:
    """Turn the stage's epochs into train.max_steps / optim.warmup_steps / train.val_check_interval,
    then re-apply the stage's explicit config overrides (an explicit train.max_steps wins)."""
    per_epoch = steps_per_epoch(train_examples, stage.config, batches_one_device=batches_one_device)
    stage.steps_per_epoch, stage.train_examples = per_epoch, train_examples
    items = [f"train.max_steps={max(1, round(stage.epochs * per_epoch))}",
             f"train.val_check_interval={max(1, round(per_epoch / stage.evals_per_epoch))}"]
    if stage.warmup_epochs is not None:
        items.append(f"optim.warmup_steps={round(stage.warmup_epochs * per_epoch)}")
    c = stage.config
    config = resolve(c.task, c.attention, preset=stage.spec.base_preset, seed=c.seed,
                     overrides=[*items, *stage.config_overrides], attention_options=dict(c.attention_options),
                     runs_dir=c.runs_dir, data_dir=c.data.data_dir, devices=c.train.devices,
                     num_nodes=c.train.num_nodes, strategy=c.train.strategy, compile=c.train.compile)
    stage.config = dataclasses.replace(config, preset=c.preset)


def data_key(config: RunConfig) -> tuple:
    """Stages with equal keys read the same data in the same batches (counted once)."""
    c = config
    return (c.task, c.data.data_dir, c.data.source, c.data.difficulty, c.data.limit_train, c.data.limit_eval,
            c.data.seq_len, c.train.batch_size, c.train.limit_val_batches, c.seed)


def prepare_stage_data(stage: PlannedStage) -> tuple[int, int]:
    """Generate / check the stage's data and count its splits: (training examples, training batches
    on one device); the validation batches per evaluation go to `stage.val_batches`."""
    from lra.train import build_datamodule, resolve_runtime

    config = stage.config
    dm = build_datamodule(config, resolve_runtime(config))
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    try:
        examples = len(loader.dataset)
    except TypeError:
        examples = len(loader) * config.train.batch_size
    try:
        val_batches = len(dm.val_dataloader())
        limit = config.train.limit_val_batches
        stage.val_batches = min(val_batches, limit) if limit else val_batches
    except (TypeError, NotImplementedError):
        stage.val_batches = None
    return int(examples), int(len(loader))


# ================================================================================================
# running the chain
# ================================================================================================
def stage_checkpoint(run_dir: Path, which: str) -> Path:
    """`last.ckpt` or the best-validation checkpoint of a finished run."""
    ckpt_dir = Path(run_dir) / "checkpoints"
    if which == "last":
        path = ckpt_dir / "last.ckpt"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the stage in {run_dir} left no last checkpoint")
        return path
    best = sorted(ckpt_dir.glob("best-*.ckpt"))
    if len(best) == 1:
        return best[0]
    if len(best) > 1:  # a best checkpoint left behind by an earlier session: ask the run which one won
        last = ckpt_dir / "last.ckpt"
        if last.is_file():
            raw = torch.load(last, map_location="cpu", weights_only=True)
            for key, value in (raw.get("callbacks") or {}).items():
                if key.startswith("ModelCheckpoint") and value.get("best_model_path"):
                    chosen = ckpt_dir / Path(value["best_model_path"]).name
                    if chosen.is_file():
                        return chosen
        raise ValueError(f"{ckpt_dir} holds several best checkpoints ({', '.join(p.name for p in best)}) and "
                         f"last.ckpt does not say which one is best; keep only one")
    raise FileNotFoundError(f"no best-*.ckpt in {ckpt_dir}: the stage in {run_dir} never validated")


def _init_record(stage: PlannedStage, source: PlannedStage, ckpt: Path, report: TransferReport | None) -> dict:
    digest = hashlib.sha256(ckpt.read_bytes()).hexdigest()[:16]
    return {"stage": stage.name, "init_from_stage": source.name, "checkpoint": stage.spec.init_checkpoint,
            "source_run": f"{source.config.task}/{source.config.attention}/{source.config.run_id()}",
            "source_path": str(ckpt), "source_sha256": digest,
            "transfer": report.to_dict() if report is not None else None}


def _check_init_matches(stage: PlannedStage, source: PlannedStage) -> None:
    """A stage that already started must have started from the checkpoint the chain now asks for."""
    path = stage.run_dir / INIT_RECORD
    if not path.exists():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: unreadable ({err}); it records where stage {stage.name!r} started from") from None
    wanted = f"{source.config.task}/{source.config.attention}/{source.config.run_id()}"
    if recorded.get("source_run") != wanted or recorded.get("checkpoint") != stage.spec.init_checkpoint:
        raise ValueError(f"stage {stage.name!r} in {stage.run_dir} started from {recorded.get('source_run')} "
                         f"({recorded.get('checkpoint')} checkpoint), but the chain now starts it from {wanted} "
                         f"({stage.spec.init_checkpoint} checkpoint); use another --runs folder or remove that run")


def _say(text: str) -> None:
    print(text, flush=True)


def describe_plan(stages: list[PlannedStage]) -> str:
    """One line per stage: state, run, length, where its weights come from, run folder."""
    lines = []
    for i, stage in enumerate(stages, 1):
        c = stage.config
        init = (f", from {stage.spec.init_stage} ({stage.spec.init_checkpoint})" if stage.spec.init_stage else "")
        if stage.steps_per_epoch:
            length = (f"{stage.epochs:g} epochs x {stage.steps_per_epoch:,} = {c.train.max_steps:,} steps of "
                      f"{c.train.batch_size}")
            state, where = stage.state(), str(stage.run_dir)
        else:  # the run id depends on the step count, known once the training split is counted
            length, state = f"{stage.epochs:g} epochs", "?"
            where = str(Path(c.runs_dir) / c.task / c.attention / f"{c.preset}-...")
        lines.append(f"  [{i}/{len(stages)}] {stage.name:<10} {state:<7} {c.task}/{c.attention} "
                     f"preset {c.preset}, {length}{init} -> {where}")
    return "\n".join(lines)


def run_chain(stages: list[PlannedStage], *, progress_bar: bool | None = None, train_fn=None,
              say=_say) -> list[dict]:
    """Prepare the data of every stage, then run the stages in order; returns their records.

    A completed stage is skipped, an interrupted one resumes from its last.ckpt, a failed one is
    retried (resuming when it left a checkpoint). A stage that fails raises `lra.train.RunFailed`
    (its record says why) and stops the chain: later stages need its weights.
    """
    from lra.train import is_global_zero
    from lra.train import train as default_train

    train_fn = train_fn or default_train
    by_name = {s.name: s for s in stages}
    say("data:")
    counted: dict[tuple, tuple] = {}
    for stage in stages:
        key = data_key(stage.config)
        if key not in counted:
            examples, batches = prepare_stage_data(stage)
            counted[key] = (examples, batches, stage.val_batches)
            say(f"  {stage.config.task}: {examples:,} training examples ({stage.config.data.data_dir})")
        examples, batches, stage.val_batches = counted[key]
        fix_length(stage, examples, batches_one_device=batches)
    say("stages:\n" + describe_plan(stages))

    records = []
    for i, stage in enumerate(stages, 1):
        head = f"[{i}/{len(stages)}] {stage.name}: {stage.config.task}/{stage.config.attention}"
        source = by_name.get(stage.spec.init_stage) if stage.spec.init_stage else None
        if stage.spec.init_stage and source is None:
            raise ValueError(f"stage {stage.name!r} starts from {stage.spec.init_stage!r}, which is not in this chain")
        if source is not None:
            _check_init_matches(stage, source)
        state = stage.state()
        if state == "done":
            say(f"{head} already completed, skipped ({stage.record_path})")
            records.append(_read(stage.record_path))
            continue
        callbacks = []
        if source is not None and state == "resume":
            # The run restores its own weights; the callback is there so that its saved state finds
            # its owner (it will not load anything: `InitialWeights.load_state_dict` marks it done).
            try:
                callbacks.append(InitialWeights(stage_checkpoint(source.run_dir, stage.spec.init_checkpoint)))
            except (FileNotFoundError, ValueError):
                pass
            say(f"{head} resumes from its last.ckpt")
        elif source is not None:
            ckpt = stage_checkpoint(source.run_dir, stage.spec.init_checkpoint)
            # Refuse an incompatible checkpoint before anything of this stage is written.
            check_compatible(read_checkpoint(ckpt), stage.config.model, _data_spec(stage.config))
            init_path = stage.run_dir / INIT_RECORD

            def write_init(report, stage=stage, source=source, ckpt=ckpt, path=init_path):
                if is_global_zero():  # under DDP every rank runs the chain; one writes
                    atomic_write_text(path, json.dumps(_init_record(stage, source, ckpt, report), indent=2) + "\n")

            write_init(None)  # before training: an interrupted stage still says where it started from
            callbacks.append(InitialWeights(ckpt, on_load=write_init))
            say(f"{head} starts from {ckpt}")
        else:
            say(f"{head} {'resumes from its last.ckpt' if state == 'resume' else 'starts'}")
        record = train_fn(stage.config, resume=True, callbacks=callbacks, progress_bar=progress_bar)
        records.append(record)
        say(f"{head} {record.get('status')}: best val {_pct(record.get('best_val_acc'))}, "
            f"test {_pct(record.get('test_acc'))}")
    return records


def _data_spec(config: RunConfig) -> DataSpec:
    from lra.train import build_datamodule, resolve_runtime

    return DataSpec.from_datamodule(build_datamodule(config, resolve_runtime(config)))


def _pct(value) -> str:
    return f"{value:.2%}" if isinstance(value, (int, float)) else "-"


def chain_summary(stages: list[PlannedStage]):
    """One row per stage from its result.json (pandas DataFrame)."""
    import pandas as pd

    from lra.table import format_duration

    rows = []
    for stage in stages:
        record = _read(stage.record_path) or {}
        init = _read_json(stage.run_dir / INIT_RECORD)
        rows.append({
            "stage": stage.name, "task": stage.config.task, "attention": stage.config.attention,
            "preset": stage.config.preset,
            "init": f"{init['init_from_stage']} ({init['checkpoint']})" if init else "-",
            "status": record.get("status", "not run"),
            "epochs": record.get("epochs"), "steps": record.get("steps"),
            "best val %": _pct100(record.get("best_val_acc")), "test %": _pct100(record.get("test_acc")),
            "train time": format_duration(record["wall_time_s"]) if record.get("wall_time_s") else None,
            "ms/step": round(record["step_time_ms"], 1) if record.get("step_time_ms") else None,
            "peak GiB": round(record["peak_mem_gb"], 2) if record.get("peak_mem_gb") else None,
        })
    return pd.DataFrame(rows)


def _pct100(value):
    return round(100.0 * value, 2) if isinstance(value, (int, float)) else None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    except (OSError, json.JSONDecodeError):
        return None


# ================================================================================================
# cost of the recipe from measured step times
# ================================================================================================
@dataclass
class StageCost:
    """Inputs of one stage's cost: GPU-hours = devices x (steps x ms/step + evals x val_batches x ms/val) / 3.6e6."""

    stage: str
    task: str
    attention: str
    batch_size: int
    devices: int
    steps_per_epoch: int
    epochs: float
    evals: int                      # validations over the whole stage
    val_batches: int | None         # batches per validation (None: unknown)
    step_ms: float | None           # measured training step (forward + backward + optimizer)
    val_ms: float | None = None     # measured validation batch; None: estimated from step_ms (below)
    step_source: str = ""
    accumulate: int = 1             # micro-batches per optimizer step (a validation batch is one of them)

    @property
    def steps(self) -> int:
        return max(1, round(self.epochs * self.steps_per_epoch))

    def hours(self) -> dict:
        if self.step_ms is None:
            return {"train_h": None, "val_h": None, "gpu_h": None}
        train_h = self.steps * self.step_ms / 3.6e6
        val_ms = self.val_ms if self.val_ms is not None else self.step_ms / self.accumulate / 3.0
        val_h = self.evals * (self.val_batches or 0) * val_ms / 3.6e6
        return {"train_h": train_h, "val_h": val_h, "gpu_h": self.devices * (train_h + val_h)}


def estimate_cost(stages: Iterable[StageCost]):
    """GPU-hours per stage and in total (a pandas DataFrame; the last row is the total).

    Training: steps = steps_per_epoch x epochs, each taking the measured `step_ms` (the `step_time_ms`
    of a run record: a training step after warm-up, validation excluded). Validation: `evals`
    passes of `val_batches` batches; a validation batch is a forward pass only over one micro-batch,
    so without a measurement it is taken as step_ms / accumulate / 3 (forward ~ 1/3 of forward +
    backward; an optimizer step of `accumulate` micro-batches costs `accumulate` of them). Wall hours times
    the number of GPUs gives GPU-hours. A stage without a measured step time shows no hours.
    """
    import pandas as pd

    rows = []
    for s in stages:
        hours = s.hours()
        rows.append({"stage": s.stage, "task": s.task, "attention": s.attention, "batch": s.batch_size,
                     "GPUs": s.devices, "steps/epoch": s.steps_per_epoch, "epochs": s.epochs, "steps": s.steps,
                     "ms/step": s.step_ms, "step time from": s.step_source or "-",
                     "evals": s.evals, "val batches": s.val_batches, **hours})
    df = pd.DataFrame(rows)
    if not df.empty:
        known = df["gpu_h"].notna()
        total = {c: None for c in df.columns}
        total.update(stage="total", steps=int(df["steps"].sum()),
                     train_h=df.loc[known, "train_h"].sum() if known.any() else None,
                     val_h=df.loc[known, "val_h"].sum() if known.any() else None,
                     gpu_h=df.loc[known, "gpu_h"].sum() if known.all() else None)
        df = pd.concat([df, pd.DataFrame([total])], ignore_index=True)
    return df


def measured_step_ms(stage: PlannedStage, roots: Iterable[Path]) -> tuple[float | None, str]:
    """The step time of the stage's own record, else of the newest record with the same task,
    attention, batch size, model width/depth and precision under `roots`."""
    own = _read(stage.record_path)
    if own and own.get("step_time_ms"):
        return float(own["step_time_ms"]), str(stage.record_path)
    c = stage.config
    best = None
    for root in roots:
        for path in sorted(Path(root).glob(f"{c.task}/{c.attention}/*/{RECORD_NAME}")):
            record = _read(path)
            if not record or not record.get("step_time_ms"):
                continue
            rc = record.get("config") or {}
            model, train_cfg = rc.get("model") or {}, rc.get("train") or {}
            if (record.get("batch_size") != c.train.batch_size or model.get("dim") != c.model.dim
                    or model.get("depth") != c.model.depth or record.get("attention_options") != c.attention_options
                    or train_cfg.get("accumulate_grad_batches", 1) != c.train.accumulate_grad_batches):
                continue
            if best is None or str(record.get("created", "")) > str(best[1].get("created", "")):
                best = (path, record)
    if best is None:
        return None, ""
    return float(best[1]["step_time_ms"]), str(best[0])


def measure_command(stage: PlannedStage, steps: int = 60) -> str:
    """An `lra train` command that measures the stage's step time (a short run; see result.json)."""
    c = stage.config
    options = " ".join(f"attention.{k}={v}" for k, v in sorted(c.attention_options.items()) if v is not None)
    data = f"--data-dir {shlex.quote(str(c.data.data_dir))} " if c.data.data_dir else ""
    return (f"lra train --task {c.task} --attention {c.attention} --preset {stage.spec.base_preset} "
            f"--runs-dir runs-measure {data}train.batch_size={c.train.batch_size} "
            f"train.accumulate_grad_batches={c.train.accumulate_grad_batches} train.max_steps={steps} "
            f"train.val_check_interval={steps} train.limit_val_batches=2 optim.warmup_steps=10 "
            f"data.limit_train={steps * c.train.batch_size * c.train.accumulate_grad_batches} "
            f"data.limit_eval={2 * c.train.batch_size} {options}").strip()


def print_table(df, *, file=None) -> None:
    print(df.to_markdown(index=False, floatfmt=".3g"), file=file)
