"""`lra data generate|check`: make ListOps / Pathfinder data sets, or check what a task would read.

    lra data generate listops [--data-dir DIR] [--n-train 96000 --n-val 2000 --n-test 2000] [--min-len 500 --max-len 2000]
    lra data generate pathfinder32|pathfinder64|pathx|path256 [--data-dir DIR] [--n 200000 | --n-train ...]
                      [--difficulty easy|intermediate|hard] [--workers K] [--seed S] [--force]
    lra data check TASK [--data-dir DIR] [--source auto|official|generated|tfds|folder] [--seq-len N]

Generated data land in the cache layout `tasks.build_datamodule` reads (DIR/generated/...), so a
later `lra train --data-dir DIR` uses them. `generate` prints images/s (wall clock, and per worker
from the CPU time of the chunks) — run it with a fresh --data-dir to benchmark the generator.
"""
from __future__ import annotations

import time

from lra.commands.parser import seq_len
from tasks.registry import SOURCES, TASKS

GENERATORS = ("listops", "pathfinder32", "pathfinder64", "pathx", "path256")


def add_parser(sub) -> None:
    parser = sub.add_parser("data", help="generate ListOps/Pathfinder data or check a task's data",
                            description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    gen = actions.add_parser("generate", help="generate ListOps or Pathfinder data into the cache layout")
    gen.add_argument("task", choices=GENERATORS, help=f"the data set to generate: {', '.join(GENERATORS)}")
    gen.add_argument("--data-dir", default=None, metavar="DIR", help="data directory (default: $LRA_DATA or ./data)")
    gen.add_argument("--n", type=int, default=None,
                     help="Pathfinder: total images, split 80/10/10 (default 200000, as the LRA release)")
    gen.add_argument("--n-train", type=int, default=None,
                     help="training examples (default: ListOps 96000, Pathfinder 80%% of --n)")
    gen.add_argument("--n-val", type=int, default=None,
                     help="validation examples (default: ListOps 2000, Pathfinder 10%% of --n)")
    gen.add_argument("--n-test", type=int, default=None,
                     help="test examples (default: ListOps 2000, Pathfinder 10%% of --n)")
    gen.add_argument("--difficulty", default="hard",
                     help="Pathfinder contour length: easy (6), intermediate (9), hard (14, LRA's)")
    gen.add_argument("--min-len", type=int, default=None, help="ListOps: keep trees longer than this (500)")
    gen.add_argument("--max-len", type=int, default=None, help="ListOps: keep trees shorter than this (2000)")
    gen.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    gen.add_argument("--seed", type=int, default=0,
                     help="generator seed (training runs read seed 0 unless told otherwise)")
    gen.add_argument("--force", action="store_true", help="rebuild even if the data set exists")
    gen.rename("--out", "--data-dir")
    gen.set_defaults(func=run)

    check = actions.add_parser("check", help="say where a task's data would come from and check it loads")
    check.add_argument("task", choices=list(TASKS), help=f"LRA task: {', '.join(TASKS)}")
    check.add_argument("--data-dir", default=None, metavar="DIR", help="data directory (default: $LRA_DATA or ./data)")
    check.add_argument("--source", choices=SOURCES, default="auto",
                       help="where the data comes from: auto (the first of the task's sources that is there), "
                            "official (the LRA release), generated, tfds or folder (default: auto)")
    check.add_argument("--seq-len", type=seq_len, default=None, metavar="N",
                       help="tokens per sequence, 4096 or 4K (default: the task's)")
    check.set_defaults(func=run)


def run(args) -> int:
    if args.action == "generate":
        return _generate(args)
    return _check(args)


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"--{name} must be >= 0, got {value}")


