"""`lra transfer`: the FlashAttention paper's Path-64 -> Path-X / Path-256 recipe as one resumable chain.

Stages (each an ordinary `lra train` run with its own run folder and result.json):
  data       generate / check the data of every stage and count the training splits
  pretrain   Path-64, 200 epochs (Pathfinder-32 hyper-parameters)
  finetune   the target from the pretrained checkpoint, positional grid duplicated (x2 / x4)
  finetune2  Path-X only: another 200 epochs from the fine-tune's best-validation checkpoint
  table      the stages' results and the accuracy table next to the paper's numbers
A completed stage is skipped, an interrupted one resumes from its last.ckpt: rerunning the same
command continues where it stopped. `--from-scratch` trains the baseline (the target from random
weights, same schedule and length) for the comparison.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lra.commands.train import add_hardware_arguments

EPILOG = """\
overrides are `key=value` for every stage or `STAGE:key=value` for one (stages: pretrain, finetune,
finetune2, scratch). Keys are config keys (model.dim, optim.lr, train.batch_size, data.limit_train,
attention.<option>, ...) or the recipe's epochs, warmup_epochs and evals_per_epoch, e.g. a scaled-down
run:  lra transfer --target pathx data.limit_train=20000 epochs=4 pretrain:epochs=10
`STAGE:preset=NAME` records one stage under another preset name (its own run id and table rows), for a
variant of a stage, e.g.  pretrain:optim.lr=5e-4 pretrain:preset=mini-pretrain-lr5e-4

examples:
  lra transfer --target pathx                       # the paper's recipe (GPU, many hours)
  lra transfer --target pathx --from-scratch        # the baseline: Path-X from random weights
  lra transfer --target path256 --dry-run           # the plan, nothing run
  lra transfer --target pathx --estimate-cost       # GPU-hours from measured step times
  lra transfer --target pathx --preset smoke        # the chain in miniature (CPU, about a minute)
  lra transfer --target pathx --preset cpu          # Path-64 -> Path-X on the real image sizes, CPU scale

