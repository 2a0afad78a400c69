"""Measure tile configurations of the attention kernels on this GPU (``python -m kernels.tuning``).

For each head dim (with ``--dropout P``: on the attention-dropout path, whose tiles have a table of
their own) it times the forward with every forward candidate, then the backward with every
dK/dV candidate (dQ fixed), then every dQ candidate (with the best dK/dV), at bf16 shapes of the
kernel benchmark (B * N = tokens, H = hidden / d), on several N; the best candidate per pass
minimises the geometric mean of its times over those N. It prints the table entries for
``kernels/tiles.py`` and writes every timing as JSON. Candidates that do not fit (shared memory,
registers) are reported and skipped. SDPA's flash and cuDNN back-ends are timed on the same shapes
for orientation.

``--sparse LAYOUT`` (bigbird, local, butterfly: ``kernels.layouts.benchmark_layout``, blocks of
``--block-size``) times the block-sparse kernel on that layout instead, candidates clamped to the
block size, and writes entries that ``kernels.tiles.load_tuning`` puts into the block-sparse table
(16-bit, no dropout); the SDPA anchors are skipped there. ``--combine A.json B.json --out C.json``
merges runs on several layouts into one file whose winners minimise the geometric mean over all of
them (``lra bench kernels --tiles C.json``, or ``kernels.tiles.load_tuning``, puts them in the
tables). The JSON is rewritten after every timing, so a run cut short keeps what it measured.

With ``--dropout`` the backward is the one-pass form (``kernels.dropout.fused_backward``), whose
dK/dV tiles have a table of their own; ``--split-backward`` tunes the two-pass form instead (it runs
under ``torch.use_deterministic_algorithms(True)``).
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import os
import re
import sys
import time

import torch

from . import block_sparse_flash_attention, flash_attention
from .dropout import fused_backward
from .hopper_dispatch import use_hopper_forward
from .layouts import BENCHMARK_LAYOUTS
from .tiles import PassTiles, Tiles, override, padded_head_dim, select

# candidates (BLOCK_M, BLOCK_N, num_warps, num_stages) per pass; head dim 128 has its own lists.
# 8 warps = two warpgroups, each running its own 64-row wgmma; 256-row forward tiles share every
# K/V tile between two warpgroups (half the K/V traffic per FLOP)
FWD = [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 4, 3), (128, 128, 8, 3), (256, 64, 8, 3), (256, 128, 8, 2)]
DKDV = [(32, 128, 4, 3), (32, 128, 8, 3), (64, 128, 4, 3), (64, 128, 8, 3), (64, 64, 4, 3),
        # smaller / wider-warp tiles for the one-pass dropout backward, whose dK/dV kernel also holds a
        # dQ tile and spills with the split tiles at d = 64 (python -m kernels.compile_check --resources)
        (32, 64, 4, 3), (64, 64, 8, 3), (128, 64, 8, 3), (64, 128, 8, 2)]
DQ = [(128, 32, 4, 3), (128, 32, 8, 3), (128, 64, 4, 3), (128, 64, 8, 3), (64, 64, 4, 3)]
FWD_128 = [(128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (128, 32, 4, 3), (64, 64, 4, 3)]
# the 8-warp 32 x 128 and 64 x 64 tiles compile for sm_90 without spilling at d = 128 (Triton 3.6:
# 222-234 registers), where 64 x 128 at 8 warps and the 4-warp twins spill
DKDV_128 = [(32, 128, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (64, 64, 4, 3), (32, 64, 4, 3), (32, 128, 8, 3),
            (64, 64, 8, 3)]
# block-sparse forward only (--sparse): 64-row query tiles, more programs per SM for the short key
# loops of very sparse rows (the local layout visits 3 key blocks per query tile)
FWD_SPARSE = [(64, 64, 4, 3), (64, 128, 4, 3), (64, 128, 4, 2), (64, 64, 2, 3)]
# every block-sparse pass: 4-stage twins of the shipped entries. The block-sparse loops carry their
# list index one step ahead (kernels.triton_attention._fwd_tiles), so their copies pipeline like the
# dense loops' and a deeper pipeline may hide more of the latency of a gathered key block
SPARSE_DEEP = {"fwd": [(64, 128, 4, 4), (128, 128, 4, 4), (64, 64, 4, 4)],
               "dkdv": [(64, 128, 4, 4), (64, 64, 4, 4)],
               "dq": [(64, 64, 4, 4), (128, 64, 4, 4)]}
DQ_128 = [(128, 32, 8, 3), (128, 64, 8, 2), (128, 32, 4, 3), (64, 64, 4, 3), (64, 32, 4, 3)]

def candidates(kind: str, head_dim: int, sparse: bool = False) -> list[tuple]:
    """Candidates of pass ``kind`` ("fwd", "dkdv", "dq") for ``head_dim``; ``sparse`` adds the
    block-sparse passes' own (64-row forward tiles, 4-stage pipelines)."""
    big = padded_head_dim(head_dim) == 128
    out = list({"fwd": FWD_128 if big else FWD, "dkdv": DKDV_128 if big else DKDV, "dq": DQ_128 if big else DQ}[kind])
    if sparse:
        out += (FWD_SPARSE if kind == "fwd" else []) + SPARSE_DEEP[kind]
    return out


