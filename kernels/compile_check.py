"""Compile the attention kernels for a GPU target without a GPU (``python -m kernels.compile_check``).

The interpreter that runs the kernels on CPU accepts code the GPU compiler rejects (non-constexpr
globals, some type mixes), so this compiles every kernel, for a spread of the constexpr variants
the launchers use, through Triton's real compiler for NVIDIA sm_90 (Hopper): by default down to
Triton-GPU IR (fast; catches front-end and layout errors), with ``--ptx`` through LLVM to PTX.
It needs no CUDA device and must run with ``TRITON_INTERPRET=0``.

``--full`` also compiles every dtype and head dim, and the LayerNorm kernels of
``kernels.layer_norm`` (``ln_fwd``, ``ln_bwd``: widths 64 to 512, a ragged 100 and 8192; float32 and
bfloat16 inputs, bfloat16 with float32 output as under CUDA autocast, bfloat16 output from bfloat16
and float32 inputs (the model's norm1 / norm2 under autocast); ``--full --kernels ln_fwd,ln_bwd``
compiles only those).

``--hopper`` compiles the Gluon forward of :mod:`kernels.hopper_attention` instead, through ptxas
to a cubin: head dims 64 and 128, bfloat16 and float16, causal or not, with or without a
key-padding mask, each in its six schedules (warp-specialised, single-partition or ping-pong, with
or without the overlap of one tile's softmax with the previous tile's PV) and in the block-sparse
form of the ping-pong kernel (with and without the overlap); it prints registers,
spill stores, those inside loops (``loop-spills``), shared memory and the partitions'
``setmaxnreg`` counts. It then compiles the Gluon backward of
:mod:`kernels.hopper_attention_bwd` (its dQ and dK/dV kernels, the latter also warp-specialised:
``dkdv-ws``, and one-pass: ``dkdv-1p``, with its preprocess kernel ``pre``) for the same head
dims, dtypes, causal and mask flags, printing ``hopper-bwd`` lines with registers, spill stores,
the spill stores and loads inside loops (``loop-spills``), shared memory and, warp-specialised,
the ``setmaxnreg`` counts. It skips, with a one-line reason
and exit status 0, under a Triton release that kernel was not written against
(``kernels.hopper_support``).

Variants whose flags say every dimension is a multiple of its tile (``EVEN_*``) are specialised as
the JIT specialises a contiguous input of such a shape: unit strides become the constant 1 and
pointers and the other integers are marked divisible by 16. That is what turns the kernels' loads
into pipelined ``cp.async`` copies, so only such a compile shows the code (and, with
``--resources``, the registers and spills) the GPU actually runs on the hot path.
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time


def _variants(quick: bool):
    """(kernel name, dtype, block_m, block_n, block_d, num_warps, num_stages, flags) to compile: the
    GPU tile table's entries (bf16 at head dim 64; all dtypes and head dims with ``quick=False``) for
    the hot paths (plain, dropout, block-sparse; aligned shapes) and a ragged everything-on variant
    (with an lse gradient, ``HAS_DLSE``, for the dQ kernel; a kernel gets the flags it takes).
    Flag sets with ``FUSED_DQ`` (the one-pass dropout backward, the default with dropout: dropout
    aligned, ragged everything-on, block-sparse; each also with ``DQ_TMA``, dQ added by TMA
    reduce-adds) apply to the dK/dV kernel only. Every variant uses
    the tiles the launchers give such a call (``kernels.tiles.select``: the dropout table with
    dropout, the one-pass backward's own dK/dV tiles with ``FUSED_DQ``)."""

    import torch

    from .tiles import select

    even = dict(IS_CAUSAL=False, HAS_PAD=False, HAS_DROPOUT=False, SPARSE=False, EVEN_M=True, EVEN_N=True, EVEN_D=True)
    flag_sets = [
        even,
        dict(even, HAS_DROPOUT=True),
        dict(even, SPARSE=True, HAS_PAD=True),
        dict(IS_CAUSAL=True, HAS_PAD=True, HAS_DROPOUT=True, SPARSE=False, EVEN_M=False, EVEN_N=False, EVEN_D=False,
             HAS_DLSE=True),
    ]
    fused_sets = [
        dict(even, HAS_DROPOUT=True, FUSED_DQ=True),
        dict(flag_sets[3], HAS_DLSE=False, FUSED_DQ=True),
        dict(even, SPARSE=True, HAS_PAD=True, HAS_DROPOUT=True, FUSED_DQ=True),
    ]
    # the same with dQ added by TMA reduce-adds (DQ_TMA: eager launches on sm_90)
    fused_sets += [dict(flags, DQ_TMA=True) for flags in fused_sets]
    dtypes = ["bf16"] if quick else ["bf16", "fp16", "fp32"]
    head_dims = [64] if quick else [16, 32, 64, 128]
    torch_dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    for dtype, d in itertools.product(dtypes, head_dims):
        for flags in flag_sets + fused_sets:
            # the tiles the launcher gives such a call on a GPU (the dropout table with dropout, the
            # one-pass backward's dK/dV tiles with FUSED_DQ; block-sparse clamped to 128)
            tiles = select(torch.device("cuda"), torch_dtypes[dtype], d, 128 if flags["SPARSE"] else None,
                           dropout=flags["HAS_DROPOUT"], fused_bwd=flags.get("FUSED_DQ", False))
            for kernel, t in (("fwd", tiles.fwd), ("dkdv", tiles.dkdv), ("dq", tiles.dq)):
                if flags.get("FUSED_DQ") and kernel != "dkdv":
                    continue
                yield kernel, dtype, t.block_m, t.block_n, d, t.num_warps, t.num_stages, flags


def _signature(fn, dtype: str, constexprs: dict) -> dict:
    """Triton type of every argument of ``fn`` by its name (constexprs marked as such)."""
    pointer = {"Q": dtype, "K": dtype, "V": dtype, "O": dtype, "DO": dtype, "DQ": dtype, "DK": dtype, "DV": dtype,
               "ROWS": "fp32", "STATS": "fp32", "DQ_ACC": "fp32", "DLSE": "fp32", "PAD": "i1", "SEED": "i64",
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


_UNIT_STRIDES = ("stride_qd", "stride_kd", "stride_vd", "stride_od", "stride_dod", "stride_dqd", "stride_dkd",
                 "stride_dvd")


def _specialise(fn, sig: dict, constexprs: dict) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) as the JIT builds them for contiguous, 16-aligned inputs."""
    sig, constexprs, attrs = dict(sig), dict(constexprs), {}
    for i, name in enumerate(fn.arg_names):
        if sig[name] == "constexpr":
            continue
        if name in _UNIT_STRIDES:
            sig[name] = "constexpr"
            constexprs[name] = 1
        elif sig[name].startswith("*") or name.startswith("stride") or name in ("H", "N_Q", "N_K", "HEAD_DIM"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, constexprs, attrs


def _resources(cubin: bytes) -> str:
    """Registers / stack / spill stores of a cubin, via the cuobjdump that ships with Triton."""
    import pathlib
    import subprocess
    import tempfile

    import triton.backends.nvidia as nv

    tool = pathlib.Path(nv.__file__).parent / "bin" / "cuobjdump"
    if not tool.exists():
        return "resources: cuobjdump not found"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True).stdout
    fields = [w for w in usage.split() if w.startswith(("REG:", "STACK:"))]
    return " ".join(fields) + f" spill-stores:{sass.count('STL')}"


def _source(kernel: str, dtype: str, block_m: int, block_n: int, block_d: int, flags: dict):
    """(Triton ASTSource of ``kernel`` -- "fwd", "dkdv", "dq" -- with these tiles and flags, whether
    it was specialised as the JIT does for aligned inputs (all of EVEN_M / EVEN_N / EVEN_D))."""
    from triton.compiler import ASTSource

    from . import triton_attention as kern

    fn = {"fwd": kern.flash_fwd_kernel, "dkdv": kern.flash_bwd_dkdv_kernel, "dq": kern.flash_bwd_dq_kernel}[kernel]
    constexprs = dict(flags, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                      DOT_PREC="ieee" if dtype == "fp32" else None, UPCAST=False)
    constexprs = {name: value for name, value in constexprs.items() if name in fn.arg_names}
    if kernel == "dkdv":
        constexprs.setdefault("FUSED_DQ", False)
        constexprs.setdefault("DQ_TMA", False)
    if kernel == "dq":
        constexprs.setdefault("HAS_DLSE", False)
    if "EXACT_P" in fn.arg_names:  # as the launcher chooses it for this dtype
        import torch

        from .launch_args import exact_probabilities
        constexprs["EXACT_P"] = exact_probabilities({"bf16": torch.bfloat16, "fp16": torch.float16,
                                                     "fp32": torch.float32}[dtype])
    sig = _signature(fn, dtype, constexprs)
    if constexprs.get("DQ_TMA"):  # the dQ accumulator as a TMA descriptor of (B * H, N_Q, HEAD_DIM)
        sig["DQ_ACC"] = f"tensordesc<fp32[1, {block_m}, {block_d}]>"
    attrs = None
    aligned = flags["EVEN_M"] and flags["EVEN_N"] and flags["EVEN_D"]
    if aligned:
        sig, constexprs, attrs = _specialise(fn, sig, constexprs)
    return ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs), aligned


def _front_end(src, target, options: dict) -> str:
    """Triton IR -> Triton-GPU IR for ``target`` (no LLVM / ptxas, no GPU): the IR text, after the
    software pipeliner."""
    from triton._C.libtriton import ir
    from triton.backends.nvidia.compiler import CUDABackend

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
    return str(module)


def _layer_norm_variants():
    """(kernel "ln_fwd" / "ln_bwd", x dtype, y / dy dtype, D) of the LayerNorm kernels: the paper
    model's width 64 and a few wider ones, aligned; one ragged width (masked columns) and the
    widest (one row a tile, 16 warps in the backward)."""
    # bf16 -> fp32: CUDA autocast; fp32 -> bf16: the model's norm1 / norm2 under autocast
    # (float32 residual stream in, autocast_output=True)
    pairs = [("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "bf16"), ("fp32", "bf16")]
    for d, (x_dtype, y_dtype), kernel in itertools.product((64, 128, 256, 512, 100, 8192), pairs,
                                                           ("ln_fwd", "ln_bwd")):
        if d in (100, 8192) and y_dtype == "bf16":
            continue
        yield kernel, x_dtype, y_dtype, d


def _layer_norm_source(kernel: str, x_dtype: str, y_dtype: str, d: int):
    """(ASTSource of a LayerNorm kernel as the launcher calls it for a contiguous (n_rows, d) input
    with float32 weight and bias and all gradients, its num_warps, a description). Pointers, and
    ``D`` and ``n_rows`` where d is a multiple of 16, are marked divisible by 16 as the JIT does."""
    from triton.compiler import ASTSource

    from . import layer_norm as ln

    block_d, block_rows, warps = (ln.fwd_config if kernel == "ln_fwd" else ln.bwd_config)(d)
    if kernel == "ln_fwd":
        fn = ln.layer_norm_fwd_kernel
        pointers = {"X": x_dtype, "W": "fp32", "B": "fp32", "Y": y_dtype, "MEAN": "fp32", "RSTD": "fp32"}
        constexprs = dict(HAS_W=True, HAS_B=True, BLOCK_ROWS=block_rows, BLOCK_D=block_d, EVEN_D=d == block_d)
    else:
        fn = ln.layer_norm_bwd_kernel
        pointers = {"X": x_dtype, "W": "fp32", "DY": y_dtype, "DX": x_dtype, "MEAN": "fp32", "RSTD": "fp32",
                    "DW_PART": "fp32", "DB_PART": "fp32"}
        constexprs = dict(HAS_W=True, COMPUTE_DX=True, COMPUTE_DW=True, COMPUTE_DB=True, BLOCK_ROWS=block_rows,
                          BLOCK_D=block_d, EVEN_D=d == block_d)
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = "*" + pointers[name]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name == "eps":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name in ("D", "n_rows") and d % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    even = "aligned" if d % 16 == 0 else "ragged"
    what = f"{kernel:>6} {x_dtype}->{y_dtype} {block_rows}x{block_d} (D={d}) w{warps}"
    return ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs), warps, f"{what:<40} {even:<7}"


def loop_copy_waits(kernel: str, sparse: bool, block_m: int, block_n: int, head_dim: int, num_warps: int,
                    num_stages: int, arch: int = 90) -> list[int]:
    """The ``async_wait {num = N}`` counts in the first (unmasked) inner loop of ``kernel`` ("fwd",
    "dkdv", "dq"; bf16, aligned, plain) as Triton's software pipeliner leaves it for ``arch``: how
    many of the loop's asynchronous copies stay in flight while it computes (0: each step waits for
    its own copies; the loop is not pipelined). Front end only, no GPU needed."""
    import re

    from triton.backends.compiler import GPUTarget

    flags = dict(IS_CAUSAL=False, HAS_PAD=False, HAS_DROPOUT=False, SPARSE=sparse, EVEN_M=True, EVEN_N=True,
                 EVEN_D=True)
    src, _ = _source(kernel, "bf16", block_m, block_n, head_dim, flags)
    text = _front_end(src, GPUTarget("cuda", arch, 32), {"num_warps": num_warps, "num_stages": num_stages})
    loop = text[text.index("scf.for"):]
    loop = loop[:loop.index("scf.yield")]
    return [int(n) for n in re.findall(r"async_wait[^{]*[{]num = (\d+)", loop)]


KERNEL_NAMES = ("fwd", "dkdv", "dq")   # the attention kernels; --full adds LAYER_NORM_NAMES
LAYER_NORM_NAMES = ("ln_fwd", "ln_bwd")


def compile_variants(quick: bool = True, ptx: bool = False, arch: int = 90, resources: bool = False,
                     kernel_names=None):
    """Compiles the variants, yielding one line per variant as it is done (raises on the first
    failure). ``kernel_names``: only these kernels (of :data:`KERNEL_NAMES`; with ``quick=False``
    also :data:`LAYER_NORM_NAMES`)."""
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", arch, 32)
    for kernel, dtype, bm, bn, bd, warps, n_stages, flags in _variants(quick):
        if kernel_names and kernel not in kernel_names:
            continue
        src, aligned = _source(kernel, dtype, bm, bn, bd, flags)
        t0 = time.perf_counter()
        options = {"num_warps": warps, "num_stages": n_stages}
        compiled = triton.compile(src, target=target, options=options) if ptx else None
        if compiled is None:
            _front_end(src, target, options)
        on = ",".join(k for k, v in flags.items()
                      if v and not k.startswith("EVEN") and k in src.fn.arg_names) or "plain"
        even = "aligned" if aligned else "ragged"
        line = (f"{kernel:>5} {dtype:>5} {bm}x{bn}x{bd} w{warps} s{n_stages} {on:<28} "
                f"{even:<7} ok ({time.perf_counter() - t0:.1f}s)")
        if resources and compiled is not None:
            line += "  " + _resources(compiled.asm["cubin"])
        yield line
    if quick:
        return
    for kernel, x_dtype, y_dtype, d in _layer_norm_variants():
        if kernel_names and kernel not in kernel_names:
            continue
        src, warps, what = _layer_norm_source(kernel, x_dtype, y_dtype, d)
        t0 = time.perf_counter()
        options = {"num_warps": warps}
        compiled = triton.compile(src, target=target, options=options) if ptx else None
        if compiled is None:
            _front_end(src, target, options)
        line = f"{what} ok ({time.perf_counter() - t0:.1f}s)"
        if resources and compiled is not None:
            line += "  " + _resources(compiled.asm["cubin"])
        yield line


def _hopper_source(head_dim: int, dtype: str, causal: bool, pad: bool, warp_specialize: bool, overlap: bool,
                   pingpong: bool = False, sparse: bool = False):
    """(Gluon source of the Hopper forward as :func:`kernels.hopper_attention.hopper_forward` launches
    it, its compile options). Integer arguments are left unspecialised (the general variant).
    ``pingpong``: the ping-pong kernel (warp-specialised by construction, ``warp_specialize`` is
    ignored); with ``sparse`` its block-sparse form, as
    :func:`kernels.hopper_attention.launch_sparse_forward` launches it."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from . import hopper_attention as ha

    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]

    def descriptor(rows: int) -> str:
        block = [1, 1, rows, head_dim]
        return f"tensordesc<{dtype}{block},{gl.NVMMASharedLayout.get_default_for(block, gl_dtype)!r}>"

    if pingpong:
        fn = ha.hopper_attention_fwd_sparse_kernel if sparse else ha.hopper_attention_fwd_pingpong_kernel
        q_rows, warps = ha.PP_ROWS, ha.PP_WARPS
        block_n = ha.BLOCK_N
        constexprs = dict(STAGES=ha.stages_for(head_dim), IS_CAUSAL=causal, HAS_PAD=pad, OVERLAP=overlap,
                          CONSUMERS=ha.PP_CONSUMERS, CONSUMER_REGS=ha.PP_CONSUMER_REGS, num_warps=warps)
    else:
        fn, q_rows, warps, block_n = ha.hopper_attention_fwd_kernel, ha.BLOCK_M, ha.NUM_WARPS, ha.BLOCK_N
        constexprs = dict(STAGES=ha.stages_for(head_dim), IS_CAUSAL=causal, HAS_PAD=pad,
                          WARP_SPECIALIZE=warp_specialize, OVERLAP=overlap, num_warps=warps)
    types = dict(q_desc=descriptor(q_rows), k_desc=descriptor(block_n), v_desc=descriptor(block_n),
                 o_desc=descriptor(q_rows), ROWS="*fp32", PAD="*i1", IDX="*i32", CNT="*i32", qk_scale="fp32")
    sig = {name: "constexpr" if name in constexprs else types.get(name, "i32") for name in fn.arg_names}
    options = {"num_warps": warps}
    if warp_specialize or pingpong:
        options["maxnreg"] = ha.MAXNREG
    return GluonASTSource(fn, sig, constexprs=constexprs), options


