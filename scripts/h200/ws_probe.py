"""Time one tile candidate of one pass of the dense kernel, with a correctness check (GPU only).

Made for the opt-in Hopper loads (``kernels.tiles.LOADS_TMA`` / ``LOADS_TMA_WS``), whose Triton 3.6
warp-specialised build had never been timed: session 3's tuner call stopped at that candidate
(``results/kernels/tuning/tma_h200_4c07bc2.log``), so it may hang or miscompile. Run each candidate
in its own process under ``timeout`` (``scripts/h200/ws_probe.sh``); one JSON line per candidate:
the pass's median ms per N (``triton.testing.do_bench``, bf16, B·N = 16K tokens, hidden 2048, fresh
``torch.randn`` inputs), whether the launcher really used TMA / warp specialisation, and the relative
error of the output (fwd) or of dQ, dK, dV (dkdv: the dK/dV pass under test, the table's dQ pass)
against SDPA in float32 on the same inputs.

    python scripts/h200/ws_probe.py --pass fwd --head-dim 64 --tiles 128,64,4,3,2 --seq-lens 4096,16384
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
import triton

from kernels import flash_attention, ops
from kernels.tiles import PassTiles, Tiles, override, select


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pass", dest="kind", choices=("fwd", "dkdv"), required=True)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--tiles", required=True, help="BLOCK_M,BLOCK_N,num_warps,num_stages,loads")
    p.add_argument("--seq-lens", default="4096,16384")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    args = p.parse_args()

    d = args.head_dim
    cand = PassTiles(*(int(x) for x in args.tiles.split(",")))
    base = select(torch.device("cuda"), torch.bfloat16, d)
    tiles = Tiles(cand, base.dkdv, base.dq) if args.kind == "fwd" else Tiles(base.fwd, cand, base.dq)
    rec = {"pass": args.kind, "head_dim": d, "tiles": args.tiles, "ms": {}, "rel_err": {},
           "warp_spec_applies": ops.warp_spec_applies(args.kind, cand, causal=False, dropout=False, sparse=False,
                                                      even_n=True),
           "triton": triton.__version__, "torch": torch.__version__}
    t0 = time.perf_counter()
    for n in (int(x) for x in args.seq_lens.split(",")):
        B, H = max(1, args.tokens // n), args.hidden // d
        q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        rec["tma_applies"] = ops.tma_applies(q, k, v)
        with override(tiles):
            out = flash_attention(q, k, v)
            dout = torch.randn_like(out)
            qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
            ref = F.scaled_dot_product_attention(qf, kf, vf)
            if args.kind == "fwd":
                err = {"out": float((out.float() - ref).norm() / ref.norm())}

                def fn():
                    with torch.no_grad():
                        flash_attention(q, k, v)
                ms = triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")
            else:
                out.backward(dout, retain_graph=True)
                ref.backward(dout.float())
                err = {name: float((g.float() - r.grad).norm() / r.grad.norm())
                       for name, g, r in (("dq", q.grad, qf), ("dk", k.grad, kf), ("dv", v.grad, vf))}
                ms = triton.testing.do_bench(lambda: out.backward(dout, retain_graph=True), warmup=10, rep=40,
                                             grad_to_none=[q, k, v], return_mode="median")
        rec["ms"][n] = round(float(ms), 4)
        rec["rel_err"][n] = {key: round(val, 5) for key, val in err.items()}
        del q, k, v, out, dout, qf, kf, vf, ref
        torch.cuda.empty_cache()
    rec["s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
