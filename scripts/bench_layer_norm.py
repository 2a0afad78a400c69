"""Our Triton LayerNorm (`kernels/layer_norm.py`) against PyTorch's, forward and forward + backward.

Session 10's H200 profile of the eager `paper` step at the Pathfinder batch (262,144 rows of width
64) found PyTorch's LayerNorm at ~400 us a forward call and ~210 us for the input gradient, where a
memory-bound pass needs ~35 us; `results/models/session10/`. This script times, per shape:

- `torch`: `F.layer_norm` (PyTorch's CUDA kernels);
- `triton`: `kernels.layer_norm.layer_norm`;
- `compiled`: `torch.compile(F.layer_norm)` — Inductor's fused LayerNorm, the anchor of what a
  generated kernel reaches (CUDA only; `--no-compiled` skips it);

on fresh random inputs (x ~ N(1, 3^2), dy ~ N(0, 1), weight and bias ~ N(0, 1)), medians of
`triton.testing.do_bench` on CUDA (warm-up and repetitions by time), of wall-clock repetitions on
the CPU (through Triton's interpreter: a plumbing check, not a speed). The forward + backward row
times `y = LN(x); y.backward(dy)` with gradients for x, weight and bias. GB/s counts the bytes a
pass must move at least: forward x in and y out; forward + backward also dy in and dx out.

Usage: python scripts/bench_layer_norm.py [--shapes 262144x64 32768x64 ...] [--dtype float32]
           [--out FILE.csv]       (writes FILE.csv and FILE.meta.json: command, device, versions, rev)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
try:
    import torch
except ImportError:  # pragma: no cover
    raise SystemExit("bench_layer_norm: needs torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before triton is imported (by kernels)

import pandas as pd  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from kernels import layer_norm as ln  # noqa: E402
from lra import provenance  # noqa: E402
from lra.records import atomic_write_text  # noqa: E402

DEFAULT_SHAPES = ("262144x64", "32768x64", "65536x128", "16384x512")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def parse_shape(text: str) -> tuple[int, int]:
    rows, sep, d = text.lower().partition("x")
    if not sep or not rows.isdigit() or not d.isdigit() or int(rows) < 1 or int(d) < 1:
        raise ValueError(f"--shapes {text!r}: expected ROWSxD, e.g. 262144x64")
    return int(rows), int(d)


def median_ms(fn, device: torch.device, reps: int, grads=None) -> float:
    """Median ms of ``fn``; ``grads``: tensors whose .grad do_bench resets between calls."""
    if device.type == "cuda":
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=grads, return_mode="median"))
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def implementations(device: torch.device, compiled: bool) -> dict:
    impls = {"torch": F.layer_norm,
             "triton": lambda x, shape, w, b, eps: ln.layer_norm(x, w, b, eps)}
    if compiled and device.type == "cuda":
        impls["compiled"] = torch.compile(F.layer_norm, dynamic=False)
    return impls


def measure(shape: tuple[int, int], dtype: torch.dtype, device: torch.device, impls: dict, reps: int,
            seed: int = 0) -> list[dict]:
    rows, d = shape
    # A fresh compile cache per shape: `compiled` (dynamic=False) needs two entries per shape (forward
    # under no_grad, forward + backward), so from the fifth shape on it would hit Dynamo's recompile
    # limit (8) and silently time eager F.layer_norm under the `compiled` name.
    torch._dynamo.reset()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = (torch.randn(rows, d, generator=gen) * 3 + 1).to(device, dtype).requires_grad_()
    dy = torch.randn(rows, d, generator=gen).to(device, dtype)
    w = torch.randn(d, generator=gen).to(device).requires_grad_()
    b = torch.randn(d, generator=gen).to(device).requires_grad_()
    size = x.element_size()
    out = []
    for name, fn in impls.items():
        def forward():
            with torch.no_grad():
                fn(x, (d,), w, b, 1e-5)

        def forward_backward():
            fn(x, (d,), w, b, 1e-5).backward(dy)

        for which, call, nbytes, grads in (("fwd", forward, 2 * rows * d * size, None),
                                           ("fwd+bwd", forward_backward, 5 * rows * d * size, [x, w, b])):
            ms = median_ms(call, device, reps, grads)
            out.append({"impl": name, "rows": rows, "d": d, "dtype": str(dtype).replace("torch.", ""),
                        "pass": which, "ms": ms, "gb_per_s": nbytes / ms / 1e6})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), metavar="ROWSxD")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                        help="input dtype (float32: the model's residual stream under bf16 autocast)")
    parser.add_argument("--no-compiled", action="store_true", help="skip the torch.compile anchor")
    parser.add_argument("--reps", type=int, default=5, help="CPU only: repetitions per measurement")
    parser.add_argument("--out", type=Path, default=None, help="CSV path (and .meta.json beside it)")
    args = parser.parse_args(argv)
    try:
        shapes = list(dict.fromkeys(parse_shape(s) for s in args.shapes))  # a shape named twice is measured once
    except ValueError as err:
        parser.error(str(err))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    impls = implementations(device, not args.no_compiled)
    rows = []
    for shape in shapes:
        rows += measure(shape, DTYPES[args.dtype], device, impls, args.reps)
        for r in rows[-2 * len(impls):]:
            print(f"{r['impl']:>8s} {r['rows']}x{r['d']} {r['dtype']} {r['pass']:>7s}: "
                  f"{r['ms'] * 1e3:9.1f} us, {r['gb_per_s']:7.1f} GB/s", flush=True)
    frame = pd.DataFrame(rows)
    torch_ms = frame[frame["impl"] == "torch"].set_index(["rows", "d", "pass"])["ms"]
    frame["speedup_vs_torch"] = [torch_ms[(r.rows, r.d, r.pass_)] / r.ms
                                 for r in frame.rename(columns={"pass": "pass_"}).itertuples()]
    print(frame.to_markdown(index=False, floatfmt=".4g"))
    if args.out is not None:
        out = args.out if args.out.suffix == ".csv" else args.out.with_suffix(".csv")
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, frame.to_csv(index=False, float_format="%.6g"))
        meta = {**provenance.collect(), "device_type": device.type,
                "timing": "triton.testing.do_bench median" if device.type == "cuda" else
                          f"wall-clock median of {args.reps} (Triton interpreter)"}
        atomic_write_text(out.with_suffix(".meta.json"), json.dumps(meta, indent=2, default=str))
        print(f"wrote {out}, {out.with_suffix('.meta.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
