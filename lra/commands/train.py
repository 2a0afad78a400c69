"""`lra train`: one training run of one task x attention x sequence length x seed."""
from __future__ import annotations

import argparse
import sys

from lra.attention_names import ATTENTION_OPTIONS, option_users
from lra.commands.parser import seq_len
from tasks.registry import TASKS

EPILOG = """\
overrides are `section.key=value` pairs, e.g.
  model.dim=128 model.depth=4 optim.lr=3e-4 optim.schedule=cosine train.max_steps=2000
  train.batch_size=16 train.val_check_interval=100 data.limit_train=5000 attention.nb_features=64
  train.compile_mode=reduce-overhead (with --compile; a speed setting, not part of the run id)
optim.schedule: linear | cosine | constant | onecycle (torch's OneCycleLR, as in the Nystromformer LRA
  code; see OptimConfig in lra/config.py).
attention options can also be given as --attention.<option> VALUE (see `lra info`).

exit status: 0 completed, 1 the run failed or ran out of memory (its result.json says why),
2 bad input, or a run that would take long through the CPU interpreter without --yes (nothing was run).
"""


def add_hardware_arguments(parser: argparse.ArgumentParser) -> None:
    """Devices, multi-node DDP and compilation: shared by `lra train`, `lra sweep` and `lra transfer`."""
    parser.add_argument("--devices", default=None,
                        help="Lightning devices per node: a count, indices like 0,1, or auto")
    parser.add_argument("--num-nodes", type=int, default=None, help="nodes for multi-node DDP")
    parser.add_argument("--strategy", default=None, help="Lightning strategy, e.g. ddp (default: auto)")
    parser.add_argument("--compile", dest="compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (default: on with CUDA, off on CPU)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by `lra train` and `lra sweep`."""
    parser.add_argument("--preset", default="paper",
                        help="preset section of lra/presets/<task>.yaml: paper (the published setting), "
                             "cpu (ListOps: the README's CPU main job, minutes), smoke (tiny, CPU seconds), ... "
                             "(default: paper)")
    parser.add_argument("--runs-dir", default="runs", metavar="DIR", help="root of the run folders (default: runs)")
    parser.add_argument("--data-dir", default=None, metavar="DIR", help="data root (default: $LRA_DATA, else ./data)")
    add_hardware_arguments(parser)
    parser.add_argument("--compile-mode", default=None, metavar="MODE",
                        help="torch.compile mode when compiling: default, reduce-overhead, max-autotune, "
                             "max-autotune-no-cudagraphs (train.compile_mode; not part of the run id)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="config overrides, e.g. model.dim=128 optim.lr=3e-4 attention.nb_features=64")
    for option, users in option_users().items():
        parser.add_argument(f"--attention.{option}", dest=f"attention_option__{option}", default=None,
                            metavar="VALUE", help=f"attention option ({', '.join(users)})")


def attention_options_from_args(args: argparse.Namespace) -> dict:
    prefix = "attention_option__"
    return {key[len(prefix):]: value for key, value in vars(args).items()
            if key.startswith(prefix) and value is not None}


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "train", help="train and evaluate one model (writes runs/<task>/<attention>/<run-id>/)",
        description="Train one LRA model, test it on its best validation checkpoint and write "
                    "runs/<task>/<attention>/<run-id>/result.json.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, help=f"LRA task: {', '.join(TASKS)}")
    parser.add_argument("--attention", required=True,
                        help=f"attention from the registry: {', '.join(ATTENTION_OPTIONS)}")
    parser.add_argument("--seq-len", type=seq_len, default=None, metavar="N",
                        help="tokens per sequence, 4096 or 4K (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the run's last.ckpt (a completed run is left as it is)")
    parser.add_argument("--force", action="store_true", help="train again even if the run exists")
    parser.add_argument("--progress", dest="progress", action=argparse.BooleanOptionalAction, default=None,
                        help="rich progress bar (default: when the terminal is interactive)")
    parser.add_argument("--init-from", default=None, metavar="CKPT",
                        help="start from the weights of this lra checkpoint; a smaller image's positional "
                             "grid is upsampled by duplication (Path-64 -> Path-X / Path-256)")
    parser.add_argument("--runs-per-gpu", type=int, default=1, metavar="K",
                        help="how many runs share this GPU (set by `lra sweep --runs-per-gpu`); recorded "
                             "beside the measured throughput, which speed tables take from solo runs only")
    parser.add_argument("--yes", action="store_true",
                        help="start even when the run would take long on this machine (Triton kernels through "
                             "the CPU interpreter)")
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config (preset <- overrides <- options) as YAML and exit; "
                             "trains nothing, reads no data")
    add_run_arguments(parser)
    parser.set_defaults(func=run)


def config_from_args(args: argparse.Namespace, *, task: str, attention: str, seed: int,
                     seq_len: int | None):
    from lra.config import resolve

    check_names(task, attention)
    return resolve(task, attention, preset=args.preset, seed=seed, seq_len=seq_len,
                   overrides=args.overrides, attention_options=attention_options_from_args(args),
                   runs_dir=args.runs_dir, data_dir=args.data_dir, devices=args.devices,
                   num_nodes=args.num_nodes, strategy=args.strategy, compile=args.compile,
                   compile_mode=args.compile_mode)


def check_names(task: str, attention: str) -> None:
    import tasks
    from lra import attention as registry

    if task not in tasks.TASKS:
        raise ValueError(f"unknown task {task!r}; available: {', '.join(tasks.TASKS)}")
    if attention not in registry.available():
        raise ValueError(f"unknown attention {attention!r}; available: {', '.join(registry.available())}")


def run(args: argparse.Namespace) -> int:
    from lra.train import RunFailed, is_global_zero, train

    if args.resume and args.force:
        raise ValueError("--resume and --force contradict each other: --resume continues the run from its "
                         "last.ckpt, --force trains it again from the start; pass one")
    config = config_from_args(args, task=args.task, attention=args.attention, seed=args.seed,
                              seq_len=args.seq_len)
    if args.init_from:
        config.train.init_from = args.init_from
    if args.print_config:
        sys.stdout.write(config.to_yaml())
        return 0
    if not args.yes:
        refusal = _long_on_this_machine(config)
        if refusal:
            print(refusal, file=sys.stderr)
            return 2
    try:
        record = train(config, resume=args.resume, force=args.force, progress_bar=args.progress,
                       runs_per_gpu=args.runs_per_gpu)
    except RunFailed as failure:
        if failure.traceback:
            print(failure.traceback, file=sys.stderr)
        print(f"lra train: run {failure.status}: {failure.error}\n  record: {failure.record_path}",
              file=sys.stderr)
        return 1
    if is_global_zero():  # under DDP every rank runs this command; one summary is enough
        _print_summary(record, config)
    return 0


def _long_on_this_machine(config) -> str | None:
    """The refusal of a run that would take long through the Triton interpreter, else None."""
    from lra.interpreter_cost import long_run_warning, refusal
    from lra.train import resolve_runtime

    warning = long_run_warning(config, resolve_runtime(config).cuda)
    return refusal([warning], "lra train") if warning else None


def _fmt(value, pattern: str, missing: str = "-") -> str:
    return pattern.format(value) if isinstance(value, (int, float)) else missing


def _print_summary(record: dict, config) -> None:
    print(f"{record['task']}/{record['attention']} {record['run_id']}: {record['status']}  "
          f"best val {_fmt(record.get('best_val_acc'), '{:.2%}')}  test {_fmt(record.get('test_acc'), '{:.2%}')}  "
          f"{record.get('steps')} steps in {_fmt(record.get('wall_time_s'), '{:.1f}s')}  "
          f"{_fmt(record.get('step_time_ms'), '{:.1f} ms/step')}  "
          f"{_fmt(record.get('train_tokens_per_s'), '{:,.0f} tokens/s')}  "
          f"peak {_fmt(record.get('peak_mem_gb'), '{:.2f} GiB', 'n/a (CPU)')}")
    print(f"  record: {config.run_dir() / 'result.json'}")