def _generate(args) -> int:
    from tasks import listops, pathfinder, pathfinder_gen, release

    out = release.resolve_data_dir(args.data_dir)
    for name in ("n", "n_train", "n_val", "n_test"):
        _positive(name.replace("_", "-"), getattr(args, name))
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    spec = TASKS[args.task]
    t0 = time.perf_counter()
    if args.task == "listops":
        if args.n is not None:
            raise ValueError("--n is for Pathfinder; use --n-train/--n-val/--n-test for ListOps")
        base = listops.ListOpsParams()
        params = listops.ListOpsParams(
            n_train=base.n_train if args.n_train is None else args.n_train,
            n_val=base.n_val if args.n_val is None else args.n_val,
            n_test=base.n_test if args.n_test is None else args.n_test,
            min_length=base.min_length if args.min_len is None else args.min_len,
            max_length=base.max_length if args.max_len is None else args.max_len, seed=args.seed)
        src = listops.GeneratedListOps(out, spec.max_len, params, workers=args.workers)
        folder = src.prepare(progress=True, force=args.force)
        seconds = time.perf_counter() - t0
        total = params.n_train + params.n_val + params.n_test
        print(f"listops: {params.n_train}/{params.n_val}/{params.n_test} examples in {folder} "
              f"({seconds:.1f} s, {total / max(seconds, 1e-9):,.0f} examples/s)")
    else:
        if args.min_len is not None or args.max_len is not None:
            raise ValueError("--min-len/--max-len are for ListOps")
        total = pathfinder.DEFAULT_TOTAL if args.n is None else args.n
        counts = pathfinder.default_counts(spec, total=total)
        counts = pathfinder.GeneratedCounts(
            counts.train if args.n_train is None else args.n_train,
            counts.val if args.n_val is None else args.n_val,
            counts.test if args.n_test is None else args.n_test)
        if counts.train + counts.val + counts.test == 0:
            raise ValueError("nothing to generate: all counts are 0")
        params = pathfinder_gen.params_for(spec.options["size"], args.difficulty)
        src = pathfinder.GeneratedPathfinder(out, params, counts, args.seed, workers=args.workers)
        folder = src.prepare(progress=True, force=args.force)
        seconds = time.perf_counter() - t0
        stats = getattr(src, "last_stats", {})
        made = sum(s["images"] for s in stats.values())
        cpu = sum(s["cpu_seconds"] for s in stats.values())
        wall = sum(s["seconds"] for s in stats.values())
        print(f"{args.task}: {counts.train}/{counts.val}/{counts.test} images "
              f"({params.size}x{params.size}, contour length {params.contour_length}) in {folder}")
        if made:
            print(f"made {made} images in {wall:.1f} s: {made / max(wall, 1e-9):,.1f} images/s wall, "
                  f"{made / max(cpu, 1e-9):,.1f} images/s per worker (CPU time of the chunks)")
        else:
            print(f"already there, nothing generated ({seconds:.1f} s); --force rebuilds it")
    if args.seed != 0:
        print(f"note: training reads generator seed 0; this set uses seed {args.seed}")
    return 0


def _check(args) -> int:
    import numpy as np

    from tasks import build_datamodule, cache
    from tasks.base import PixelDataset

    dm = build_datamodule(args.task, data_dir=args.data_dir, batch_size=4, seq_len=args.seq_len,
                          source=args.source)
    src = dm.source
    print(f"{args.task}: {src.describe()}")
    print(f"  classes {dm.num_classes}, vocab {dm.vocab_size}, tokens per sequence {dm.max_len}"
          f"{' (x2 documents)' if dm.dual else ''}"
          f"{f', image {dm.image_shape[0]}x{dm.image_shape[1]}' if dm.image_shape else ''}")
    if src.kind == "generated":
        if not cache.is_complete(src.folder()):
            print(f"  not generated yet: the first training run makes it (prepare_data), or run "
                  f"`lra data generate {args.task} --data-dir {src.data_dir}`")
            for folder, counts in getattr(src, "other_sets", list)():
                train, val, test = (counts.get(split, 0) for split in ("train", "val", "test"))
                print(f"  a smaller set is there, {train}/{val}/{test} in {folder}: runs read it with "
                      f"data.limit_train={train} data.limit_eval={min(val, test)}")
            return 0
    dm.setup()
    for split in ("train", "val", "test"):
        ds = dm.dataset(split)
        labels = np.asarray(ds.split.labels[: len(ds)])
        counts = np.bincount(labels, minlength=dm.num_classes)
        line = f"  {split:5s} {len(ds):>7,} examples, labels {counts.tolist()}"
        if isinstance(ds, PixelDataset):
            sample = np.asarray(ds[0]["input_ids"])
            line += f", first image mean pixel {sample.mean():.1f}"
        else:
            lengths = np.concatenate([seq.lengths()[: len(ds)] for seq in ds.split.sequences])
            line += (f", tokens mean {lengths.mean():.0f} max {lengths.max()} "
                     f"({(lengths >= dm.max_len).mean():.1%} at the {dm.max_len}-token limit)")
        print(line)
    batch = next(iter(dm.val_dataloader()))
    print("  batch: " + ", ".join(f"{k} {tuple(v.shape)} {str(v.dtype).replace('torch.', '')}"
                                  for k, v in batch.items()))
    return 0
