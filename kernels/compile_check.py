"""Compile the attention kernels for a GPU target without a GPU (``python -m kernels.compile_check``).

The interpreter that runs the kernels on CPU accepts code the GPU compiler rejects (non-constexpr
globals, some type mixes), so this compiles every kernel, for a spread of the constexpr variants
the launchers use, through Triton's real compiler for NVIDIA sm_90 (Hopper): by default down to
Triton-GPU IR (fast; catches front-end and layout errors), with ``--ptx`` through LLVM to PTX.
It needs no CUDA device and must run with ``TRITON_INTERPRET=0``.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time


def _variants(quick: bool):
    """(kernel name, dtype, block_m, block_n, block_d, flags) to compile."""
    flag_sets = [
        dict(IS_CAUSAL=False, HAS_PAD=False, HAS_DROPOUT=False, SPARSE=False, EVEN_M=True, EVEN_N=True, EVEN_D=True),
        dict(IS_CAUSAL=True, HAS_PAD=True, HAS_DROPOUT=True, SPARSE=False, EVEN_M=False, EVEN_N=False, EVEN_D=False),
        dict(IS_CAUSAL=True, HAS_PAD=False, HAS_DROPOUT=False, SPARSE=True, EVEN_M=True, EVEN_N=False, EVEN_D=True),
    ]
    dtypes = ["bf16"] if quick else ["bf16", "fp16", "fp32"]
    for kernel, dtype, flags in itertools.product(("fwd", "dkdv", "dq"), dtypes, flag_sets):
        yield kernel, dtype, 128 if dtype != "fp32" else 64, 64, 64, flags
    if not quick:
        for kernel in ("fwd", "dkdv", "dq"):
            yield kernel, "bf16", 64, 128, 128, flag_sets[0]
            yield kernel, "bf16", 32, 16, 16, flag_sets[1]


def _signature(fn, dtype: str, constexprs: dict) -> dict:
    """Triton type of every argument of ``fn`` by its name (constexprs marked as such)."""
    pointer = {"Q": dtype, "K": dtype, "V": dtype, "O": dtype, "DO": dtype, "DQ": dtype, "DK": dtype, "DV": dtype,
               "LSE": "fp32", "LSE2": "fp32", "DELTA": "fp32", "DLSE": "fp32", "PAD": "u8", "SEED": "i64",
               "IDX": "i32", "CNT": "i32", "OUT": "u8"}
    floats = {"qk_scale", "sm_scale", "drop_scale"}
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointer:
            sig[name] = "*" + pointer[name]
        elif name in floats:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_variants(quick: bool = True, ptx: bool = False, arch: int = 90) -> list[str]:
    """Compiles the variants; returns one line per variant (raises on the first failure)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import triton_attention as kern

    kernels = {"fwd": kern.flash_fwd_kernel, "dkdv": kern.flash_bwd_dkdv_kernel, "dq": kern.flash_bwd_dq_kernel}
    target = GPUTarget("cuda", arch, 32)
    lines = []
    for kernel, dtype, bm, bn, bd, flags in _variants(quick):
        fn = kernels[kernel]
        constexprs = dict(flags, BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, DOT_PREC="ieee" if dtype == "fp32" else None,
                          UPCAST=False)
        src = ASTSource(fn=fn, signature=_signature(fn, dtype, constexprs), constexprs=constexprs)
        t0 = time.perf_counter()
        options = {"num_warps": 4, "num_stages": 3}
        compiled = triton.compile(src, target=target, options=options) if ptx else None
        if compiled is None:
            # front end only: Triton IR -> Triton-GPU IR (no LLVM/ptxas)
            from triton.backends.nvidia.compiler import CUDABackend
            from triton._C.libtriton import ir

            backend = CUDABackend(target)
            opts = backend.parse_options(options)
            context = ir.context()
            ir.load_dialects(context)
            backend.load_dialects(context)
            codegen_fns = backend.get_codegen_implementation(opts)
            module_map = backend.get_module_map()
            module = src.make_ir(target, opts, codegen_fns, module_map, context)
            stages = {}
            backend.add_stages(stages, opts, src.language)
            module = stages["ttir"](module, {})
            module = stages["ttgir"](module, {})
        lines.append(f"{kernel:>5} {dtype:>5} {bm}x{bn}x{bd} {flags} ok ({time.perf_counter() - t0:.1f}s)")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="all dtypes and extra tile shapes")
    parser.add_argument("--ptx", action="store_true", help="compile through LLVM to PTX/cubin as well")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("run with TRITON_INTERPRET=0: the interpreter replaces the compiler", file=sys.stderr)
        return 2
    for line in compile_variants(quick=not args.full, ptx=args.ptx):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