def _bench(fn, grads=None) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=40, grad_to_none=grads, return_mode="median"))


def _inputs(n, d, tokens, hidden, dtype):
    B, H = max(1, tokens // n), hidden // d
    q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    return q, k, v


def _time_fwd(q, k, v, dropout_p=0.0, attn=flash_attention) -> float:
    def fn():
        with torch.no_grad():
            attn(q, k, v, dropout_p=dropout_p)
    return _bench(fn)


def _time_bwd(q, k, v, dropout_p=0.0, attn=flash_attention) -> float:
    out = attn(q, k, v, dropout_p=dropout_p)
    dout = torch.randn_like(out)
    return _bench(lambda: out.backward(dout, retain_graph=True), [q, k, v])


def _sdpa_times(q, k, v, dropout_p=0.0) -> dict:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                def fwd():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
                o = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
                dout = torch.randn_like(o)
                out[name] = {"fwd": _bench(fwd), "bwd": _bench(lambda: o.backward(dout, retain_graph=True), [q, k, v])}
        except RuntimeError as err:
            out[name] = {"error": str(err)[:200]}
    return out


def _geo(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _sparse_attention(name: str, n: int, block_size: int, device):
    """attn(q, k, v, dropout_p) running the block-sparse kernel on benchmark layout ``name`` at ``n``."""
    from . import layouts
    from .block_sparse import BlockSparseLayout

    compiled = BlockSparseLayout.from_dense(
        layouts.benchmark_layout(name, layouts.num_blocks(n, block_size), device=device), block_size)

    def attn(q, k, v, dropout_p=0.0):
        return block_sparse_flash_attention(q, k, v, compiled, block_size=block_size, dropout_p=dropout_p)
    return attn


@contextlib.contextmanager
def _deterministic():
    """torch's deterministic algorithms on (warnings only) inside the block: the two-pass dropout backward."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


def tune(head_dims, seq_lens, tokens, hidden, dtype, on_result=None, dropout_p: float = 0.0,
         passes=("fwd", "dkdv", "dq"), sparse: str | None = None, block_size: int = 128,
         split_backward: bool = False) -> dict:
    """Time every candidate (see the module docstring); returns {padded head dim: entry}. The forward
    is timed on the portable kernel, whose tiles these are (the Hopper forward is off meanwhile)."""
    hopper = use_hopper_forward(False)
    try:
        with _deterministic() if split_backward else contextlib.nullcontext():
            return _tune(head_dims, seq_lens, tokens, hidden, dtype, on_result, dropout_p, passes, sparse, block_size)
    finally:
        use_hopper_forward(hopper)


def _tune(head_dims, seq_lens, tokens, hidden, dtype, on_result, dropout_p, passes, sparse, block_size) -> dict:
    results = {}
    for d in head_dims:
        fused_bwd = fused_backward(dropout_p)
        base = select(torch.device("cuda"), dtype, d, block_size if sparse else None, dropout=dropout_p > 0.0,
                      fused_bwd=fused_bwd)
        shapes = []
        for n in seq_lens:
            q, k, v = _inputs(n, d, tokens, hidden, dtype)
            shapes.append((q, k, v, _sparse_attention(sparse, n, block_size, q.device) if sparse else flash_attention))

        entry = {"fwd": {}, "dkdv": {}, "dq": {}, "sdpa": {}, "dropout": dropout_p,
                 "dropout_bwd": ("fused" if fused_bwd else "split") if dropout_p > 0.0 else None,
                 "sparse": {"layout": sparse, "block_size": block_size} if sparse else None}
        for n, (q, k, v, _attn) in zip(seq_lens, shapes):
            if not sparse:  # the dense anchors say nothing about a block-sparse layout
                entry["sdpa"][n] = _sdpa_times(q, k, v, dropout_p)

        def trial(kind, cand, tiles):
            t0 = time.perf_counter()
            try:
                with override(tiles):
                    ms = [(_time_fwd if kind == "fwd" else _time_bwd)(q, k, v, dropout_p, attn)
                          for q, k, v, attn in shapes]
            except Exception as err:  # noqa: BLE001 - a config that does not fit is skipped
                entry[kind][str(cand)] = {"error": f"{type(err).__name__}: {str(err)[:160]}"}
                print(f"d={d} {kind} {cand}: {type(err).__name__}", flush=True)
                return None
            entry[kind][str(cand)] = {"ms": dict(zip(seq_lens, ms)), "s": round(time.perf_counter() - t0, 1)}
            print(f"d={d} {kind} {cand}: " + " ".join(f"{m:.3f}" for m in ms) + " ms", flush=True)
            checkpoint()
            return _geo(ms)

        def checkpoint():  # after every timing, so a run cut short keeps what it measured
            entry["best"] = {k: [v.block_m, v.block_n, v.num_warps, v.num_stages] for k, v in best.items()}
            results[padded_head_dim(d)] = entry
            if on_result is not None:
                on_result(results)

        best = {}
        for kind in passes:
            scored, seen = [], set()
            for cand in candidates(kind, d, sparse=bool(sparse)):
                pt = PassTiles(*cand)
                if sparse:  # tiles no larger than a block; clamping can make two candidates one
                    pt = pt.clamped(block_size)
                    cand = (pt.block_m, pt.block_n, pt.num_warps, pt.num_stages)
                    if cand in seen:
                        continue
                    seen.add(cand)
                if kind == "fwd":
                    tiles = Tiles(pt, base.dkdv, base.dq)
                elif kind == "dkdv":
                    tiles = Tiles(base.fwd, pt, base.dq)
                else:
                    tiles = Tiles(base.fwd, best.get("dkdv", base.dkdv), pt)
                score = trial(kind, cand, tiles)
                if score is not None:
                    scored.append((score, cand))
            if scored:
                best[kind] = PassTiles(*min(scored)[1])
            checkpoint()
        del shapes
        torch.cuda.empty_cache()
    return results


def combine(paths: list[str]) -> dict:
    """One tuning JSON from several ``--sparse`` runs of the same head dims on different layouts:
    per head dim and pass, the candidate with the lowest geometric mean over every file's timings
    (only candidates timed without error in all of them). ``kernels.tiles.load_tuning`` reads the
    result like any tuning JSON (the block-sparse table); passes no candidate won are left out."""
    runs = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
            raise ValueError(f"{path}: not a kernels.tuning JSON (no 'results')")
        runs.append((path, data))
    head_dims = set.intersection(*(set(data["results"]) for _, data in runs))
    if not head_dims:
        raise ValueError(f"{', '.join(paths)}: no head dim was tuned in all of them")
    results = {}
    for d in sorted(head_dims, key=int):
        entries = [(path, data["results"][d]) for path, data in runs]
        kinds = {(bool(e.get("sparse")), (e.get("sparse") or {}).get("block_size"), float(e.get("dropout", 0.0)),
                  e.get("dropout_bwd")) for _, e in entries}
        if len(kinds) > 1:
            raise ValueError(f"head dim {d}: the files tuned different kernels (block-sparse / block size / "
                             f"dropout differ): {', '.join(paths)}")
        first = entries[0][1]
        best, score = {}, {}
        for kind in ("fwd", "dkdv", "dq"):
            timed = [{c: t["ms"] for c, t in e.get(kind, {}).items() if "ms" in t} for _, e in entries]
            common = set.intersection(*(set(t) for t in timed))
            if not common:
                continue
            geo = {c: _geo([float(ms) for t in timed for ms in t[c].values()]) for c in common}
            winner = min(common, key=lambda c: (geo[c], c))
            best[kind] = list(ast.literal_eval(winner))
            score[kind] = {c: round(geo[c], 4) for c in sorted(common, key=geo.get)}
        layouts = "+".join(str((e.get("sparse") or {}).get("layout", "dense")) for _, e in entries)
        results[d] = {"best": best, "geomean_ms": score, "dropout": first.get("dropout", 0.0),
                      "dropout_bwd": first.get("dropout_bwd"),
                      "sparse": {"layout": layouts, "block_size": first["sparse"]["block_size"]}
                      if first.get("sparse") else None}
    return {"device": runs[0][1].get("device"), "torch": runs[0][1].get("torch"), "combined_from": list(paths),
            "results": results}


def _write_json(path: str, data: dict) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


PASSES = ("fwd", "dkdv", "dq")
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


def _listed(values: list[str]) -> list[str]:
    """The items of a list option given space- or comma-separated (``64 128`` or ``64,128``)."""
    return [item for value in values for item in value.split(",") if item]


def _length(text: str) -> int:
    """A sequence length: a number of tokens (4096) or of 1K (4K), as `lra.seq_len` reads them (the
    kernels do not import lra)."""
    match = re.fullmatch(r"(\d+)([kK]?)", text)
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"bad sequence length {text!r}: use a number of tokens (4096) or a multiple of 1K (4K)")
    return int(match.group(1)) * (1024 if match.group(2) else 1)


def _head_dim(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 128:
        raise ValueError(f"bad head dim {text!r}: the kernels take 1 to 128")
    return int(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", nargs="+", default=["64", "32", "128"], metavar="D",
                        help="head dims to tune, space- or comma-separated (default 64 32 128)")
    parser.add_argument("--seq-lens", nargs="+", default=["4K", "16K"], metavar="N",
                        help="sequence lengths timed, 4096 or 4K (default 4K 16K)")
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--dtype", default="bf16", choices=list(DTYPES))
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="tune the attention-dropout path with this p (its own table: kernels.tiles)")
    parser.add_argument("--split-backward", action="store_true",
                        help="with --dropout: tune the two-pass (deterministic) backward instead of the one-pass one")
    parser.add_argument("--passes", nargs="+", default=list(PASSES), metavar="PASS",
                        help="passes to tune, of fwd, dkdv, dq (the others keep the table's entry)")
    parser.add_argument("--sparse", default=None, choices=BENCHMARK_LAYOUTS,
                        help="tune the block-sparse kernel on this benchmark layout (its own table: kernels.tiles)")
    parser.add_argument("--block-size", type=int, default=128, choices=(32, 64, 128),
                        help="block size of the --sparse layout")
    parser.add_argument("--out", default=None, help="JSON file for every timing")
    parser.add_argument("--combine", nargs="+", metavar="JSON", default=None,
                        help="instead of timing: merge these tuning JSONs (e.g. one per --sparse layout) into --out, "
                             "each pass's winner by the geometric mean over all of them")
    args = parser.parse_args(argv)
    try:
        head_dims = [_head_dim(x) for x in _listed(args.head_dims)]
        seq_lens = [_length(x) for x in _listed(args.seq_lens)]
    except ValueError as err:
        parser.error(str(err))
    passes = _listed(args.passes)
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        parser.error(f"--passes: no pass {unknown[0]!r}; the passes are {', '.join(PASSES)}")
    if args.combine:
        if not args.out:
            parser.error("--combine writes its result to --out; name the file")
        try:
            combined = combine(args.combine)
        except (OSError, ValueError) as err:
            print(f"kernels.tuning --combine: {err}", file=sys.stderr)
            return 2
        _write_json(args.out, combined)
        for d, entry in combined["results"].items():
            print(f"{d}: {entry['best']} (geometric mean over {len(args.combine)} files)")
        return 0
    if args.split_backward and args.dropout <= 0.0:
        parser.error("--split-backward tunes the backward under dropout; give --dropout P")
    if args.sparse and args.dropout > 0.0:
        parser.error("--sparse tunes the block-sparse table, which has no dropout entries; leave out --dropout")
    if not torch.cuda.is_available():
        print("kernels.tuning needs a CUDA GPU", file=sys.stderr)
        return 2
    def save(results):  # after every head dim, so a run cut short keeps what it measured
        if args.out:
            _write_json(args.out, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                   "results": results})

    results = tune(head_dims, seq_lens, args.tokens, args.hidden, DTYPES[args.dtype], on_result=save,
                   dropout_p=args.dropout, passes=[p for p in PASSES if p in passes],
                   sparse=args.sparse, block_size=args.block_size, split_backward=args.split_backward)
    print("\n# best per padded head dim (fwd, dkdv, dq) = (BLOCK_M, BLOCK_N, num_warps, num_stages)")
    for d, entry in results.items():
        print(f"{d}: {entry['best']}   sdpa: {json.dumps(entry['sdpa'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
