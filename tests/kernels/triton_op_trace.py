"""Trace the ``triton_op`` form of the attention ops the way AOTAutograd does for Inductor, without a GPU.

Run with TRITON_INTERPRET=0 (the kernels must be real ``@triton.jit`` functions for ``wrap_triton``);
the inputs are fake CUDA tensors, so nothing executes. Prints one JSON line per traced call: the
Triton kernels the decomposed graph launches (by name), the arguments of each that the functionalised
graph copies because torch's analysis of the kernel finds them written (``clones``: Inductor copies
such an input before the launch and, for a view, back after it), and any op left undecomposed.

On a machine without a GPU no Triton driver is active, so a stand-in driver reports the H200's target
(CUDA, sm_90) for that analysis (it only generates the kernels' TTIR; nothing is compiled to PTX).
"""
from __future__ import annotations

import json
import os
import sys

import torch
from torch._functorch.aot_autograd import aot_function
from torch._subclasses.fake_tensor import FakeTensorMode

from kernels import ops
from kernels.tiles import _GPU_16BIT


def launched(gm) -> dict:
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    kernels, clones, others = [], [], []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if "triton_kernel_wrapper" in name:
            kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
            while not hasattr(kernel, "__name__") and hasattr(kernel, "fn"):  # autotuner wrapping num_warps/stages
                kernel = kernel.fn
            kernels.append(getattr(kernel, "__name__", type(kernel).__name__))
            clones.append(sorted(node.kwargs.get("tensors_to_clone", [])))
        elif "lra_traced" in name:
            others.append(name)
    return {"kernels": kernels, "clones": clones, "undecomposed": others}


def trace(fn, *args) -> dict:
    report = {}

    def compiler(gm, _example):
        report.update(launched(gm))
        return gm

    try:
        aot_function(fn, fw_compiler=compiler)(*args)
    except RuntimeError as err:  # running the graph needs CUDA; the trace is done by then
        if not report:
            raise
        report["ran"] = str(err).splitlines()[0][:80]
    return report


def stand_in_driver() -> None:
    """Without an active Triton driver (no GPU), one that reports the H200's target, for torch's kernel
    analysis (torch._higher_order_ops.triton_kernel_wrap.generate_ttir asks the active driver)."""
    import triton
    from triton.backends.compiler import GPUTarget

    if any(backend.driver.is_active() for backend in triton.backends.backends.values()):
        return

    class StandIn:
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    triton.runtime.driver.set_active(StandIn())


def main() -> int:
    assert os.environ.get("TRITON_INTERPRET") == "0", "run with TRITON_INTERPRET=0"
    stand_in_driver()
    ops.register_ops("lra_traced", "triton_op")
    op = torch.ops.lra_traced
    tiles = _GPU_16BIT[32].clamped(64).as_list()
    with FakeTensorMode():
        B, H, N, d = 2, 2, 200, 32
        q, k, v, do = (torch.empty(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        out = torch.empty(B, H, N, d, device="cuda", dtype=torch.bfloat16)
        rows = torch.empty(B, H, 3, N, device="cuda", dtype=torch.float32)  # [lse, m, log2(l)] per row
        mask = torch.zeros(B, N, device="cuda", dtype=torch.bool)
        seed = torch.empty(1, device="cuda", dtype=torch.int64)
        cnt = torch.empty(1, 4, 3, device="cuda", dtype=torch.int32)
        idx = torch.empty(1, 4, 2, device="cuda", dtype=torch.int32)
    cases = {
        "dense_fwd": (lambda q, k, v: op.flash_fwd(q, k, v, None, None, None, None, None, None, None, None,
                                                   False, 0.0, 0.17, tiles), q, k, v),
        "dense_fwd_mask_dropout_causal": (lambda q, k, v, m, s: op.flash_fwd(q, k, v, m, s, None, None, None, None,
                                                                             None, None, True, 0.1, 0.17, tiles),
                                          q, k, v, mask, seed),
        "sparse_fwd": (lambda q, k, v, i, c: op.flash_fwd(q, k, v, None, None, i, c, i, c, i, c, False, 0.0, 0.17,
                                                          tiles), q, k, v, idx, cnt),
        "dense_bwd_mask_dropout": (lambda g, q, k, v, o, l, m, s: op.flash_bwd(g, None, q, k, v, o, l, m, s, None,
                                                                               None, None, None, False, 0.1, 0.17,
                                                                               tiles), do, q, k, v, out, rows, mask,
                                   seed),
        "sparse_bwd": (lambda g, q, k, v, o, l, i, c: op.flash_bwd(g, None, q, k, v, o, l, None, None, i, c, i, c,
                                                                   True, 0.0, 0.17, tiles), do, q, k, v, out, rows,
                       idx, cnt),
    }
    # the two-pass backward first (deterministic algorithms on; read when the op body is traced)
    torch.use_deterministic_algorithms(True, warn_only=True)
    for name, (fn, *args) in cases.items():
        print(json.dumps({"case": name, **trace(fn, *args)}), flush=True)
    # the one-pass dropout backward (the default)
    torch.use_deterministic_algorithms(False)
    fn, *args = cases["dense_bwd_mask_dropout"]
    print(json.dumps({"case": "dense_bwd_mask_dropout_fused", **trace(fn, *args)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
