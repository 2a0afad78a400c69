"""Host (CPU) time of one eager attention call on the GPU, forward + backward (issue #8, small batch).

The `paper` model's small-batch step is bound by the host below 16K tokens, so what decides flash vs
sdpa there is the Python + launch time of each attention call, not its GPU time. This script times
the model's attention core from the fused projection's output (B, N, 3 * H * d) to the merged heads
(B, N, H * d), forward + backward, on tiny CUDA inputs (GPU work of a few microseconds, so the loop
runs at the host's pace), for:

- `sdpa`: q/k/v views -> F.scaled_dot_product_attention (cuDNN back-end) -> head merge (the model's
  SDPA path);
- `flash views`: the same views -> kernels.flash_attention -> head merge;
- `flash packed`: kernels.flash_attention_qkvpacked on the (B, N, 3, H, d) view -> view (the model's
  flash path since session 13);
- the two flash forms in each launch mode of kernels.launch: `native` (the default since session
  15: launch plans replayed by one C call each, kernels.plan_launcher; the packed form then takes
  kernels.packed_fast_path, also measured without it), `planned` (session 14: the
  plans' launches one by one through Triton's C launcher), `cached` (per-launch signature cache,
  session 13) and `Triton` (every launch through Triton's JITFunction.run);
- the two flash forms with the Triton kernels replaced by no-ops and without plans (their
  difference to the real ones is the launch path);
- one bare launch of the backward's preprocess kernel (the cheapest of ours).

Each number is the median over --repeats of the mean host time per call over --iters calls
(perf_counter, one synchronize per repeat; the GPU never holds the loop back: checked by printing
the GPU time of one call). The sdpa and flash rows are measured in rotating rounds, so that the
host's drift falls on all of them alike.

    PYTHONPATH=. python3 scripts/h200/host_overhead.py --out $OUT/host_overhead.md
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_attention, flash_attention_qkvpacked, launch, ops, packed_fast_path, plan_launcher
from kernels import triton_attention as kern
from kernels.tiles import cdiv

KERNELS = ("flash_fwd_kernel", "flash_bwd_preprocess_kernel", "flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel")


class _NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def host_us(fn, iters: int, repeats: int) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        means.append((time.perf_counter() - start) / iters * 1e6)
        torch.cuda.synchronize()
    return statistics.median(means)


def host_us_interleaved(cases, iters: int, repeats: int) -> list[float]:
    """:func:`host_us` of several (name, fn, setup) cases measured in rotating rounds (each round:
    ``setup()``, then one mean over ``iters`` calls per case), so that the host's drift falls on all."""
    means: list[list[float]] = [[] for _ in cases]
    for _, fn, setup in cases:
        setup()
        for _ in range(50):
            fn()
    torch.cuda.synchronize()
    for _ in range(repeats):
        for i, (_, fn, setup) in enumerate(cases):
            setup()
            fn()  # a first call after a mode switch may bind new plans
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            means[i].append((time.perf_counter() - start) / iters * 1e6)
            torch.cuda.synchronize()
    return [statistics.median(m) for m in means]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--iters", type=int, default=500)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--profile", type=int, default=0, metavar="CALLS",
                   help="also profile CALLS packed calls (launch mode as set) with cProfile: the report gets the "
                        "functions with the most own time")
    args = p.parse_args()
    B, N, H, d, dp = args.batch, args.seq_len, args.heads, args.head_dim, args.dropout
    dev = torch.device("cuda")
    proj = torch.randn(B, N, 3 * H * d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(B, N, H * d, device=dev, dtype=torch.bfloat16)

    def views():
        return proj.view(B, N, 3, H, d).permute(2, 0, 3, 1, 4).unbind(0)

    def sdpa():
        q, k, v = views()
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=dp)
        o.transpose(1, 2).reshape(B, N, H * d).backward(grad)

    def flash_views():
        q, k, v = views()
        o = flash_attention(q, k, v, dropout_p=dp)
        o.transpose(1, 2).reshape(B, N, H * d).backward(grad)

    def flash_packed():
        o = flash_attention_qkvpacked(proj.view(B, N, 3, H, d), dropout_p=dp)
        o.reshape(B, N, H * d).backward(grad)

    out = torch.empty(B, H, N, d, device=dev, dtype=torch.bfloat16)
    lse = torch.zeros(B, H, N, device=dev)
    delta, lse2 = torch.empty_like(lse), torch.empty_like(lse)

    def bare_launch():
        kern.flash_bwd_preprocess_kernel[(cdiv(N, 64), B * H)](
            out, out, lse, lse, delta, lse2, lse, *out.stride(), *out.stride(), H, N, d,
            BLOCK_M=64, BLOCK_D=max(16, d), HAS_DLSE=False, ZERO_DQ=False)

    def modes(enabled: bool, planned: bool, native: bool, fast: bool = True):
        def apply():
            launch.ENABLED, launch.PLANNED, launch.NATIVE = enabled, planned, native
            packed_fast_path.ON = fast
        return apply

    cases = [("sdpa (cuDNN): views + SDPA + head merge", sdpa, modes(launch.ENABLED, launch.PLANNED, launch.NATIVE))]
    forms = (("flash: views + flash_attention + head merge", flash_views),
             ("flash packed: flash_attention_qkvpacked + view", flash_packed))
    launch_modes = [("Triton", False, False, False)]
    if launch.ENABLED:
        launch_modes = [("planned", True, True, False), ("cached", True, False, False)] + launch_modes
        if plan_launcher.load() is not None:
            launch_modes.insert(0, ("native", True, True, True))
    for name, fn in forms:
        for mode, enabled, planned, native in launch_modes:
            cases.append((f"{name} (launches: {mode})", fn, modes(enabled, planned, native)))
    if launch.ENABLED and plan_launcher.load() is not None:
        cases.append(("flash packed: flash_attention_qkvpacked + view (launches: native, without the packed fast path)",
                      flash_packed, modes(True, True, True, fast=False)))
    restore = modes(launch.ENABLED, launch.PLANNED, launch.NATIVE)
    rows = list(zip([c[0] for c in cases], host_us_interleaved(cases, args.iters, args.repeats)))
    restore()
    rows.append(("one bare Triton launch (backward preprocess kernel)", host_us(bare_launch, args.iters, args.repeats)))
    saved = {n: getattr(kern, n) for n in KERNELS}
    planned = launch.PLANNED
    try:
        launch.PLANNED = False  # the plans would replay the real kernels
        for n in KERNELS:
            setattr(kern, n, _NoLaunch())
        rows.append(("flash, kernels stubbed (no plans): views form", host_us(flash_views, args.iters, args.repeats)))
        rows.append(("flash, kernels stubbed (no plans): packed form", host_us(flash_packed, args.iters, args.repeats)))
    finally:
        launch.PLANNED = planned
        for n, k in saved.items():
            setattr(kern, n, k)
    # GPU time of one packed call (to show the loop above is host-bound)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(20):
        flash_packed()
    end.record()
    torch.cuda.synchronize()
    gpu_note = f"CUDA-event time per packed call in a loop of 20: {start.elapsed_time(end) / 20 * 1e3:.1f} us"
    import triton
    lines = [f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
             f"bf16 B={B} N={N} H={H} d={d} dropout={dp} (backward form {ops.DROPOUT_BWD}); "
             f"median of {args.repeats} means over {args.iters} calls; {gpu_note}.", "",
             "| forward + backward of | host µs per call |", "| --- | --- |"]
    lines += [f"| {name} | {us:.1f} |" for name, us in rows]
    if args.profile:
        lines += ["", f"cProfile of {args.profile} packed calls (launches: {launch.MODE}), by own time:", "```",
                  profile_text(flash_packed, args.profile), "```"]
    report("\n".join(lines) + "\n", args.out)


def profile_text(fn, calls: int, top: int = 30) -> str:
    """The ``top`` functions by own time over ``calls`` calls of ``fn`` (cProfile)."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    profiler.disable()
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue().strip()


def report(text: str, out: Path | None) -> None:
    """Print the result, and write it to ``out`` too when given."""
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)


if __name__ == "__main__":
    main()
