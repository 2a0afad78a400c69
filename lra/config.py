"""Typed run configuration: dataclasses, per-task YAML presets and `key=value` overrides.

A run is fully described by one `RunConfig`, resolved in three layers, later ones winning:

1. the dataclass defaults below (a neutral, runnable model; the numbers that matter live in presets),
2. one section (`paper`, `smoke`, ...) of the task's preset file `lra/presets/<task>.yaml`,
3. overrides from the command line, `section.field=value` strings such as `model.dim=128`,
   `optim.lr=3e-4`, `train.max_steps=200`, `data.seq_len=512`, or `attention.<option>=value` for the
   options of the chosen attention (those are typed and checked by the attention registry).

Values are converted to the field's declared type by `lra.coercion.coerce` (the rules the attention
options follow too); unknown keys and values that do not fit are a `ValueError` that names the key,
the value and what would be accepted.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

import yaml

from lra.coercion import coerce
from lra.records import RECORD_NAME

PRESET_DIR = Path(__file__).resolve().parent / "presets"

# Section names a preset or an override may use, mapped to the dataclass that types them.
SECTIONS = ("model", "optim", "data", "train")


@dataclass
class ModelConfig:
    """Encoder sizes and structure (see `lra.model`)."""

    dim: int = 64                    # embedding / residual width
    depth: int = 2                   # number of pre-LN Transformer blocks
    num_heads: int = 2
    head_dim: int = 32               # per-head width; num_heads * head_dim need not equal dim
    mlp_dim: int = 128               # hidden width of the block MLP and of the classifier head
    dropout: float = 0.1             # embedding, residual and MLP dropout
    attention_dropout: float = 0.1   # passed to the attention as its `dropout` context option
    # learned = one vector per position (the paper setting); axial = learned row + column vectors
    # summed (pixel tasks only; lra/positional.py); sinusoidal = fixed; none.
    positional: Literal["learned", "axial", "sinusoidal", "none"] = "learned"
    # Learned positions of pixel tasks are a (H, W, dim) grid, so a checkpoint can be upsampled to a
    # larger image by grid duplication (Path-64 -> Path-X). False: one flat (N, dim) table.
    grid_positions: bool = True
    pooling: Literal["mean", "cls"] = "mean"   # mean over non-padded tokens, or a learned CLS token
    activation: Literal["gelu", "relu"] = "gelu"
    init_std: float = 0.02           # normal init of token / position embeddings
    norm_eps: float = 1e-5
    # Pixel tasks: how a pixel value becomes a vector. token = one learned vector per value 0..255
    # (the LRA and Nystromformer code, the paper setting); linear = the intensity v / 255 times a
    # learned vector plus a bias (a continuous encoder, as S4-style LRA pipelines feed pixels), so
    # neighbouring intensities get neighbouring inputs and no single rare value is its own token.
    pixel_embedding: Literal["token", "linear"] = "token"


@dataclass
class OptimConfig:
    """AdamW with a per-step learning-rate schedule: linear warm-up, then decay.

    `schedule` (every one spans `train.max_steps` optimizer steps):
      linear | cosine  warm-up from lr/warmup_steps to `lr` over `warmup_steps` steps, then linear or
                       cosine decay to `min_lr_ratio * lr` at max_steps;
      constant         the same warm-up, then `lr`;
      onecycle         torch's OneCycleLR exactly as the Nystromformer LRA code (and so FlashAttention's
                       LRA runs) uses it: pct_start = warmup_steps / max_steps, linear anneal, torch's
                       defaults — lr rises linearly from lr/25 to `lr` at step warmup_steps - 1 (0-based),
                       then falls linearly to lr/25/1e4 at the last step; AdamW's beta1 cycles
                       0.95 -> 0.85 -> 0.95 alongside, so `beta1` and `min_lr_ratio` are not used.
                       Needs 0 < warmup_steps < max_steps.
    """

    lr: float = 1e-4
    beta1: float = 0.9               # ignored by schedule=onecycle, which cycles beta1 itself
    beta2: float = 0.999
    eps: float = 1e-6
    weight_decay: float = 0.0        # applied to weight matrices only (not biases, norms, embeddings)
    warmup_steps: int = 100
    schedule: Literal["linear", "cosine", "constant", "onecycle"] = "linear"
    min_lr_ratio: float = 0.0        # final lr as a fraction of `lr` (linear and cosine decay only)
    grad_clip: float = 1.0           # max global gradient norm; 0 disables clipping
    fused: Optional[bool] = None     # fused AdamW kernel; None = auto (on when training on CUDA)


@dataclass
class DataConfig:
    """Where the data comes from and how much of it is used (see `tasks.build_datamodule`)."""

    seq_len: Optional[int] = None    # tokens per sequence; None = the task's own length
    data_dir: Optional[str] = None  # None = the tasks' default: $LRA_DATA, else ./data
    source: str = "auto"             # auto | generated | official | tfds | local (task-dependent)
    num_workers: Optional[int] = None  # DataLoader workers; None = auto (4 with CUDA, else 0)
    limit_train: Optional[int] = None  # use only the first N training examples
    limit_eval: Optional[int] = None   # ... and N validation / test examples
    # Pathfinder tasks only: contour length of the images, easy (6) | intermediate (9) | hard (14);
    # None = the task's default, hard (the LRA benchmark's). Generated data, or the matching folder
    # of the official release (curv_baseline, curv_contour_length_9, curv_contour_length_14).
    difficulty: Optional[str] = None
    # label-preserving training augmentation: none | dihedral (Pathfinder: the 8 rotations and
    # mirrors) | hflip (Pathfinder, Image); every training image once per variant per epoch
    # (tasks.base). Validation and test images are never augmented.
    augment: str = "none"


@dataclass
class TrainConfig:
    """The Lightning Trainer: steps, evaluation cadence, precision, compilation, devices."""

    batch_size: int = 32             # per device (DDP multiplies it by the world size)
    max_steps: int = 1000            # optimizer steps
    # wall-clock limit of the training loop (Lightning's max_time); the run stops at whichever of
    # max_steps / max_minutes comes first, and the LR schedule still spans max_steps
    max_minutes: Optional[float] = None
    val_check_interval: int = 100    # validate every N optimizer steps (and after the last one)
    limit_val_batches: Optional[int] = None  # None = the whole validation split
    accumulate_grad_batches: int = 1
    precision: str = "auto"          # auto = bf16-mixed on CUDA (16-mixed without bf16), 32-true on CPU
    compile: Optional[bool] = None   # torch.compile the model; None = auto (on with CUDA)
    # torch.compile's mode (COMPILE_MODES), used only when the model is compiled; a speed setting,
    # not part of the run id
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    throughput_warmup_steps: int = 10  # steps left out of the throughput / step-time figures
    devices: str = "auto"            # Lightning `devices`: auto, a count, or a list such as "0,1"
    num_nodes: int = 1
    strategy: str = "auto"           # Lightning strategy: auto, ddp, ddp_spawn, fsdp, ...
    # Lightning deterministic mode; it also selects the two-pass (atomics-free) dropout backward of
    # our kernels, bit-reproducible but slower (kernels.dropout: the default backward sums dQ atomically)
    deterministic: bool = False
    # Start from the weights of this `lra train` checkpoint (a smaller image's grid positions are
    # upsampled by duplication: Path-64 -> Path-X / Path-256); see `lra.checkpoint_transfer`.
    init_from: Optional[str] = None


@dataclass
class RunConfig:
    """Everything one training run needs; `run_id()` names it deterministically."""

    task: str
    attention: str
    preset: str = "paper"
    seed: int = 0
    attention_options: dict = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    runs_dir: str = "runs"
    # What identifies the data the run reads (`tasks.base.DataSource.identity`: the source actually
    # used — for `data.source=auto`, the one found on disk — with a generator's name, version and
    # parameters, or released files' names and sizes). Filled in by `resolve_data_identity`, never
    # set by hand; part of the run id, so runs on different data never share a folder.
    data_identity: Optional[dict] = None

    # ---- identity -------------------------------------------------------------------------------
    def identity(self) -> dict:
        """The settings that change what a run computes (paths, workers and the like excluded)."""
        return identity_of(self.to_dict())

    def resolve_data_identity(self) -> dict | None:
        """`data_identity`, looked up (and kept) the first time; None while no source can serve the
        task (the run then stops at its start with the data error)."""
        if self.data_identity is None:
            import tasks.build

            d = self.data
            try:
                self.data_identity = tasks.build.data_identity(
                    self.task, data_dir=d.data_dir, source=d.source, seq_len=d.seq_len,
                    limit_train=d.limit_train, limit_eval=d.limit_eval, difficulty=d.difficulty)
            except (FileNotFoundError, ValueError):
                return None
        return self.data_identity

    def options_hash(self) -> str:
        self.resolve_data_identity()
        text = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:8]

    def run_id(self) -> str:
        """`<preset>-n<seq_len>-s<seed>-<hash>`: equal configs get equal ids on every machine."""
        n = self.data.seq_len if self.data.seq_len is not None else "auto"
        return f"{self.preset}-n{n}-s{self.seed}-{self.options_hash()}"

    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.task / self.attention / self.run_id()

    def record_path(self) -> Path:
        """The run's result.json."""
        return self.run_dir() / RECORD_NAME

    # ---- (de)serialisation ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunConfig":
        data = dict(data)
        sections = {name: _build_section(name, data.pop(name, {}) or {}, where="config")
                    for name in SECTIONS}
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"config: unknown top-level key(s) {sorted(unknown)}")
        return cls(**data, **sections)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def identity_of(config: dict) -> dict:
    """`RunConfig.identity` of a config as a plain dict (`RunConfig.to_dict`, or a run record's
    `config`, which may predate some keys): a copy without the keys that do not change what a run
    computes — where files live, workers, the run's name and seed, the sequence length (in the run
    id), and speed settings."""
    out = {key: (dict(value) if isinstance(value, dict) else value) for key, value in config.items()}
    for key in ("runs_dir", "task", "attention", "preset", "seed"):
        out.pop(key, None)
    if out.get("data_identity") is None:
        out.pop("data_identity", None)
    data, train = out.get("data") or {}, out.get("train") or {}
    for key in ("data_dir", "num_workers", "seq_len"):
        data.pop(key, None)
    if data.get("difficulty", None) is None:  # the default: ids of runs made before the key existed stay
        data.pop("difficulty", None)
    if data.get("augment", "none") == "none":  # likewise
        data.pop("augment", None)
    model = out.get("model") or {}
    if model.get("pixel_embedding", "token") == "token":  # likewise
        model.pop("pixel_embedding", None)
    for key in ("compile", "compile_mode", "throughput_warmup_steps"):  # speed and its measurement, not results
        train.pop(key, None)
    return out