exit status: 0 done, 1 a stage failed or ran out of memory (its result.json says why), 2 bad input,
or stages that would take long through the CPU interpreter without --yes (asked before the data step,
at one step per epoch, and again once the training splits are counted; no stage was trained).
"""


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "transfer", help="Path-64 pretraining -> Path-X / Path-256 fine-tuning (the FlashAttention recipe)",
        description="Run the FlashAttention paper's transfer recipe as a chain of `lra train` runs: "
                    "prepare data, pretrain on Path-64, fine-tune on the target from the pretrained "
                    "checkpoint with the positional grid duplicated, (Path-X) fine-tune again from the "
                    "best checkpoint, print the table. Recipes: lra/presets/transfer/<target>.yaml.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, choices=("pathx", "path256"), help="the task to reach")
    parser.add_argument("--preset", default=None,
                        help="recipe of lra/presets/transfer/<target>.yaml: <target>-transfer (the paper's, default), "
                             "smoke (CPU miniature), cpu (Path-64 -> the target on the real image sizes, CPU "
                             "scale); for pathx also mini (Pathfinder-32 -> 64) and curriculum "
                             "(Pathfinder-32 -> 64 -> Path-X with augmentation: the chain under which our runs leave chance)")
    parser.add_argument("--attention", default=None,
                        help="attention of the target stages (default: the recipe's: flash for pathx, "
                             "flash_sparse for path256)")
    parser.add_argument("--pretrain-attention", default=None,
                        help="attention of the Path-64 pretraining (default: the recipe's, flash)")
    parser.add_argument("--from-scratch", action="store_true",
                        help="train the baseline instead: the target from random weights, same schedule and length")
    parser.add_argument("--until", metavar="STAGE", default=None,
                        help="stop after this stage, e.g. --until finetune (no second fine-tune) or "
                             "--until pretrain; later stages are neither run nor planned")
    parser.add_argument("--runs-dir", default="runs", metavar="DIR", help="root of the run folders (default: runs)")
    parser.add_argument("--data-dir", default=None, metavar="DIR", help="data root (default: the presets', usually data/)")
    parser.add_argument("--seed", type=int, default=0, help="random seed of every stage (default: 0)")
    add_hardware_arguments(parser)
    parser.add_argument("--progress", dest="progress", action=argparse.BooleanOptionalAction, default=None,
                        help="rich progress bars (default: when the terminal is interactive)")
    parser.add_argument("--dry-run", action="store_true", help="print the stages and their state; run nothing")
    parser.add_argument("--yes", action="store_true",
                        help="start even when stages would take long on this machine (Triton kernels through "
                             "the CPU interpreter)")
    parser.add_argument("--estimate-cost", action="store_true",
                        help="print the GPU-hours of the recipe from measured step times (the stages' own "
                             "records, other records under --runs-dir, or --step-ms); trains nothing")
    parser.add_argument("--step-ms", action="append", default=[], metavar="STAGE=MS",
                        help="measured training-step time of a stage for --estimate-cost (repeatable)")
    parser.add_argument("--train-examples", action="append", default=[], metavar="TASK=N",
                        help="training-split size for --estimate-cost / --dry-run without preparing the data")
    parser.add_argument("--no-table", dest="table", action="store_false", help="do not print the tables at the end")
    parser.add_argument("overrides", nargs="*", metavar="[STAGE:]KEY=VALUE",
                        help="overrides for every stage, or one stage with a STAGE: prefix")
    parser.rename("--runs", "--runs-dir")
    parser.set_defaults(func=run)


def _pairs(items: list[str], flag: str, convert) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} {item!r}: expected NAME=VALUE")
        try:
            out[key.strip()] = convert(value.strip())
        except ValueError:
            raise ValueError(f"{flag} {item!r}: {value!r} is not a number") from None
    return out


def run(args: argparse.Namespace) -> int:
    from lra import transfer_chain, transfer_recipe
    from lra.train import RunFailed

    recipe = transfer_recipe.load_recipe(args.target, args.preset or f"{args.target}-transfer")
    options = transfer_chain.ChainOptions(attention=args.attention, pretrain_attention=args.pretrain_attention,
                                    seed=args.seed, runs_dir=args.runs_dir, data_dir=args.data_dir,
                                    overrides=list(args.overrides), devices=args.devices,
                                    num_nodes=args.num_nodes, strategy=args.strategy, compile=args.compile)
    _check_attentions(options)
    stages = transfer_chain.plan_chain(recipe, options, from_scratch=args.from_scratch)
    if args.until is not None:
        names = [stage.name for stage in stages]
        if args.until not in names:
            raise ValueError(f"--until {args.until!r}: no such stage in this chain; stages: {', '.join(names)}")
        stages = stages[:names.index(args.until) + 1]
    sizes = _pairs(args.train_examples, "--train-examples", int)
    chain_tasks = list(dict.fromkeys(s.task for s in [*recipe.stages, *([recipe.scratch] if recipe.scratch else [])]))
    for task, n in sizes.items():
        if task not in chain_tasks:
            raise ValueError(f"--train-examples: no stage of this recipe trains on {task!r}; its tasks: "
                             f"{', '.join(chain_tasks)}")
        if n < 1:
            raise ValueError(f"--train-examples {task}={n}: the training split needs at least 1 example")
    step_ms = _pairs(args.step_ms, "--step-ms", float)
    unknown = sorted(set(step_ms) - set(recipe.stage_names()))
    if unknown:
        raise ValueError(f"--step-ms: no stage {unknown[0]!r}; stages: {', '.join(recipe.stage_names())}")
    for stage_name, ms in step_ms.items():
        if not ms > 0:
            raise ValueError(f"--step-ms {stage_name}={ms:g}: a step time must be > 0 ms")
    title = (f"lra transfer --target {recipe.target}: recipe {recipe.name!r} ({recipe.source})"
             + (", from-scratch baseline" if args.from_scratch else ""))

    if args.dry_run or args.estimate_cost:
        for stage in stages:
            if stage.config.task in sizes:
                transfer_chain.fix_length(stage, sizes[stage.config.task])
            else:   # generated data: its counts are known before it is made
                transfer_chain.count_without_data(stage)
        missing = sorted({s.config.task for s in stages if s.steps_per_epoch is None})
        if args.estimate_cost and missing:
            _count_by_preparing(stages, missing)
        print(title)
        print(transfer_chain.describe_plan(stages))
        if args.dry_run:
            _refused(stages, yes=False)         # shown, not enforced: nothing runs
        if args.estimate_cost:
            _print_cost(stages, step_ms, Path(args.runs_dir))
        elif missing:
            print(f"(step counts need the training-split sizes of {', '.join(missing)}: they are counted when the "
                  f"data is prepared, or pass --train-examples TASK=N)")
        return 0

    print(title)
    if _refused(stages, args.yes):          # before the data step, at one step per epoch
        return 2
    try:
        transfer_chain.prepare_chain(stages)
        if _refused(stages, args.yes):      # with the step counts of the counted training splits
            return 2
        transfer_chain.train_chain(stages, progress_bar=args.progress)
    except RunFailed as failure:
        print(failure.traceback, file=sys.stderr)
        print(f"lra transfer: stage {failure.status}: {failure.error}\n  record: {failure.record_path}\n"
              f"  fix the cause and rerun the same command: finished stages are skipped, this one resumes",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nlra transfer: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    if args.table:
        _print_tables(recipe, stages, Path(args.runs_dir))
    return 0


def _refused(stages, yes: bool) -> bool:
    """Without --yes, print the refusal of stages that would take long through the interpreter."""
    refusal = None if yes else _long_on_this_machine(stages)
    if refusal:
        print(refusal, file=sys.stderr)
    return refusal is not None


def _long_on_this_machine(stages) -> str | None:
    """The refusal of a chain whose stages would take long through the Triton interpreter, else None.
    A stage whose training split is not counted yet is taken at one step per epoch, the least it can
    train; a counted stage that completed is left out."""
    import dataclasses

    from lra import transfer_chain
    from lra.interpreter_cost import long_run_warning, refusal
    from lra.train import resolve_runtime

    warnings = []
    for stage in stages:
        counted = stage.steps_per_epoch is not None
        if counted and stage.state() == "done":
            continue
        if not counted:
            stage = dataclasses.replace(stage)
            try:
                transfer_chain.fix_length(stage, 1)
            except ValueError:   # a schedule that one step per epoch cannot hold: asked once counted
                continue
        warning = long_run_warning(stage.config, resolve_runtime(stage.config).cuda)
        if warning:
            least = "" if counted else " (at least: one step per epoch; the training split is not counted yet)"
            warnings.append(f"stage {stage.name}: {warning}{least}")
    return refusal(warnings, "lra transfer") if warnings else None


def _check_attentions(options) -> None:
    from lra import attention as registry

    for name in (options.attention, options.pretrain_attention):
        if name is not None and name not in registry.available():
            raise ValueError(f"unknown attention {name!r}; available: {', '.join(registry.available())}")


def _count_by_preparing(stages, tasks: list[str]) -> None:
    from lra import transfer_chain

    print(f"counting the training splits of {', '.join(tasks)} (prepares the data; --train-examples TASK=N "
          f"skips this)", file=sys.stderr)
    counted = {}
    for stage in stages:
        if stage.steps_per_epoch is None:
            key = transfer_chain.data_key(stage.config)
            if key not in counted:
                examples, batches = transfer_chain.prepare_stage_data(stage)
                counted[key] = (examples, batches, stage.val_batches)
            examples, batches, stage.val_batches = counted[key]
            transfer_chain.fix_length(stage, examples, batches_one_device=batches)


def _print_cost(stages, step_ms: dict, runs: Path) -> None:
    import math

    from lra import transfer_chain, transfer_cost
    from tasks import TASKS

    rows, commands = [], []
    for stage in stages:
        c = stage.config
        if stage.name in step_ms:
            ms, source = step_ms[stage.name], "--step-ms"
        else:
            ms, source = transfer_cost.measured_step_ms(stage, [runs] if runs.exists() else [])
        if ms is None:
            commands.append(f"  {stage.name}: {transfer_cost.measure_command(stage)}")
        evals = math.ceil(c.train.max_steps / c.train.val_check_interval)
        val_batches = stage.val_batches
        if val_batches is None and stage.train_examples:
            # Data not prepared: the validation split from the task's split fractions (80/10/10).
            fractions = TASKS[c.task].options.get("split_fractions") if c.task in TASKS else None
            if fractions:
                val_examples = round(stage.train_examples / fractions[0] * fractions[1])
                if c.data.limit_eval:
                    val_examples = min(val_examples, c.data.limit_eval)
                val_batches = math.ceil(val_examples / c.train.batch_size)
        if val_batches is not None and c.train.limit_val_batches:
            val_batches = min(val_batches, c.train.limit_val_batches)
        rows.append(transfer_cost.StageCost(
            stage=stage.name, task=c.task, attention=c.attention, batch_size=c.train.batch_size,
            devices=transfer_chain.world_size(c), steps_per_epoch=stage.steps_per_epoch, epochs=stage.epochs,
            evals=evals, val_batches=val_batches, step_ms=ms, step_source=source,
            accumulate=c.train.accumulate_grad_batches))
    print("\nGPU-hours = GPUs x (steps x ms/step + evals x val batches x ms/val) / 3.6e6; "
          "ms/val = ms/step / accumulated batches / 3 unless measured; without prepared data, val batches follow the split fractions")
    transfer_cost.print_table(transfer_cost.estimate_cost(rows))
    if commands:
        print("\nstages without a measured step time; measure them (then rerun with --runs-dir runs-measure, or "
              "pass --step-ms STAGE=MS from the result.json's step_time_ms):")
        print("\n".join(commands))


def _print_tables(recipe, stages, runs: Path) -> None:
    from lra import transfer_chain, transfer_cost
    from lra.cli import build_parser

    print("\nstages:")
    transfer_cost.print_table(transfer_chain.chain_summary(stages))
    # The accuracy table of every stage of this recipe (and of its scratch baseline, when it ran),
    # next to the published numbers.
    presets = sorted({s.preset for s in [*recipe.stages, *([recipe.scratch] if recipe.scratch else [])]})
    tasks = sorted({s.task for s in [*recipe.stages, *([recipe.scratch] if recipe.scratch else [])]})
    argv = ["table", "accuracy", "--runs-dir", str(runs), "--tasks", *tasks, "--presets", *presets]
    print()
    sys.stdout.flush()
    try:
        args = build_parser().parse_args(argv)
        args.func(args)
    except (ValueError, FileNotFoundError, KeyError) as err:
        print(f"lra transfer: warning: no accuracy table ({err})", file=sys.stderr)
