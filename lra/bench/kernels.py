"""`lra bench kernels`: our Triton kernels against PyTorch's attention back-ends (GPU).

Three parts, one CSV (columns in docs/interfaces.md), one Markdown report, one provenance file:

1. **dense** (pattern ``dense``): ``ours`` (kernels.flash_attention, as users call it: on Hopper its
   eager forward may run the Hopper ping-pong kernel, :mod:`kernels.hopper_dispatch`) and, on request
   only, ``ours_portable`` (the same with that dispatch switched off), ``ours_one_pass`` (``ours``
   with the one-pass backward also without dropout, :func:`kernels.use_one_pass_backward`) and
   ``ours_hopper`` (the Hopper Gluon kernels through kernels.hopper_autograd, ``unsupported`` off
   sm_90; ``ours_hopper_pp`` the same with the forward's ping-pong schedule, ``ours_hopper_ws`` that
   with the warp-specialised dK/dV backward, ``ours_hopper_1p`` with the one-pass backward) vs the
   anchors ``sdpa_flash``, ``sdpa_cudnn``, ``sdpa_efficient`` (F.scaled_dot_product_attention
   pinned to one back-end with torch.nn.attention.sdpa_kernel), ``flex`` (torch.compile'd
   FlexAttention, no mask) and ``softmax`` (materialised softmax(QK^T)V in the input dtype, softmax
   in float32). Shapes follow the FlashAttention papers: B * N = ``--tokens`` (16K), hidden
   ``--hidden`` (2048) so H = hidden / d.
2. **sparse** (pattern = layout name): ``ours_sparse`` (kernels.block_sparse_flash_attention with a
   prebuilt BlockSparseLayout; on request ``ours_sparse_portable``, the same with the Hopper forward
   dispatch switched off) vs ``flex_sparse`` (FlexAttention with the identical pattern as a
   BlockMask, kernels.layouts.to_block_mask) for the BigBird / local / butterfly builders of
   kernels.layouts; the block density is recorded; our dense kernel's row of the same shape is the
   dense reference (time(sparse) / time(dense) against 1.25 * density + 0.02).
3. **approx** (pattern ``approx``): the approximate baselines of the registry
   (``lra.attention.build(name, num_heads=H, head_dim=d, max_len=N)``) at the same shapes.

Per cell and pass (``fwd`` under no_grad, ``bwd`` = backward of a retained graph, ``fwd_bwd``) the
time is the median of ``triton.testing.do_bench`` (warm-up first, so compilation is excluded; it
flushes the L2 between repetitions), on fresh random normal inputs per shape: the time of an eager
call, the host's launch cost included where it exceeds the GPU's work. ``--cuda-graph`` times the
same calls as replays of a CUDA graph (``triton.testing.do_bench_cudagraph``: the GPU's time alone,
L2 not flushed); a retained graph's backward runs on the stream of its forward, outside the
capture's stream, so ``bwd`` cells are ``unsupported`` there. TFLOP/s counts
4 * B * H * N^2 * d for the forward (halved for causal), x2.5 for the backward, x3.5 for
forward + backward; block-sparse rows count the FLOPs of the computed blocks (x density; with causal
masking the layout's blocks below the diagonal, those on it half: sparse_flop_density); approximate
baselines get no TFLOP/s. ``extra_mem_gb`` is the peak allocation of one more run above what was
allocated before it (inputs, and for ``bwd`` the retained graph, excluded). Out-of-memory cells are
``oom`` (longer N of that implementation are then not tried), cells a back-end refuses are
``unsupported``, other failures ``error`` with the message; nothing stops the sweep. All outputs are
rewritten atomically after every cell, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import pandas as pd

from lra.bench.kernel_options import DENSE_IMPLS, DTYPES, PASSES, K, add_arguments, wanted
from lra.bench.resume import differences, earlier_runs
from lra.commands.parser import Parser
from lra.records import atomic_write_text
from lra.table.kernels import KERNEL_ANCHORS as ANCHORS, sparse_time_bound

COLUMNS = ["impl", "pass", "seq_len", "head_dim", "batch", "heads", "dtype", "pattern", "density", "ms", "tflops",
           "extra_mem_gb", "status", "note"]
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


# ---------------------------------------------------------------------------------------------
# implementations: each returns forward(q, k, v) -> out
# ---------------------------------------------------------------------------------------------
class Unsupported(Exception):
    """The implementation cannot run this cell (recorded as status 'unsupported')."""


def _sdpa(backend_name: str, causal: bool, dropout: float = 0.0):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
               "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}[backend_name]

    def forward(q, k, v):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout)
    return forward


def _hopper(causal: bool, dropout: float = 0.0, head_dim: int = 64, dtype=None, pingpong: bool = False,
            backward_ws: bool = False, backward_one_pass: bool = False):
    """The Hopper Gluon kernels (``kernels.hopper_autograd``: forward and backward; ``pingpong``:
    the forward's ping-pong schedule; ``backward_ws``: the warp-specialised dK/dV kernel, as
    ``ours_hopper_ws`` with ``pingpong``; ``backward_one_pass``: the one-pass backward, as
    ``ours_hopper_1p``); ``Unsupported`` off Hopper, with a Triton release they were
    not built for and with dropout (checked once per cell, outside the timed calls: the cell's inputs are fresh contiguous tensors,
    which TMA accepts)."""
    import torch
    import triton

    from kernels.hopper_support import supported

    name = ("ours_hopper_1p" if backward_one_pass else "ours_hopper_ws" if backward_ws else
            "ours_hopper_pp" if pingpong else "ours_hopper")
    if dropout > 0.0:
        raise Unsupported(f"{name}: no dropout")
    ok, why = supported(triton.__version__, torch.cuda.get_device_capability(), dtype or torch.bfloat16, head_dim)
    if not ok:
        raise Unsupported(f"{name}: {why}")
    from kernels.hopper_autograd import hopper_flash_attention

    def forward(q, k, v):
        return hopper_flash_attention(q, k, v, causal=causal, pingpong=pingpong,
                                      backward_warp_specialize=backward_ws, backward_one_pass=backward_one_pass)
    return forward


def _portable(attention):
    """``attention`` (q, k, v -> out, a call of our kernels) on the portable kernels only: the Hopper
    forward dispatch (:func:`kernels.use_hopper_forward`) is off during each call and restored after it."""
    import kernels

    def forward(q, k, v):
        previous = kernels.use_hopper_forward(False)
        try:
            return attention(q, k, v)
        finally:
            kernels.use_hopper_forward(previous)
    return forward


@contextlib.contextmanager
def _one_pass_backward(on: bool):
    """With ``on``, :func:`kernels.use_one_pass_backward` set for the block (a cell's forward and
    backward both read it) and restored after it."""
    if not on:
        yield
        return
    import kernels

    previous = kernels.use_one_pass_backward(True)
    try:
        yield
    finally:
        kernels.use_one_pass_backward(previous)


def _softmax(causal: bool, dropout: float = 0.0):
    import torch
    import torch.nn.functional as F

    def forward(q, k, v):
        s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        if causal:
            n_q, n_k = s.shape[-2:]
            keep = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)
            s = s.masked_fill(~keep, float("-inf"))
        return F.dropout(torch.softmax(s.float(), dim=-1).to(q.dtype), dropout) @ v
    return forward


class Flex:
    """torch.compile'd FlexAttention, shared by every cell (recompiles per shape unless dynamic)."""

    def __init__(self, dynamic: bool):
        import torch
        import torch._dynamo

        from torch.nn.attention.flex_attention import flex_attention
        for option in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                       "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, option):
                setattr(torch._dynamo.config, option, max(getattr(torch._dynamo.config, option), 4096))
        # the `bwd` pass replays one backward (retain_graph=True), which donated buffers forbid
        import torch._functorch.config as functorch_config
        if hasattr(functorch_config, "donated_buffer"):
            functorch_config.donated_buffer = False
        self.dynamic = dynamic
        self.fn = torch.compile(flex_attention, dynamic=dynamic)

    def forward(self, block_mask=None):
        def forward(q, k, v):
            return self.fn(q, k, v, block_mask=block_mask)
        return forward