def _hopper_variant(variant: tuple, arch: int = 90) -> str:
    """Compiles one Hopper variant (head dim, dtype, causal, pad, schedule) to a cubin; its report
    line. The schedule: (warp-specialised, overlapped, ping-pong, block-sparse)."""
    import triton
    from triton.backends.compiler import GPUTarget

    head_dim, dtype, causal, pad, (ws, overlap, pingpong, sparse) = variant
    src, options = _hopper_source(head_dim, dtype, causal, pad, ws, overlap, pingpong, sparse)
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    on = ",".join(name for name, flag in (("causal", causal), ("pad", pad)) if flag) or "plain"
    schedule = ("sparse-pingpong" if sparse else "pingpong" if pingpong else "warp-spec" if ws else "1-partition")
    schedule += "+overlap" if overlap else ""
    maxnreg = _setmaxnreg(compiled.asm["ptx"])
    cubin = compiled.asm["cubin"]
    line = (f"hopper {dtype:>5} d={head_dim:<3} {schedule:<23} {on:<10} ok ({time.perf_counter() - t0:.1f}s)  "
            f"{_resources(cubin)} loop-spills:{_loop_spills(cubin)} smem:{compiled.metadata.shared}")
    if maxnreg:
        line += " setmaxnreg:" + ",".join(map(str, maxnreg))
    return line