class RunLocation:
    """Mixin of the planned-run records of `lra sweep` and `lra transfer` (anything with a
    `config: RunConfig`): where the run lives, from the config, in one place."""

    config: RunConfig

    @property
    def run_dir(self) -> Path:
        return self.config.run_dir()

    @property
    def record_path(self) -> Path:
        """The run's result.json."""
        return self.config.record_path()


SECTION_TYPES = {"model": ModelConfig, "optim": OptimConfig, "data": DataConfig, "train": TrainConfig}


def _field_types(cls) -> dict:
    return typing.get_type_hints(cls)


def _unknown_key(key: str, known: list[str]) -> ValueError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"
    return ValueError(f"unknown config key {key!r}{hint}")


def _build_section(name: str, values: dict, *, where: str):
    cls = SECTION_TYPES[name]
    if not isinstance(values, dict):
        raise ValueError(f"{where}: section {name!r} must be a mapping, got {values!r}")
    hints = _field_types(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in hints:
            raise ValueError(f"{where}: {_unknown_key(f'{name}.{key}', [f'{name}.{k}' for k in hints])}")
        kwargs[key] = coerce(value, hints[key], f"{name}.{key}")
    return cls(**kwargs)


# ---- presets ------------------------------------------------------------------------------------
def preset_path(task: str) -> Path:
    return PRESET_DIR / f"{task}.yaml"


def preset_tasks() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def read_yaml_mapping(path: Path, entries: str) -> dict:
    """A YAML file holding a mapping (of ``entries``, for the error); ValueError naming the file if
    it is not valid YAML or not a mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: invalid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of {entries}")
    return data


def load_preset_file(task: str) -> dict:
    path = preset_path(task)
    if not path.is_file():
        raise ValueError(f"no preset file for task {task!r} ({path}); tasks with presets: "
                         f"{', '.join(preset_tasks())}")
    return read_yaml_mapping(path, "preset names to sections")


def preset_names(task: str) -> list[str]:
    return [name for name in load_preset_file(task) if not name.startswith("_")]


def load_preset(task: str, preset: str) -> dict:
    """The raw section `preset` of `lra/presets/<task>.yaml` (sections, `attention_options`)."""
    presets = load_preset_file(task)
    if preset not in presets or preset.startswith("_"):
        names = [n for n in presets if not n.startswith("_")]
        raise ValueError(f"task {task!r} has no preset {preset!r}; available: {', '.join(names)}")
    section = presets[preset] or {}
    allowed = set(SECTIONS) | {"attention_options"}
    unknown = set(section) - allowed
    if unknown:
        raise ValueError(f"{preset_path(task)}: preset {preset!r} has unknown section(s) "
                         f"{sorted(unknown)}; allowed: {sorted(allowed)}")
    return section


# ---- overrides ----------------------------------------------------------------------------------
def parse_overrides(items: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """`["model.dim=32", ...]` -> `[("model.dim", "32"), ...]`; malformed items are a ValueError."""
    out = []
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"override {item!r} is not of the form key=value (e.g. model.dim=128)")
        out.append((key, value.strip()))
    return out


TOP_LEVEL_OVERRIDES = {"seed": int}


def _all_keys() -> list[str]:
    keys = [f"{name}.{k}" for name, cls in SECTION_TYPES.items() for k in _field_types(cls)]
    return keys + list(TOP_LEVEL_OVERRIDES) + ["attention.<option>"]


def resolve(task: str, attention: str, *, preset: str = "paper", seed: int = 0,
            seq_len: int | None = None, overrides: list[str] | tuple[str, ...] = (),
            attention_options: dict | None = None, runs_dir: str | Path | None = None,
            data_dir: str | Path | None = None, devices: str | int | None = None,
            num_nodes: int | None = None, strategy: str | None = None,
            compile: bool | None = None, compile_mode: str | None = None) -> RunConfig:
    """Defaults <- preset section <- overrides (and the explicit keyword arguments, which win)."""
    section = load_preset(task, preset)
    where = f"{preset_path(task).name} [{preset}]"
    values = {name: dict(section.get(name) or {}) for name in SECTIONS}
    for name in SECTIONS:
        if not isinstance(section.get(name) or {}, dict):
            raise ValueError(f"{where}: section {name!r} must be a mapping")
    preset_attention = (section.get("attention_options") or {}).get(attention) or {}
    options = dict(preset_attention)
    top = {"seed": seed}

    for key, value in parse_overrides(overrides):
        head, _, rest = key.partition(".")
        if head == "attention" and rest:
            options[rest] = value
        elif head in SECTION_TYPES and rest:
            hints = _field_types(SECTION_TYPES[head])
            if rest not in hints:
                raise _unknown_key(key, _all_keys())
            values[head][rest] = value
        elif key in TOP_LEVEL_OVERRIDES and not rest:
            top[key] = coerce(value, TOP_LEVEL_OVERRIDES[key], key)
        else:
            raise _unknown_key(key, _all_keys())

    options.update(attention_options or {})
    options = resolve_attention_options(attention, options)
    if seq_len is not None:
        values["data"]["seq_len"] = seq_len
    if data_dir is not None:
        values["data"]["data_dir"] = str(data_dir)
    for key, value in (("devices", devices), ("num_nodes", num_nodes), ("strategy", strategy),
                       ("compile", compile), ("compile_mode", compile_mode)):
        if value is not None:
            values["train"][key] = value

    sections = {name: _build_section(name, values[name], where=where) for name in SECTIONS}
    config = RunConfig(task=task, attention=attention, preset=preset, seed=int(top["seed"]),
                       attention_options=options, runs_dir=str(runs_dir or "runs"), **sections)
    validate(config)
    return config


# Context options the model passes to every attention layer, and the config key that sets each.
MODEL_SET_OPTIONS = {"num_heads": "model.num_heads", "head_dim": "model.head_dim",
                     "max_len": "data.seq_len (or --seq-len)", "dropout": "model.attention_dropout",
                     "layer_idx": "nothing (the layer index)", "seed": "--seed"}


def resolve_attention_options(attention: str, options: dict) -> dict:
    """The attention's own options, typed by the registry, with its defaults filled in."""
    from lra import attention as registry

    if attention not in registry.available():
        raise ValueError(f"unknown attention {attention!r}; available: {', '.join(registry.available())}")
    clash = [key for key in options if key in MODEL_SET_OPTIONS]
    if clash:
        raise ValueError("attention option(s) " + ", ".join(repr(c) for c in clash) + " are set by the "
                         "model; use " + ", ".join(MODEL_SET_OPTIONS[c] for c in clash) + " instead")
    return registry.resolve_options(attention, **options)


# `train.compile_mode`: the modes of torch.compile(mode=...).
COMPILE_MODES = typing.get_args(typing.get_type_hints(TrainConfig)["compile_mode"])

# `train.precision`: auto (see lra.train.resolve_runtime) or a value Lightning's Trainer accepts.
PRECISIONS = ("auto", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true",
              "transformer-engine", "transformer-engine-float16", "32", "16", "bf16", "64")


def parse_devices(value) -> object:
    """`train.devices` (`--devices`) as Lightning's `devices`: "auto", a count >= 1 (or -1, all GPUs),
    or a list of GPU indices ("0,1"); ValueError for anything else."""
    text = str(value).strip()
    if text == "auto":
        return "auto"
    error = ValueError(f"train.devices: expected auto, a count or a list like 0,1; got {value!r}")
    try:
        if "," in text:
            indices = [int(v) for v in text.split(",") if v.strip()]
            if not indices or min(indices) < 0:
                raise error
            return indices
        count = int(text)
    except ValueError:
        raise error from None
    if count == 0 or count < -1:
        raise ValueError(f"train.devices: a count must be >= 1 (or -1 for all devices), got {count}")
    return count


def validate(config: RunConfig) -> None:
    """Value checks that need no task or attention (those are checked where they are built)."""
    m, o, d, t = config.model, config.optim, config.data, config.train
    for name in SECTIONS:
        for key, value in dataclasses.asdict(getattr(config, name)).items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name}.{key} must be a finite number, got {value}")
    positive = {"model.dim": m.dim, "model.depth": m.depth, "model.num_heads": m.num_heads,
                "model.head_dim": m.head_dim, "model.mlp_dim": m.mlp_dim,
                "train.batch_size": t.batch_size, "train.max_steps": t.max_steps,
                "train.val_check_interval": t.val_check_interval,
                "train.accumulate_grad_batches": t.accumulate_grad_batches,
                "train.num_nodes": t.num_nodes, "optim.lr": o.lr}
    for key, value in positive.items():
        if value <= 0:
            raise ValueError(f"{key} must be > 0, got {value}")
    for key, value in {"model.dropout": m.dropout, "model.attention_dropout": m.attention_dropout}.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{key} must be in [0, 1), got {value}")
    nonneg = {"optim.warmup_steps": o.warmup_steps, "optim.weight_decay": o.weight_decay,
              "optim.grad_clip": o.grad_clip, "optim.eps": o.eps,
              "train.throughput_warmup_steps": t.throughput_warmup_steps}
    for key, value in nonneg.items():
        if value < 0:
            raise ValueError(f"{key} must be >= 0, got {value}")
    if not 0.0 <= o.min_lr_ratio <= 1.0:
        raise ValueError(f"optim.min_lr_ratio must be in [0, 1], got {o.min_lr_ratio}")
    for key, value in {"optim.beta1": o.beta1, "optim.beta2": o.beta2}.items():
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{key} must be in [0, 1), got {value}")
    if d.difficulty is not None:
        if not config.task.startswith("path"):
            raise ValueError(f"data.difficulty applies to the Pathfinder tasks only, not {config.task}")
        from tasks.pathfinder_gen import DIFFICULTIES  # light: numpy only

        if d.difficulty not in DIFFICULTIES:
            raise ValueError(f"data.difficulty must be one of {', '.join(DIFFICULTIES)} (contour length 6, 9, 14) "
                             f"or none, got {d.difficulty!r}")
    # model settings that only pixel tasks have a meaning for
    pixel_only = [text for text, chosen in (
        (f"model.pixel_embedding={m.pixel_embedding}", m.pixel_embedding != "token"),
        ("model.positional=axial (learned row + column vectors)", m.positional == "axial")) if chosen]
    if d.augment != "none" or pixel_only:
        from tasks.registry import TASKS, check_augment  # light: dataclasses only

        spec = TASKS.get(config.task)  # an unknown task is reported where the task is built
        if spec is not None:
            check_augment(spec, d.augment)
            if pixel_only and not spec.is_pixel:
                raise ValueError(f"{pixel_only[0]} applies to pixel tasks (image, Pathfinder, Path-X, Path-256) only, "
                                 f"not {config.task}")
    if t.max_minutes is not None and not t.max_minutes > 0:
        raise ValueError(f"train.max_minutes must be > 0 (or none), got {t.max_minutes}")
    for key, value in {"data.seq_len": d.seq_len, "data.limit_train": d.limit_train,
                       "data.limit_eval": d.limit_eval, "train.limit_val_batches": t.limit_val_batches}.items():
        if value is not None and value <= 0:
            raise ValueError(f"{key} must be > 0 (or none), got {value}")
    if d.num_workers is not None and d.num_workers < 0:
        raise ValueError(f"data.num_workers must be >= 0, got {d.num_workers}")
    if o.warmup_steps > t.max_steps:
        raise ValueError(f"optim.warmup_steps ({o.warmup_steps}) exceeds train.max_steps ({t.max_steps})")
    if o.schedule == "onecycle":
        if not 0 < o.warmup_steps < t.max_steps:
            raise ValueError(f"optim.schedule=onecycle needs 0 < optim.warmup_steps < train.max_steps (its "
                             f"warm-up is the fraction warmup_steps / max_steps of one cycle), got "
                             f"warmup_steps={o.warmup_steps}, max_steps={t.max_steps}")
        if o.min_lr_ratio != 0.0:
            raise ValueError(f"optim.min_lr_ratio={o.min_lr_ratio} does not apply to optim.schedule=onecycle "
                             "(its final lr is lr/25/1e4, as in torch's OneCycleLR); leave it at 0")
    if t.compile_mode not in COMPILE_MODES:
        raise ValueError(f"train.compile_mode: {t.compile_mode!r} is not one of {', '.join(COMPILE_MODES)} "
                         "(torch.compile's modes)")
    if t.precision not in PRECISIONS:
        raise ValueError(f"train.precision: {t.precision!r} is not one of {', '.join(PRECISIONS)}")
    parse_devices(t.devices)
    if t.strategy != "auto":
        from pytorch_lightning.strategies import StrategyRegistry

        known = ["auto", *StrategyRegistry.available_strategies()]
        if t.strategy not in known:
            close = difflib.get_close_matches(t.strategy, known, n=1)
            raise ValueError(f"train.strategy: unknown Lightning strategy {t.strategy!r}"
                             + (f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"))
    if t.strategy.split("_find_unused")[0] in ("ddp_spawn", "ddp_fork", "ddp_notebook"):
        raise ValueError(f"train.strategy={t.strategy!r}: spawned/forked workers train in child processes "
                         "whose checkpoints and statistics never reach the run record; use "
                         "--strategy ddp (Lightning starts one process per device and joins them)")
    if config.seed < 0:
        raise ValueError(f"seed must be >= 0, got {config.seed}")