def _causal_block_mask(n: int, device):
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, n, n, device=device)


# ---------------------------------------------------------------------------------------------
# measuring one cell
# ---------------------------------------------------------------------------------------------
def _classify(err: BaseException) -> tuple[str, str]:
    import torch

    text = " ".join(str(err).split())[:300]
    if isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in text.lower():
        return "oom", text[:160]
    if isinstance(err, Unsupported) or "No available kernel" in text or "not supported" in text.lower():
        return "unsupported", text
    return "error", f"{type(err).__name__}: {text}"


def not_run_after_oom(row: dict, first_oom_seq_len: int) -> dict:
    """The row of a cell skipped because a shorter length of the same (impl, pass, d, pattern) ran
    out of memory."""
    return {**row, "status": "oom", "note": f"not run: out of memory at N={first_oom_seq_len}"}


def _measure(forward, shape, pass_name: str, dtype, warmup: float, rep: float, seed: int,
             cuda_graph: bool = False) -> tuple[float, float]:
    """(median ms, extra peak GiB) of one pass on fresh random inputs; ``cuda_graph``: timed as CUDA-graph
    replays (not for ``bwd``)."""
    import torch
    import triton

    B, H, N, d = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    if pass_name == "fwd":
        def fn():
            with torch.no_grad():
                forward(q, k, v)
        grads = None
    else:
        for t in (q, k, v):
            t.requires_grad_(True)
        grads = [q, k, v]
        if pass_name == "bwd":
            out = forward(q, k, v)
            dout = torch.randn(out.shape, device="cuda", dtype=out.dtype, generator=gen)

            def fn():
                out.backward(dout, retain_graph=True)
        else:
            dout = torch.randn(B, H, N, d, device="cuda", dtype=dtype, generator=gen)

            def fn():
                forward(q, k, v).backward(dout)
    if cuda_graph:
        ms = triton.testing.do_bench_cudagraph(fn, rep=rep, grad_to_none=grads, return_mode="median")
    else:
        ms = triton.testing.do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grads, return_mode="median")
    for t in (q, k, v):
        t.grad = None
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - base) / 2**30
    return float(ms), float(extra)