def _setmaxnreg(ptx: str) -> list[int]:
    """The ``setmaxnreg`` register counts of a kernel's PTX, ascending: the partitions' own budgets
    under warp specialisation, where cuobjdump's REG is the launch cap."""
    import re

    return sorted({int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)})


def _loop_spills(cubin: bytes) -> int:
    """Spill stores and loads (STL / LDL) of a cubin's SASS that lie inside a loop: between a
    predicated backward branch (a loop's latch) and its target. Unpredicated backward branches are
    left out: ptxas places the slow path of an mbarrier wait after the kernel's end and jumps back
    from there unconditionally."""
    import pathlib
    import re
    import subprocess
    import tempfile

    import triton.backends.nvidia as nv

    tool = pathlib.Path(nv.__file__).parent / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True).stdout
    spills, loops = [], []
    for line in sass.splitlines():
        match = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*)", line)
        if match is None:
            continue
        addr, text = int(match[1], 16), match[2]
        if re.search(r"\b(STL|LDL)\b", text):
            spills.append(addr)
        branch = re.search(r"^@!?U?P\w+\s+BRA\s+0x([0-9a-f]+)", text)
        if branch and int(branch[1], 16) < addr:
            loops.append((int(branch[1], 16), addr))
    return sum(any(lo <= a <= hi for lo, hi in loops) for a in spills)


