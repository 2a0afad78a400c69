"""`lra eval`: a saved checkpoint of a run on its task's test or validation split (`lra.evaluate`)."""
from __future__ import annotations

import argparse
import json
import sys

EPILOG = """\
examples:
  lra eval runs/pathx/flash/paper-n16384-s0-4d85a1c0            # best checkpoint, test split
  lra eval runs/pathx/flash/paper-n16384-s0-4d85a1c0/checkpoints/last.ckpt --split val
  lra eval RUN --attention sdpa --limit 500 --out eval.json      # same weights, another exact attention

The run is not changed; --out writes the result as JSON (atomically).
exit status: 0 evaluated, 2 bad input, or an evaluation that would take long through the CPU
interpreter without --yes (nothing was run).
"""


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "eval", help="evaluate a run's checkpoint on its test or validation split",
        description="Evaluate a checkpoint of an `lra train` run (a run folder: its best checkpoint, or "
                    "a .ckpt file in its checkpoints/) on the task's test or validation split, with the "
                    "model and data settings of the run's config.yaml.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="RUN_OR_CKPT", help="run folder or checkpoint file")
    parser.add_argument("--checkpoint", choices=("best", "last"), default="best",
                        help="for a run folder: its best-validation checkpoint or last.ckpt (default: best)")
    parser.add_argument("--split", choices=("test", "val"), default="test", help="default: test")
    parser.add_argument("--attention", default=None,
                        help="evaluate with another exact attention (e.g. sdpa for a flash run on a CPU)")
    parser.add_argument("--data-dir", default=None, metavar="DIR", help="data root (default: the run's)")
    parser.add_argument("--limit", type=int, default=None,
                        help="evaluate the first N examples of the split (of the data set the run read)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the run's")
    parser.add_argument("--devices", default=None, help="Lightning devices (default: 1)")
    parser.add_argument("--compile", dest="compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (default: as the run, on with CUDA)")
    parser.add_argument("--progress", dest="progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar (default: when the terminal is interactive)")
    parser.add_argument("--out", default=None, metavar="FILE.json", help="write the result here as JSON")
    parser.add_argument("--yes", action="store_true",
                        help="start even when the evaluation would take long on this machine (Triton kernels "
                             "through the CPU interpreter)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lra.evaluate import plan_evaluation, run_evaluation
    from lra.records import atomic_write_text
    from lra.train import is_global_zero

    planned = plan_evaluation(args.target, which=args.checkpoint, split=args.split, attention=args.attention,
                              data_dir=args.data_dir, limit=args.limit, batch_size=args.batch_size,
                              devices=args.devices, compile=args.compile)
    if not args.yes:
        refusal = _long_on_this_machine(planned)
        if refusal:
            print(refusal, file=sys.stderr)
            return 2
    result = run_evaluation(planned, progress_bar=args.progress)
    if not is_global_zero():
        return 0
    print(f"{result['task']}/{result['attention']} {result['split']} accuracy {result['accuracy']:.2%} "
          f"(loss {result['loss']:.4f}) on {result['examples']:,} examples; checkpoint {result['checkpoint']} "
          f"(step {result['step']})")
    data = result["data"]
    if data["run_data_id"] and data["id"] != data["run_data_id"]:
        print(f"  data {data['id']} ({data['description']}) is not the data of the run's record "
              f"({data['run_data_id']}): this accuracy is not comparable with the run's")
    if args.out:
        path = atomic_write_text(args.out, json.dumps(result, indent=2) + "\n")
        print(f"  wrote {path}")
    return 0


def _long_on_this_machine(planned) -> str | None:
    """The refusal of an evaluation that would take long through the Triton interpreter, else None."""
    from lra.evaluate import INTERCHANGEABLE
    from lra.interpreter_cost import long_eval_warning, refusal
    from lra.train import resolve_runtime

    config = planned.config
    warning = long_eval_warning(config, resolve_runtime(config).cuda, planned.split,
                                examples=planned.examples_limit)
    if not warning:
        return None
    instead = "--limit N (the first N examples)"
    if config.attention in INTERCHANGEABLE:
        instead += ", --attention sdpa (the same function in plain PyTorch)"
    return refusal([warning], "lra eval", instead)