# What a cell measures besides its key: a row measured under other values of these is a different
# measurement, so --resume refuses to continue a file made with other ones and --merge to join such parts
# (the rows carry dtype but not causal, dropout, B*N, ...). ``settings`` keys, then top-level meta keys.
RUN_SETTINGS = ("tokens", "hidden", "dtype", "causal", "dropout", "block_size", "flex_dynamic", "cuda_graph")
# what a file that does not record a setting was measured with (a file without ``cuda_graph`` was timed by do_bench)
SETTING_DEFAULTS = {"cuda_graph": False}
RUN_META = ("device", "kernel_env", "tiles", "sparse_tiles")
# statuses a resumed run keeps; an ``error`` cell is measured again (as `lra bench models --resume` does)
DONE_STATUSES = ("ok", "oom", "unsupported")


def setting_mismatches(old: dict, new: dict) -> list[str]:
    """The RUN_SETTINGS / RUN_META that two provenance dicts both record with different values."""
    old_settings, new_settings = old.get("settings") or {}, new.get("settings") or {}
    return differences([(k, old_settings.get(k, SETTING_DEFAULTS.get(k)), new_settings.get(k, SETTING_DEFAULTS.get(k)))
                        for k in RUN_SETTINGS]
                       + [(k, old.get(k), new.get(k)) for k in RUN_META])


def oom_lengths(rows: list[dict]) -> dict[tuple, int]:
    """(impl, pass, d, pattern) -> the shortest N recorded as out of memory (so that a resumed run does
    not try longer lengths of it again)."""
    out: dict[tuple, int] = {}
    for r in rows:
        if r["status"] == "oom":
            key = (r["impl"], r["pass"], int(r["head_dim"]), r["pattern"])
            out[key] = min(int(r["seq_len"]), out.get(key, int(r["seq_len"])))
    return out


def sparse_flop_density(layout, causal: bool) -> float:
    """The fraction of ``_flops(..., causal)`` (the dense count) that a block-sparse kernel with this
    (n_blocks, n_blocks) or (H, n_blocks, n_blocks) layout computes: the block density without causal
    masking; with it, the layout's blocks below the diagonal count fully and those on it half, against
    the causal dense count (nb^2 / 2 blocks). Equal to the density only for symmetric layouts (BigBird's
    random blocks are not)."""
    import torch

    dense = layout.to(torch.float64)
    n_q, n_k = dense.shape[-2:]
    if not causal:
        return float(dense.mean())
    if n_q != n_k:
        raise ValueError(f"causal block-sparse FLOPs need a square layout, got {tuple(dense.shape)}")
    below = torch.tril(dense, -1).sum(dim=(-2, -1))
    diagonal = torch.diagonal(dense, dim1=-2, dim2=-1).sum(dim=-1)
    return float(((2 * below + diagonal) / (n_q * n_k)).mean())


def _rows(df: pd.DataFrame) -> list[dict]:
    """Rows of a benchmark CSV as the dicts Report keeps (missing values as None)."""
    return [{c: (None if isinstance(r[c], float) and math.isnan(r[c]) else r[c]) for c in COLUMNS}
            for r in df.to_dict("records")]