def _hopper_bwd_source(kernel: str, head_dim: int, dtype: str, causal: bool, pad: bool):
    """(Gluon source of a Hopper backward kernel -- "dq", "dkdv", "dkdv-ws" (the dK/dV kernel with
    ``WARP_SPECIALIZE``), "dkdv-1p" (with ``ONE_PASS``) or "pre" (the one-pass form's preprocess
    kernel; causal and pad do not apply) -- as :func:`kernels.hopper_attention_bwd.hopper_backward`
    launches it, its compile options)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from . import hopper_attention_bwd as hb

    gl_dtype = {"bf16": gl.bfloat16, "fp16": gl.float16}[dtype]

    def descriptor(rows: int) -> str:
        block = [1, 1, rows, head_dim]
        return f"tensordesc<{dtype}{block},{gl.NVMMASharedLayout.get_default_for(block, gl_dtype)!r}>"

    options = {"num_warps": hb.NUM_WARPS}
    if kernel == "pre":
        fn = hb.hopper_attention_bwd_preprocess_kernel
        constexprs = dict(BLOCK_M=hb.DQ_BLOCK_M, HEAD_DIM=head_dim, num_warps=hb.NUM_WARPS)
        types = dict(O="*" + dtype, DO="*" + dtype, DELTA="*fp32")
        sig = {name: "constexpr" if name in constexprs else types.get(name, "i32") for name in fn.arg_names}
        return GluonASTSource(fn, sig, constexprs=constexprs), options
    if kernel == "dq":
        fn = hb.hopper_attention_bwd_dq_kernel
        rows_q, rows_k = hb.DQ_BLOCK_M, hb.DQ_BLOCK_N
        types = dict(dq_desc=descriptor(rows_q), O="*" + dtype, DO="*" + dtype)
    else:
        fn = hb.hopper_attention_bwd_dkdv_kernel
        rows_q = hb.ONE_PASS_BLOCK_M[head_dim] if kernel == "dkdv-1p" else hb.DKV_BLOCK_M
        rows_k = hb.DKV_BLOCK_N
        types = dict(dk_desc=descriptor(rows_k), dv_desc=descriptor(rows_k), DQ_ACC="*fp32")
        if kernel == "dkdv-1p":  # the float32 dQ sum the tiles are reduce-added into
            block = [1, rows_q, head_dim]
            types["DQ_ACC"] = f"tensordesc<fp32{block},{gl.NVMMASharedLayout.get_default_for(block, gl.float32)!r}>"
    types.update(q_desc=descriptor(rows_q), k_desc=descriptor(rows_k), v_desc=descriptor(rows_k),
                 do_desc=descriptor(rows_q), ROWS="*fp32", DELTA="*fp32", PAD="*i1", qk_scale="fp32",
                 sm_scale="fp32")
    import torch

    from .launch_args import exact_probabilities
    exact = exact_probabilities({"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])
    constexprs = dict(STAGES=hb.STAGES, IS_CAUSAL=causal, HAS_PAD=pad, EXACT_P=exact, num_warps=hb.NUM_WARPS)
    if kernel != "dq":
        constexprs["WARP_SPECIALIZE"] = kernel == "dkdv-ws"
        constexprs["ONE_PASS"] = kernel == "dkdv-1p"
        if kernel == "dkdv-ws":
            options["maxnreg"] = hb.MAXNREG
    sig = {name: "constexpr" if name in constexprs else types.get(name, "i32") for name in fn.arg_names}
    return GluonASTSource(fn, sig, constexprs=constexprs), options


def _hopper_bwd_variant(variant: tuple, arch: int = 90) -> str:
    """Compiles one Hopper backward variant (kernel, head dim, dtype, causal, pad) to a cubin; its
    report line."""
    import triton
    from triton.backends.compiler import GPUTarget

    kernel, head_dim, dtype, causal, pad = variant
    src, options = _hopper_bwd_source(kernel, head_dim, dtype, causal, pad)
    t0 = time.perf_counter()
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    on = ",".join(name for name, flag in (("causal", causal), ("pad", pad)) if flag) or "plain"
    cubin = compiled.asm["cubin"]
    line = (f"hopper-bwd {kernel:>7} {dtype:>5} d={head_dim:<3} {on:<10} ok ({time.perf_counter() - t0:.1f}s)  "
            f"{_resources(cubin)} loop-spills:{_loop_spills(cubin)} smem:{compiled.metadata.shared}")
    maxnreg = _setmaxnreg(compiled.asm["ptx"])
    if maxnreg:
        line += " setmaxnreg:" + ",".join(map(str, maxnreg))
    return line


def _hopper_any_variant(job: tuple) -> str:
    """One compile job of :func:`compile_hopper`: ("fwd", forward variant) or ("bwd", backward variant)."""
    which, variant = job
    return _hopper_variant(variant) if which == "fwd" else _hopper_bwd_variant(variant)


def compile_hopper(jobs: int | None = None):
    """Compiles every variant of the Hopper Gluon forward, then of the backward's dQ and dK/dV
    kernels, to sm_90 cubins, ``jobs`` at a time in worker processes (default: up to 8), yielding
    one line per variant, in order, with its resources (raises on the first failure). The caller
    checks the Triton version first (:func:`kernels.hopper_support.triton_version_ok`)."""
    from concurrent.futures import ProcessPoolExecutor

    # schedules (warp-specialised, overlapped, ping-pong, block-sparse)
    schedules = [(True, True, False, False), (True, False, False, False), (False, True, False, False),
                 (False, False, False, False), (True, True, True, False), (True, False, True, False),
                 (True, True, True, True), (True, False, True, True)]
    forward = list(itertools.product((64, 128), ("bf16", "fp16"), (False, True), (False, True), schedules))
    backward = list(itertools.product(("dq", "dkdv", "dkdv-ws", "dkdv-1p"), (64, 128), ("bf16", "fp16"),
                                      (False, True), (False, True)))
    backward += [("pre", d, dtype, False, False) for d in (64, 128) for dtype in ("bf16", "fp16")]
    jobs_list = [("fwd", v) for v in forward] + [("bwd", v) for v in backward]
    jobs = jobs or min(8, os.cpu_count() or 1)
    if jobs == 1:
        yield from map(_hopper_any_variant, jobs_list)
        return
    with ProcessPoolExecutor(jobs) as pool:
        yield from pool.map(_hopper_any_variant, jobs_list)


def _hopper_skip_reason() -> str | None:
    """Why the installed Triton cannot compile the Hopper Gluon kernel (None: it can)."""
    import triton

    from .hopper_support import triton_version_ok

    ok, why = triton_version_ok(triton.__version__)
    if not ok:
        return why
    try:
        from . import hopper_attention, hopper_attention_bwd  # noqa: F401
    except ImportError as exc:
        return f"Triton {triton.__version__}: cannot import the Gluon kernel ({exc})"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="all dtypes and head dims, and the LayerNorm kernels")
    parser.add_argument("--ptx", action="store_true", help="compile through LLVM to PTX/cubin as well")
    parser.add_argument("--resources", action="store_true",
                        help="with --ptx: print registers, stack and spill stores of every variant")
    parser.add_argument("--kernels", nargs="+", default=None, metavar="KERNEL",
                        help="only these kernels (space- or comma-separated): fwd dkdv dq (--full: also ln_fwd ln_bwd)")
    parser.add_argument("--hopper", action="store_true",
                        help="compile the Hopper Gluon forward and backward (kernels.hopper_attention, "
                             "kernels.hopper_attention_bwd) to cubins instead")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="with --hopper: compile N variants at a time (default: the cores, at most 8)")
    args = parser.parse_args(argv)
    if args.kernels is not None:
        args.kernels = [name for value in args.kernels for name in value.split(",") if name]
        known = KERNEL_NAMES + (LAYER_NORM_NAMES if args.full else ())
        unknown = [name for name in args.kernels if name not in known]
        if unknown:
            hint = " (the LayerNorm kernels compile with --full)" if unknown[0] in LAYER_NORM_NAMES else ""
            parser.error(f"--kernels: no kernel {unknown[0]!r}; the kernels are {', '.join(known)}{hint}")
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("run with TRITON_INTERPRET=0: the interpreter replaces the compiler", file=sys.stderr)
        return 2
    if args.hopper:
        reason = _hopper_skip_reason()
        if reason is not None:
            print(f"hopper: skipped: {reason}", flush=True)
            return 0
        for line in compile_hopper(args.jobs):
            print(line, flush=True)
        return 0
    for line in compile_variants(quick=not args.full, ptx=args.ptx, resources=args.resources,
                                 kernel_names=args.kernels):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
