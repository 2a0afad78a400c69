"""Where the host time of one eager `flash_attention` forward + backward goes (issue #8, small batch).

The `paper` model's small-batch step is bound by the host CPU below 16K tokens (results/models/
triton_op/): there the Python cost per attention call decides, not the kernels. This script measures
that cost on any machine, GPU or not: the Triton launches are replaced by no-ops (so it times our
Python, the allocations and autograd, not Triton's launcher or the GPU), tiny shapes keep the
allocations cheap, and three references run beside it:

- `autograd.Function floor`: a do-nothing `torch.autograd.Function` with the same 15 inputs, 2
  outputs and saved tensors as ours — what any Python-level autograd op costs;
- `native op`: one elementwise op with a C++ autograd node, forward + backward — the order of what
  SDPA's C++ op pays;
- the pieces of ours: input checks, seed draw, tile selection, the forward and backward launchers;
- the model's attention core from the fused projection to the merged heads, through q/k/v views
  (what the model did before session 13) and through the packed form (`flash_attention_qkvpacked`);
- the forward alone, dense and block-sparse (local layout through a ``BlockSparseLayout``), and the
  block-sparse forward + backward.

Usage: python scripts/eager_overhead.py [--iters 4000] [--out FILE.md]
(Runs through Triton's interpreter module setup on CPU; the kernels themselves never run.)
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels import (BlockSparseLayout, block_sparse_flash_attention, flash_attention,  # noqa: E402
                     flash_attention_qkvpacked, layouts, ops, tiles)
from kernels import triton_attention as kern  # noqa: E402
from kernels.dropout import draw_seed  # noqa: E402
from kernels.validation import check_attention_inputs  # noqa: E402

KERNELS = ("flash_fwd_kernel", "flash_bwd_preprocess_kernel", "flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel")


class _NoLaunch:
    """Stands in for a Triton kernel: `kernel[grid](...)` does nothing."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


class _FloorFunction(torch.autograd.Function):
    """Our Function's interface (15 inputs, 2 outputs, 11 saved tensors) with no work inside."""

    @staticmethod
    def forward(ctx, q, k, v, mask, seed, a, b, c, d, e, f, causal, dropout_p, scale, tile_list):
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse, mask, seed, a, b, c, d)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v = ctx.saved_tensors[:3]
        return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)) + (None,) * 12


def _time_us(fn, iters: int) -> float:
    for _ in range(max(100, iters // 10)):
        fn()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters * 1e6


def measure(iters: int, dropout_p: float = 0.1) -> list[tuple[str, float]]:
    saved = {name: getattr(kern, name) for name in KERNELS}
    for name in KERNELS:
        setattr(kern, name, _NoLaunch())
    try:
        batch, heads, n, d = 2, 2, 64, 32
        qkv = torch.randn(batch, n, 3, heads, d, dtype=torch.bfloat16).permute(2, 0, 3, 1, 4)  # fused-QKV views
        q, k, v = (t.detach().requires_grad_() for t in qkv)
        grad = torch.randn(batch, heads, n, d, dtype=torch.bfloat16)
        tile_list = tiles.select(q.device, q.dtype, d, dropout=True,
                                 fused_bwd=ops.fused_dropout_backward(dropout_p)).as_list()
        seed = draw_seed(q.device)
        scale = d ** -0.5
        out, lse = ops.launch_fwd(q, k, v, None, seed, None, None, None, None, None, None, False, dropout_p, scale,
                                  tile_list)
        rows = [
            ("flash_attention forward + backward (ours, launches stubbed)",
             _time_us(lambda: flash_attention(q, k, v, dropout_p=dropout_p).backward(grad), iters)),
            ("autograd.Function floor (same interface, no work)",
             _time_us(lambda: _FloorFunction.apply(q, k, v, None, seed, None, None, None, None, None, None, False,
                                                   dropout_p, scale, tile_list)[0].backward(grad), iters)),
            ("native op forward + backward (C++ autograd node)", _time_us(lambda: (q * 1.0).backward(grad), iters)),
            ("  input checks (check_attention_inputs)",
             _time_us(lambda: check_attention_inputs(q, k, v, None, False, dropout_p, None), iters)),
            ("  dropout seed draw", _time_us(lambda: draw_seed(q.device), iters)),
            ("  tile selection", _time_us(lambda: tiles.select(q.device, q.dtype, d, dropout=True,
                                                                fused_bwd=True).as_list(), iters)),
            ("  forward launcher (allocations, arguments)",
             _time_us(lambda: ops.launch_fwd(q, k, v, None, seed, None, None, None, None, None, None, False, dropout_p,
                                             scale, tile_list), iters)),
            ("  backward launcher (allocations, arguments, dQ buffer and cast)",
             _time_us(lambda: ops.launch_bwd(grad, None, q, k, v, out, lse, None, seed, None, None, None, None, False,
                                             dropout_p, scale, tile_list), iters)),
        ]
        # the model's attention core as MultiHeadSelfAttention calls it, from the fused projection's
        # output (B, N, 3 * H * d) to the merged heads (B, N, H * d): q/k/v views, or the packed form
        proj = torch.randn(batch, n, 3 * heads * d, dtype=torch.bfloat16, requires_grad=True)
        merged_grad = torch.randn(batch, n, heads * d, dtype=torch.bfloat16)

        def core_views():
            qv, kv, vv = proj.view(batch, n, 3, heads, d).permute(2, 0, 3, 1, 4).unbind(0)
            o = flash_attention(qv, kv, vv, dropout_p=dropout_p)
            o.transpose(1, 2).reshape(batch, n, heads * d).backward(merged_grad)

        def core_packed():
            o = flash_attention_qkvpacked(proj.view(batch, n, 3, heads, d), dropout_p=dropout_p)
            o.reshape(batch, n, heads * d).backward(merged_grad)
        rows += [
            ("model core, q/k/v views of the projection: views + flash_attention + head merge, fwd + bwd",
             _time_us(core_views, iters)),
            ("model core, packed: flash_attention_qkvpacked + view, fwd + bwd", _time_us(core_packed, iters)),
        ]
        # the block-sparse call on top: layout check, cached plans, tiles clamped to the block size
        layout = BlockSparseLayout.from_dense(layouts.benchmark_layout("local", layouts.num_blocks(n, 16)), 16)

        def forward_only(fn):
            def run():
                with torch.no_grad():
                    fn()
            return run
        rows += [
            ("flash_attention forward only (no autograd graph)",
             _time_us(forward_only(lambda: flash_attention(q, k, v)), iters)),
            ("block_sparse_flash_attention forward only (local layout, BlockSparseLayout)",
             _time_us(forward_only(lambda: block_sparse_flash_attention(q, k, v, layout, block_size=16)), iters)),
            ("block_sparse_flash_attention forward + backward",
             _time_us(lambda: block_sparse_flash_attention(q, k, v, layout, block_size=16,
                                                           dropout_p=dropout_p).backward(grad), iters)),
        ]
    finally:
        for name, kernel in saved.items():
            setattr(kern, name, kernel)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=4000)
    parser.add_argument("--out", type=Path, default=None, help="also write the Markdown table here")
    args = parser.parse_args(argv)
    rows = measure(args.iters)
    lines = [f"Host: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
             f"torch {torch.__version__}; {args.iters} iterations, tiny bf16 CPU tensors, dropout 0.1, "
             f"backward form {ops.DROPOUT_BWD}.", "", "| what | µs per call |", "| --- | --- |"]
    lines += [f"| {name} | {us:.1f} |" for name, us in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