class Report:
    """Accumulates rows; rewrites CSV + Markdown + meta atomically after every cell."""

    def __init__(self, out_dir: Path, name: str, meta: dict, resume: bool = False):
        self.csv = out_dir / f"{name}.csv"
        self.md = out_dir / f"{name}.md"
        self.meta_path = out_dir / f"{name}.meta.json"
        self.meta = meta
        self.rows: list[dict] = []
        if resume and self.csv.exists():
            old = pd.read_csv(self.csv, keep_default_na=False, na_values=[""])
            missing = set(COLUMNS) - set(old.columns)
            if missing:
                raise ValueError(f"{self.csv} lacks columns {sorted(missing)}: not a `lra bench kernels` CSV")
            rows = _rows(old)
            earlier = earlier_runs(self.meta_path, meta, setting_mismatches,
                                   ("command", "date", "git_rev", "device", "versions", "settings", "kernel_env",
                                    "tiles", "sparse_tiles", "incomplete"), self.csv, "--name")
            self.rows = [r for r in rows if r["status"] in DONE_STATUSES]
            meta["earlier_runs"] = earlier
            meta["resumed_rows"] = len(self.rows)
            if len(self.rows) < len(rows):
                meta["resume_remeasured"] = f"{len(rows) - len(self.rows)} rows with status error"

    def has(self, impl, pass_name, n, d, pattern) -> bool:
        return any(r["impl"] == impl and r["pass"] == pass_name and int(r["seq_len"]) == n and int(r["head_dim"]) == d
                   and r["pattern"] == pattern for r in self.rows)

    def add(self, **row) -> None:
        self.rows.append({c: row.get(c) for c in COLUMNS})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=COLUMNS)

    def flush(self) -> None:
        df = self.frame()
        atomic_write_text(self.csv, df.to_csv(index=False, float_format="%.6g"))
        atomic_write_text(self.md, render_markdown(df, self.meta))
        atomic_write_text(self.meta_path, json.dumps(self.meta, indent=2, default=str) + "\n")


# ---------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------
def _fmt(x, digits=1) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _cell_text(row) -> str:
    if row is None:
        return ""
    if row["status"] != "ok":
        return row["status"]
    return _fmt(row["tflops"]) if row["tflops"] == row["tflops"] and row["tflops"] is not None else _fmt(row["ms"], 2)


