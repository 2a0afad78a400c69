"""Where the host time of one Triton launch of our attention kernels goes (issue #8, small batch).

Session 13's host_overhead.py put Triton's launcher at ~150 us per launch of our forward / dK/dV
kernels on the H200's host (3 launches: 460 us of a 1,021 us eager forward + backward), against 32 us
for a bare launch of the small preprocess kernel. This script records the arguments of one real
forward and backward (tiny bf16 inputs, dropout 0.1), then times, per kernel:

- `launch`: ``kernel[grid](*args, **kwargs)`` as our launchers call it (JITFunction.run);
- `binder`: Triton's argument binding and specialisation alone;
- `cache key`: ``compute_cache_key`` on that specialisation;
- `direct`: the compiled kernel's own launcher (``CompiledKernel.run``) with the bound arguments,
  i.e. what remains when the per-call binding, specialisation and cache lookup are skipped;
- `cached`: ``kernels.launch.CachedLauncher`` (our signature key + that direct launch);

and prints cProfile's own-time table of 300 launches. Triton 3.6's internals; other versions may lack
some of them (then that row says so).

    PYTHONPATH=. python3 scripts/h200/launch_overhead.py --out $OUT/launch_overhead.txt
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_overhead import host_us, report  # noqa: E402  (the sibling script's timer and output)
from kernels import flash_attention_qkvpacked, launch
from kernels import triton_attention as kern

KERNELS = ("flash_fwd_kernel", "flash_bwd_preprocess_kernel", "flash_bwd_dkdv_kernel")


class _Recorder:
    def __init__(self, jit):
        self.jit, self.calls = jit, []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return self.jit[grid](*args, **kwargs)
        return run


def per_call_us(fn) -> float:
    """Host µs per call: host_overhead.py's timer (median of 7 means of 400 calls)."""
    return host_us(fn, iters=400, repeats=7)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    B, N, H, d = 2, 128, 2, 32
    qkv = torch.randn(B, N, 3, H, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    launch.ENABLED = False  # record the plain JIT kernels' arguments
    recorders = {name: _Recorder(getattr(kern, name)) for name in KERNELS}
    for name, rec in recorders.items():
        setattr(kern, name, rec)
    try:
        flash_attention_qkvpacked(qkv, dropout_p=0.1).sum().backward()
    finally:
        for name, rec in recorders.items():
            setattr(kern, name, rec.jit)
    torch.cuda.synchronize()
    import triton
    lines = [f"GPU {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
             f"bf16 B={B} N={N} H={H} d={d}, dropout 0.1; host us per call, median of 7 means of 400 calls", ""]
    lines += ["| kernel | args | launch | binder | cache key | direct (CompiledKernel.run) | kernels.launch cached |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    profiles = []
    for name, rec in recorders.items():
        grid, a, kw = rec.calls[0]
        jit = rec.jit
        row = [name, str(len(a) + len(kw))]
        row.append(f"{per_call_us(lambda: jit[grid](*a, **kw)):.1f}")
        try:
            from triton.runtime.jit import compute_cache_key
            from triton.runtime import driver
            device = driver.active.get_current_device()
            _cache, key_cache, _target, _backend, binder = jit.device_caches[device]
            from triton import knobs
            kw_full = dict(kw, debug=kw.get("debug", jit.debug) or knobs.runtime.debug,
                           instrumentation_mode=knobs.compilation.instrumentation_mode)
            row.append(f"{per_call_us(lambda: binder(*a, **kw_full)):.1f}")
            bound, spec, options = binder(*a, **kw_full)
            row.append(f"{per_call_us(lambda: compute_cache_key(key_cache, spec, options)):.1f}")
            compiled = _cache[compute_cache_key(key_cache, spec, options)]
            stream = driver.active.get_current_stream(device)
            values = list(bound.values())
            g = tuple(grid) + (1,) * (3 - len(grid))

            def direct():
                compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata, None,
                             None, None, *values)
            row.append(f"{per_call_us(direct):.1f}")
        except Exception as err:  # noqa: BLE001 - a diagnostic: report and go on
            row.append(f"n/a ({type(err).__name__}: {str(err)[:80]})")
        cached = launch.CachedLauncher(jit)
        row.append(f"{per_call_us(lambda: cached[grid](*a, **kw)):.1f} ({cached.hits} hits)")
        lines.append("| " + " | ".join(row) + " |")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            jit[grid](*a, **kw)
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
        profiles.append(f"\n## cProfile, 300 launches of {name}\n" + s.getvalue())
    report("\n".join(lines) + "\n" + "".join(profiles), args.out)


if __name__ == "__main__":
    main()
