"""The transfer chain: a recipe (`lra.transfer_recipe`) and the command line of `lra transfer` ->
one planned `lra train` run per stage -> the stages run in order.

Each stage is an ordinary `lra.train.train` run with its own run folder and `result.json`. A
completed stage is skipped, an interrupted one resumes from its `last.ckpt`, and each stage that
starts from another one records where its weights came from in `init.json`. Stage lengths are given
in epochs and turned into optimizer steps from the size of the training split (`fix_length`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import torch

from lra.checkpoint_transfer import InitialWeights, TransferReport, check_compatible, read_checkpoint
from lra.checkpoints import run_checkpoint
from lra.config import RunConfig, RunLocation, parse_devices, parse_overrides, resolve
from lra.model import DataSpec
from lra.records import atomic_write_text, read_record
from lra.train import build_datamodule, is_global_zero, resolve_runtime, train
from lra.transfer_recipe import EPOCH_KEYS, PRESET_KEY, PRESET_NAME, Recipe, StageSpec, parse_number

INIT_RECORD = "init.json"

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
        record = existing_record(self.record_path)
        if record is not None and record.get("status") == "completed":
            return "done"
        if (self.run_dir / "checkpoints" / "last.ckpt").exists():
            return "resume"
        if record is not None and record.get("status") in ("failed", "oom"):
            return "failed"
        return "new"


def existing_record(path: Path) -> dict | None:
    """The run record at `path`, or None when there is none or it cannot be read."""
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
                knobs[key] = parse_number(value, f"override {key}", minimum=0.0 if key == "warmup_epochs" else 1e-9,
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


def count_without_data(stage: PlannedStage) -> bool:
    """Fix the stage's length from the split sizes its data source knows without the data (a
    generator's counts; :meth:`tasks.base.DataSource.planned_split_sizes`): True when it could, the
    validation batches per evaluation then in `stage.val_batches`."""
    config = stage.config
    sizes = build_datamodule(config, resolve_runtime(config)).source.planned_split_sizes()
    if not sizes:
        return False
    fix_length(stage, sizes["train"])
    batches = math.ceil(sizes["val"] / config.train.batch_size)
    limit = config.train.limit_val_batches
    stage.val_batches = min(batches, limit) if limit else batches
    return True


def prepare_stage_data(stage: PlannedStage) -> tuple[int, int]:
    """Generate / check the stage's data and count its splits: (training examples, training batches
    on one device); the validation batches per evaluation go to `stage.val_batches`."""
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
                         f"({stage.spec.init_checkpoint} checkpoint); use another --runs-dir or remove that run")


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
    """Prepare the data of every stage (`prepare_chain`), then run the stages in order (`train_chain`);
    returns their records."""
    prepare_chain(stages, say=say)
    return train_chain(stages, progress_bar=progress_bar, train_fn=train_fn, say=say)


def prepare_chain(stages: list[PlannedStage], *, say=_say) -> None:
    """The data step: generate / check every stage's data, count its training split and fix the
    stage's length from it (`fix_length`)."""
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


def train_chain(stages: list[PlannedStage], *, progress_bar: bool | None = None, train_fn=None,
                say=_say) -> list[dict]:
    """Run the stages in order, their lengths fixed (`prepare_chain`); returns their records.

    A completed stage is skipped, an interrupted one resumes from its last.ckpt, a failed one is
    retried (resuming when it left a checkpoint). A stage that fails raises `lra.train.RunFailed`
    (its record says why) and stops the chain: later stages need its weights.
    """
    train_fn = train_fn or train
    by_name = {s.name: s for s in stages}
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
            records.append(existing_record(stage.record_path))
            continue
        callbacks = []
        if source is not None and state == "resume":
            # The run restores its own weights; the callback is there so that its saved state finds
            # its owner (it will not load anything: `InitialWeights.load_state_dict` marks it done).
            try:
                callbacks.append(InitialWeights(run_checkpoint(source.run_dir, stage.spec.init_checkpoint)))
            except (FileNotFoundError, ValueError):
                pass
            say(f"{head} resumes from its last.ckpt")
        elif source is not None:
            ckpt = run_checkpoint(source.run_dir, stage.spec.init_checkpoint)
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
    return DataSpec.from_datamodule(build_datamodule(config, resolve_runtime(config)))


def _pct(value) -> str:
    return f"{value:.2%}" if isinstance(value, (int, float)) else "-"


def chain_summary(stages: list[PlannedStage]):
    """One row per stage from its result.json (pandas DataFrame)."""
    import pandas as pd

    from lra.table import format_duration

    rows = []
    for stage in stages:
        record = existing_record(stage.record_path) or {}
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