def render_markdown(df: pd.DataFrame, meta: dict) -> str:
    lines = [f"# Kernel benchmark — {meta.get('device', '?')}", ""]
    lines.append(f"- command: `{meta.get('command', '')}`")
    v = meta.get("versions") or {}
    lines.append(f"- versions: torch {v.get('torch')}, triton {v.get('triton')}, python {v.get('python')}")
    lines.append(f"- date: {meta.get('date')}, git revision: {meta.get('git_rev')}")
    for part in meta.get("merged_from", []):
        lines.append(f"- part `{part.get('csv')}` ({part.get('rows')} rows): `{part.get('command')}` on "
                     f"{part.get('device')}, {part.get('date')}, git {part.get('git_rev')}"
                     + (f"; {part['incomplete']}" if part.get("incomplete") else ""))
    s = meta.get("settings") or {}
    lines.append(f"- dtype {s.get('dtype')}, B*N = {s.get('tokens')} tokens, hidden {s.get('hidden')} (H = hidden/d), "
                 f"causal={s.get('causal')}" + (f", attention dropout {s['dropout']} (our kernels: Philox rounds "
                                                 f"{meta.get('dropout_philox_rounds')}, "
                                                 f"{meta.get('dropout_backward', '?')} backward)" if s.get("dropout") else "")
                 + ("; medians of triton.testing.do_bench_cudagraph (CUDA-graph replays: GPU time without the "
                    "host's launch cost, L2 not flushed)" if s.get("cuda_graph") else
                    "; medians of triton.testing.do_bench (eager calls)"))
    lines.append("")
    if df.empty:
        return "\n".join(lines + ["(no cells measured yet)", ""])
    dense = df[df["pattern"] == "dense"]
    lines += dense_ranges(dense)
    if not dense.empty:
        lines += ["## Dense: TFLOP/s (speed-up of ours = anchor ms / ours ms)", ""]
        for d in dense["head_dim"].drop_duplicates():
            for p in PASSES:
                sub = dense[(dense["head_dim"] == d) & (dense["pass"] == p)]
                if sub.empty:
                    continue
                impls = [i for i in DENSE_IMPLS if i in set(sub["impl"])]
                anchors = [a for a in ANCHORS if a in impls]
                header = ["N", "B x H"] + [f"{i}" for i in impls] + [f"ours vs {a}" for a in anchors if "ours" in impls]
                lines += [f"### d = {d}, {p}", "", "| " + " | ".join(header) + " |",
                          "|" + "---|" * len(header)]
                for n in sorted(sub["seq_len"].unique()):
                    at = {r["impl"]: r for _, r in sub[sub["seq_len"] == n].iterrows()}
                    anyrow = next(iter(at.values()))
                    cells = [f"{n // K}K" if n % K == 0 else str(n), f"{anyrow['batch']} x {anyrow['heads']}"]
                    cells += [_cell_text(at.get(i)) for i in impls]
                    if "ours" in impls:
                        ours = at.get("ours")
                        for a in anchors:
                            other = at.get(a)
                            ok = ours is not None and other is not None and ours["status"] == "ok" and other["status"] == "ok"
                            cells.append(f"{other['ms'] / ours['ms']:.2f}x" if ok else "")
                    lines.append("| " + " | ".join(cells) + " |")
                lines.append("")
    sparse = df[~df["pattern"].isin(["dense", "approx"])]
    if not sparse.empty:
        lines += ["## Block-sparse (ms; sparse/dense = ours_sparse ms / ours dense ms; bound = 1.25 x density + 0.02)", ""]
        portable_too = "ours_sparse_portable" in set(sparse["impl"])
        header = ["layout", "N", "d", "pass", "density", "ours_sparse ms", "flex_sparse ms", "vs flex",
                  "ours dense ms", "sparse/dense", "bound"]
        if portable_too:
            header += ["ours_sparse_portable ms", "vs portable"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for (pat, n, d, p), grp in sparse.groupby(["pattern", "seq_len", "head_dim", "pass"], sort=False):
            at = {r["impl"]: r for _, r in grp.iterrows()}
            ours, flex, portable = at.get("ours_sparse"), at.get("flex_sparse"), at.get("ours_sparse_portable")
            dense_row = dense[(dense["impl"] == "ours") & (dense["seq_len"] == n) & (dense["head_dim"] == d)
                              & (dense["pass"] == p) & (dense["status"] == "ok")]
            dens = grp["density"].iloc[0]
            o_ms = ours["ms"] if ours is not None and ours["status"] == "ok" else None
            f_ms = flex["ms"] if flex is not None and flex["status"] == "ok" else None
            d_ms = float(dense_row["ms"].iloc[0]) if not dense_row.empty else None
            cells = [
                str(pat), f"{n // K}K", str(d), p, f"{dens:.3f}",
                _fmt(o_ms, 3) if o_ms else (ours["status"] if ours is not None else ""),
                _fmt(f_ms, 3) if f_ms else (flex["status"] if flex is not None else ""),
                f"{f_ms / o_ms:.2f}x" if o_ms and f_ms else "",
                _fmt(d_ms, 3) if d_ms else "",
                f"{o_ms / d_ms:.3f}" if o_ms and d_ms else "",
                f"{sparse_time_bound(dens):.3f}"]
            if portable_too:
                p_ms = portable["ms"] if portable is not None and portable["status"] == "ok" else None
                cells += [_fmt(p_ms, 3) if p_ms else (portable["status"] if portable is not None else ""),
                          f"{p_ms / o_ms:.2f}x" if o_ms and p_ms else ""]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    approx = df[df["pattern"] == "approx"]
    if not approx.empty:
        lines += ["## Approximate baselines (ms, extra GiB) next to our dense kernel", ""]
        header = ["impl", "N", "d", "pass", "ms", "extra GiB", "ours dense ms", "status"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for _, r in approx.iterrows():
            dense_row = dense[(dense["impl"] == "ours") & (dense["seq_len"] == r["seq_len"])
                              & (dense["head_dim"] == r["head_dim"]) & (dense["pass"] == r["pass"])
                              & (dense["status"] == "ok")]
            lines.append("| " + " | ".join([
                r["impl"], f"{r['seq_len'] // K}K", str(r["head_dim"]), r["pass"], _fmt(r["ms"], 3),
                _fmt(r["extra_mem_gb"], 2), _fmt(float(dense_row["ms"].iloc[0]), 3) if not dense_row.empty else "",
                r["status"] if r["status"] == "ok" else f"{r['status']}: {r['note']}"]) + " |")
        lines.append("")
    slow = host_bound_cells(df)
    if not slow.empty:
        lines += [f"## Cells whose forward + backward takes over {HOST_BOUND_EXCESS:.2f} x (fwd + bwd)", "",
                  "The pair does the work of the two passes; when it takes much longer, the GPU waited for the "
                  "host between kernels: such a cell most likely measures the host's launch cost of an eager call, "
                  "not the kernels (time it with `--cuda-graph`).", "",
                  "| impl | layout | d | N | fwd ms | bwd ms | fwd_bwd ms | fwd_bwd / (fwd + bwd) |", "|---" * 8 + "|"]
        for r in slow.itertuples(index=False):
            lines.append(f"| {r.impl} | {r.pattern} | {r.head_dim} | {r.seq_len // K}K | {r.fwd:.3f} | {r.bwd:.3f} | "
                         f"{r.fwd_bwd:.3f} | {r.excess:.2f} |")
        lines.append("")
    bad = df[df["status"] != "ok"]
    if not bad.empty:
        lines += ["## Cells not measured", ""]
        for _, r in bad.iterrows():
            lines.append(f"- {r['impl']} {r['pass']} N={r['seq_len']} d={r['head_dim']} {r['pattern']}: "
                         f"{r['status']} — {r['note']}")
        lines.append("")
    return "\n".join(lines)


HOST_BOUND_EXCESS = 1.15  # fwd_bwd / (fwd + bwd) above this: the cell is listed as host-bound


def host_bound_cells(df: pd.DataFrame) -> pd.DataFrame:
    """Cells (impl, pattern, d, N) with all three passes measured whose ``fwd_bwd`` time exceeds
    HOST_BOUND_EXCESS x (``fwd`` + ``bwd``), with the three times and that ratio ``excess``. The pair
    does the work of the two passes, so a large excess means the GPU waited for the host (an eager
    call's launch cost above the kernels' time)."""
    ok = df[df["status"] == "ok"]
    ms = ok.pivot_table(index=["impl", "pattern", "head_dim", "seq_len"], columns="pass", values="ms")
    if not {"fwd", "bwd", "fwd_bwd"} <= set(ms.columns):
        return pd.DataFrame(columns=["impl", "pattern", "head_dim", "seq_len", "fwd", "bwd", "fwd_bwd", "excess"])
    ms = ms.dropna(subset=["fwd", "bwd", "fwd_bwd"])
    ms["excess"] = ms["fwd_bwd"] / (ms["fwd"] + ms["bwd"])
    return ms[ms["excess"] > HOST_BOUND_EXCESS].reset_index()[
        ["impl", "pattern", "head_dim", "seq_len", "fwd", "bwd", "fwd_bwd", "excess"]]


def dense_ranges(dense: pd.DataFrame) -> list[str]:
    """Markdown lines of the dense summary (:func:`lra.table.kernels.kernel_ranges`: per (d, pass), the
    range over N of ours' TFLOP/s and speed-ups); the README's kernel headline (`lra table kernels`)."""
    from lra.table.kernels import kernel_ranges

    table, span = kernel_ranges(dense)
    if table.empty:
        return []
    lines = [f"## Summary: ranges over N = {span}", "", "| " + " | ".join(table.columns) + " |",
             "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.astype(str).itertuples(index=False)]
    return lines + [""]


def summary_table(df: pd.DataFrame) -> str:
    """Compact text table: ours' TFLOP/s and speed-ups over each anchor per (d, pass, N)."""
    dense = df[(df["pattern"] == "dense") & (df["status"] == "ok")]
    if dense.empty:
        return "(no dense cells)"
    ms = dense.pivot_table(index=["head_dim", "pass", "seq_len"], columns="impl", values="ms")
    tf = dense.pivot_table(index=["head_dim", "pass", "seq_len"], columns="impl", values="tflops")
    out = pd.DataFrame(index=ms.index)
    if "ours" in ms:
        out["ours TF/s"] = tf["ours"].round(0)
        for a in ANCHORS:
            if a in ms:
                out[f"x{a}"] = (ms[a] / ms["ours"]).round(2)
    return out.to_string()


# ---------------------------------------------------------------------------------------------
# the sweep
# ---------------------------------------------------------------------------------------------
def _flops(B, H, N, d, pass_name, causal, density=1.0) -> float:
    return 4.0 * B * H * N * N * d * FLOP_FACTOR[pass_name] * (0.5 if causal else 1.0) * density


KEY = ["impl", "pass", "seq_len", "head_dim", "pattern"]


def merge_reports(paths: list[str], out_dir: str, name: str) -> pd.DataFrame:
    """Merge benchmark CSVs written by separate runs (e.g. one per GPU) into one report. A cell
    measured in several parts keeps the row of the last part that has it; the merged meta lists
    every part's provenance (command, date, git revision, device, versions); a part that is itself a
    merged report contributes the parts it was merged from, so a report can be extended by merging
    it with a new part."""
    frames, parts = [], []
    for path in paths:
        csv = Path(path)
        df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
        missing = set(COLUMNS) - set(df.columns)
        if missing:
            raise ValueError(f"{csv} lacks columns {sorted(missing)}: not a `lra bench kernels` CSV")
        frames.append(df[COLUMNS])
        meta_path = csv.with_suffix(".meta.json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        if meta.get("merged_from"):  # an earlier merge: keep the provenance of the runs it was made of
            parts.extend(meta["merged_from"])
            continue
        parts.append({"csv": csv.name, "rows": len(df),
                      **{k: meta.get(k) for k in ("command", "date", "git_rev", "device", "versions", "settings",
                                                  "kernel_env", "tiles", "sparse_tiles", "tiles_from", "tiles_env",
                                                  "wall_s", "incomplete") if k in meta}})
    for part in parts[1:]:
        mismatches = setting_mismatches(parts[0], part)
        if mismatches:
            raise ValueError(f"--merge: {part.get('csv')} was measured with other settings than "
                             f"{parts[0].get('csv')} ({'; '.join(mismatches)}); its rows are not the same cells")
    merged = pd.concat(frames, ignore_index=True).drop_duplicates(subset=KEY, keep="last")
    first = parts[0]
    meta = {"merged_from": parts, "device": first.get("device"), "versions": first.get("versions"),
            "date": max(str(p.get("date")) for p in parts), "git_rev": ", ".join(
                dict.fromkeys(str(p.get("git_rev")) for p in parts)),
            "command": "lra bench kernels --merge " + " ".join(Path(p).name for p in paths),
            "settings": first.get("settings") or {}}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out, name, meta)
    report.rows = _rows(merged)
    report.flush()
    return report.frame()


def run(args) -> int:
    import torch

    if args.merge:
        frame = merge_reports(args.merge, args.out, args.name)
        print(summary_table(frame))
        print(f"\nmerged {len(args.merge)} files, {len(frame)} rows -> {Path(args.out) / args.name}.csv/.md/.meta.json")
        return 0
    if not torch.cuda.is_available():
        print("lra bench kernels: needs a CUDA GPU (the kernels' speed is only meaningful there); "
              "torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    import kernels
    from lra.provenance import collect

    warnings.filterwarnings("ignore")
    dtype = getattr(torch, DTYPES[args.dtype])
    for n in args.seq_lens + args.sparse_seq_lens:
        if n < 1 or args.tokens % n and n < args.tokens:
            raise ValueError(f"sequence length {n} must divide --tokens {args.tokens} (or exceed it: then B = 1)")
    for d in args.head_dims + args.sparse_head_dims + args.approx_head_dims:
        if d < 1 or args.hidden % d:
            raise ValueError(f"head dim {d} must divide --hidden {args.hidden}")
    meta = collect()
    meta["git_rev"] = os.environ.get("LRA_GIT_REV") or meta.get("git_rev")
    meta["settings"] = {k: v for k, v in vars(args).items() if k != "func"}
    meta["settings"]["cuda"] = torch.version.cuda
    meta["settings"]["cudnn"] = torch.backends.cudnn.version()
    meta.update(kernels.kernel_settings())
    if args.tiles:
        meta["tiles_from"] = args.tiles
        for path in args.tiles:
            for line in kernels.tiles.load_tuning(path):
                print(line, flush=True)
    meta["tiles"] = {d: kernels.tiles.select(torch.device("cuda"), dtype, d).as_list() for d in (16, 32, 64, 128)}
    layouts_wanted = wanted(args.sparse_layouts)
    if layouts_wanted:  # the block-sparse table's entries, clamped to the block
        meta["sparse_tiles"] = {d: kernels.tiles.select(torch.device("cuda"), dtype, d, args.block_size).as_list()
                                for d in sorted(set(args.sparse_head_dims))}
    report = Report(Path(args.out), args.name, meta, resume=args.resume)
    started = time.perf_counter()
    # (impl, pass, d, pattern) -> smallest N that ran out of memory (in this run or the resumed one)
    oom_from: dict[tuple, int] = oom_lengths(report.rows)
    dense_impls = wanted(args.impls)
    flex = Flex(args.flex_dynamic) if "flex" in dense_impls or "flex_sparse" in args.sparse_impls else None
    cells_left = 0

    def no_flex_dropout() -> None:
        if args.dropout:
            raise Unsupported("FlexAttention has no attention dropout")

    def out_of_time() -> bool:
        return args.time_budget is not None and time.perf_counter() - started > args.time_budget

    def measure_cell(impl, forward_factory, B, H, N, d, pattern, density, flops_density, note=""):
        nonlocal cells_left
        for p in args.passes:
            if report.has(impl, p, N, d, pattern):
                continue
            if out_of_time():
                cells_left += 1
                continue
            row = dict(impl=impl, **{"pass": p}, seq_len=N, head_dim=d, batch=B, heads=H, dtype=args.dtype,
                       pattern=pattern, density=density, ms=None, tflops=None, extra_mem_gb=None, note=note)
            key = (impl, p, d, pattern)
            if key in oom_from and N > oom_from[key]:
                report.add(**not_run_after_oom(row, oom_from[key]))
                continue
            try:
                if args.cuda_graph and p == "bwd":
                    raise Unsupported("bwd under --cuda-graph: a retained graph's backward runs on its "
                                      "forward's stream, outside the capture; see fwd_bwd")
                forward = forward_factory()
                ms, extra = _measure(forward, (B, H, N, d), p, dtype, args.warmup, args.rep, seed=N * 131 + d,
                                     cuda_graph=args.cuda_graph)
                tflops = _flops(B, H, N, d, p, args.causal, flops_density) / ms * 1e-9 if flops_density else None
                report.add(**{**row, "ms": ms, "tflops": tflops, "extra_mem_gb": extra}, status="ok")
            except Exception as err:  # noqa: BLE001 - every failure becomes a row, the sweep goes on
                status, text = _classify(err)
                if status == "oom":
                    oom_from[key] = min(N, oom_from.get(key, N))
                report.add(**{**row, "note": text}, status=status)
            finally:
                gc.collect()
                torch.cuda.empty_cache()
            r = report.rows[-1]
            print(f"[{time.perf_counter() - started:7.1f}s] {impl:>15} {p:>7} N={N:>6} d={d:>3} {pattern:>9} "
                  f"{r['status']:>11} {_fmt(r['ms'], 3):>9} ms {_fmt(r['tflops'], 1):>7} TF/s", flush=True)
            report.flush()

    def dense_call(q, k, v):
        return kernels.flash_attention(q, k, v, causal=args.causal, dropout_p=args.dropout)

    # 1. dense
    for d in args.head_dims:
        H = args.hidden // d
        for N in args.seq_lens:
            B = max(1, args.tokens // N)
            for impl in dense_impls:
                if impl in ("ours", "ours_one_pass"):
                    factory = lambda: dense_call  # noqa: E731
                elif impl == "ours_portable":
                    factory = lambda: _portable(dense_call)  # noqa: E731
                elif impl in ("ours_hopper", "ours_hopper_pp", "ours_hopper_ws", "ours_hopper_1p"):
                    factory = lambda d=d, impl=impl: _hopper(  # noqa: E731
                        args.causal, args.dropout, d, dtype, pingpong=impl != "ours_hopper",
                        backward_ws=impl == "ours_hopper_ws", backward_one_pass=impl == "ours_hopper_1p")
                elif impl.startswith("sdpa"):
                    factory = lambda impl=impl: _sdpa(impl, args.causal, args.dropout)  # noqa: E731
                elif impl == "flex":
                    def factory(N=N):
                        no_flex_dropout()
                        return flex.forward(_causal_block_mask(N, "cuda") if args.causal else None)
                else:
                    factory = lambda: _softmax(args.causal, args.dropout)  # noqa: E731
                with _one_pass_backward(impl == "ours_one_pass"):
                    measure_cell(impl, factory, B, H, N, d, "dense", 1.0, 1.0)

    # 2. block-sparse
    for d in args.sparse_head_dims if layouts_wanted else []:
        H = args.hidden // d
        for N in args.sparse_seq_lens:
            B = max(1, args.tokens // N)
            nb = kernels.layouts.num_blocks(N, args.block_size)
            for name in layouts_wanted:
                layout = kernels.layouts.benchmark_layout(name, nb, device="cuda")
                density = kernels.layouts.density(layout)
                flop_density = sparse_flop_density(layout, args.causal)  # = density unless causal
                note = f"block {args.block_size}, {int(layout.sum())} of {nb * nb} blocks"
                if {"ours_sparse", "ours_sparse_portable"} & set(args.sparse_impls):
                    compiled = kernels.BlockSparseLayout.from_dense(layout, args.block_size)

                    def sparse_call(q, k, v, compiled=compiled):
                        return kernels.block_sparse_flash_attention(q, k, v, compiled, block_size=args.block_size,
                                                                    causal=args.causal, dropout_p=args.dropout)
                if "ours_sparse" in args.sparse_impls:
                    measure_cell("ours_sparse", lambda call=sparse_call: call,
                                 B, H, N, d, name, density, flop_density, note)
                if "ours_sparse_portable" in args.sparse_impls:
                    measure_cell("ours_sparse_portable", lambda call=sparse_call: _portable(call),
                                 B, H, N, d, name, density, flop_density, note)
                if "flex_sparse" in args.sparse_impls:
                    def flex_factory(layout=layout, N=N):
                        if args.causal:
                            raise Unsupported("flex_sparse with --causal is not wired (BlockMask has no causal mod)")
                        no_flex_dropout()
                        return flex.forward(kernels.layouts.to_block_mask(layout, N, N, args.block_size))
                    measure_cell("flex_sparse", flex_factory, B, H, N, d, name, density, flop_density, note)

    # 3. approximate baselines
    approx_wanted = wanted(args.approx_attentions)
    registry = None
    if approx_wanted:
        try:
            import lra.attention as registry
        except ImportError as err:
            meta["approx_skipped"] = f"lra.attention is not importable ({err}); approximate baselines skipped"
            print(meta["approx_skipped"], flush=True)
    for d in args.approx_head_dims if registry is not None else []:
        H = args.hidden // d
        for N in args.approx_seq_lens:
            B = max(1, args.tokens // N)
            for name in approx_wanted:
                def approx_factory(name=name, H=H, d=d, N=N):
                    module = registry.build(name, num_heads=H, head_dim=d, max_len=N).to(device="cuda", dtype=dtype)
                    return lambda q, k, v: module(q, k, v)
                measure_cell(f"approx:{name}", approx_factory, B, H, N, d, "approx", None, None,
                             "approximate attention: no TFLOP/s")

    if cells_left:
        meta["incomplete"] = f"--time-budget {args.time_budget}s reached: {cells_left} (cell, pass) pairs not run"
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    report.flush()
    print()
    print(summary_table(report.frame()))
    print(f"\nwrote {report.csv}, {report.md}, {report.meta_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m lra.bench.kernels` — the same as `lra bench kernels`."""
    parser = Parser(prog="lra bench kernels", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
