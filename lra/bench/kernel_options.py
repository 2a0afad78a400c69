"""The command-line options of `lra bench kernels` and the names and defaults they choose from.

Light (no torch, Triton or pandas), so that `lra --help` builds this parser in a fraction of a second;
the benchmark itself is `lra.bench.kernels`. Lists are space-separated, as everywhere in `lra`
(`--seq-lens 1k 4k 16k`); `none` as the only value of --impls, --sparse-layouts or
--approx-attentions skips that part.
"""
from __future__ import annotations

import argparse

from lra.commands.parser import Parser, seq_len

K = 1024
DENSE_IMPLS = ("ours", "ours_portable", "ours_one_pass", "ours_hopper", "ours_hopper_pp", "ours_hopper_ws",
               "ours_hopper_1p", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "flex", "softmax")
# on request only: ours_portable is kernels.flash_attention with the Hopper forward switched off
# (kernels.use_hopper_forward(False)); ours_one_pass the same with the one-pass backward without dropout
# too (kernels.use_one_pass_backward(True)); ours_hopper runs both Hopper Gluon kernels
# (kernels.hopper_autograd), ours_hopper_pp the same with the forward's ping-pong schedule,
# ours_hopper_ws that with the warp-specialised dK/dV backward, ours_hopper_1p with the one-pass backward
OPT_IN_IMPLS = ("ours_portable", "ours_one_pass", "ours_hopper", "ours_hopper_pp", "ours_hopper_ws", "ours_hopper_1p")
# ours_sparse_portable (on request only): kernels.block_sparse_flash_attention with the Hopper forward off
SPARSE_IMPLS = ("ours_sparse", "ours_sparse_portable", "flex_sparse")
OPT_IN_SPARSE_IMPLS = ("ours_sparse_portable",)
PASSES = ("fwd", "bwd", "fwd_bwd")
# = kernels.layouts.BENCHMARK_LAYOUTS, spelled out so that the CLI parses without importing the kernels
# (and Triton); tests/kernels/test_bench_report.py keeps the two equal
SPARSE_LAYOUTS = ("bigbird", "local", "butterfly")
APPROX = ("performer", "linformer", "bigbird", "softmax")
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
ALL_SEQ_LENS = (1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K)
NONE = "none"


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a dropout probability must be in [0, 1)")
    return value


def wanted(names: list[str]) -> list[str]:
    """The values of a list option that `none` can empty, without `none`."""
    return [n for n in names if n != NONE]


def add_arguments(parser: Parser) -> None:
    parser.add_argument("--out", default="results/kernels", metavar="DIR",
                        help="output directory (default results/kernels)")
    parser.add_argument("--name", default="kernels", help="file stem of <name>.csv/.md/.meta.json")
    parser.add_argument("--seq-lens", nargs="+", type=seq_len, default=list(ALL_SEQ_LENS), metavar="N",
                        help="dense sequence lengths, 4096 or 4k (default 1k 2k 4k ... 64k)")
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 32, 128], metavar="D",
                        help="dense head dims, run in this order (default 64 32 128)")
    parser.add_argument("--impls", nargs="+", choices=DENSE_IMPLS + (NONE,),
                        default=[i for i in DENSE_IMPLS if i not in OPT_IN_IMPLS], metavar="IMPL",
                        help=f"dense implementations: {' '.join(DENSE_IMPLS)} (default: all but "
                             f"{' '.join(OPT_IN_IMPLS)}); none skips the dense part")
    parser.add_argument("--passes", nargs="+", choices=PASSES, default=list(PASSES), metavar="PASS",
                        help=f"passes to time: {' '.join(PASSES)} (default: all)")
    parser.add_argument("--tokens", type=int, default=16 * K, help="B * N per cell (default 16384)")
    parser.add_argument("--hidden", type=int, default=2048, help="H * d (default 2048)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="input dtype (default bf16)")
    parser.add_argument("--causal", action="store_true", help="causal attention everywhere (default: not causal)")
    parser.add_argument("--dropout", type=_probability, default=0.0,
                        help="attention-probability dropout of the dense and block-sparse cells (ours, SDPA, "
                             "softmax; FlexAttention has none: 'unsupported'); write such runs to their own --name")
    parser.add_argument("--sparse-layouts", nargs="+", choices=SPARSE_LAYOUTS + (NONE,),
                        default=list(SPARSE_LAYOUTS), metavar="LAYOUT",
                        help=f"block-sparse layouts: {' '.join(SPARSE_LAYOUTS)} (default: all); none skips "
                             "the sparse part")
    parser.add_argument("--sparse-seq-lens", nargs="+", type=seq_len, default=list(ALL_SEQ_LENS), metavar="N",
                        help="sequence lengths of the sparse part (default 1k 2k 4k ... 64k)")
    parser.add_argument("--sparse-head-dims", nargs="+", type=int, default=[64, 32], metavar="D",
                        help="head dims of the sparse part (default 64 32)")
    parser.add_argument("--sparse-impls", nargs="+", choices=SPARSE_IMPLS,
                        default=[i for i in SPARSE_IMPLS if i not in OPT_IN_SPARSE_IMPLS], metavar="IMPL",
                        help=f"block-sparse implementations: {' '.join(SPARSE_IMPLS)} (default: all but "
                             f"{' '.join(OPT_IN_SPARSE_IMPLS)})")
    parser.add_argument("--block-size", type=int, default=128, help="layout block size of the sparse part")
    parser.add_argument("--approx-attentions", nargs="+", choices=APPROX + (NONE,), default=list(APPROX),
                        metavar="NAME",
                        help=f"approximate baselines from lra.attention: {' '.join(APPROX)} (default: all); "
                             "none skips them")
    parser.add_argument("--approx-seq-lens", nargs="+", type=seq_len, default=[1 * K, 4 * K, 16 * K], metavar="N",
                        help="sequence lengths of the approximate baselines (default 1k 4k 16k)")
    parser.add_argument("--approx-head-dims", nargs="+", type=int, default=[64, 32], metavar="D",
                        help="head dims of the approximate baselines (default 64 32)")
    parser.add_argument("--flex-dynamic", action="store_true",
                        help="compile FlexAttention with dynamic=True (one compile per head dim instead of per shape)")
    parser.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    parser.add_argument("--rep", type=float, default=100.0, help="do_bench repetition time, ms")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="time each pass as replays of one CUDA graph (triton.testing.do_bench_cudagraph): the "
                             "GPU's time alone, without the host's launch cost, which bounds eager calls of little "
                             "work; L2 not flushed between calls; bwd cells unsupported (the retained graph's "
                             "backward runs outside the capture; use fwd_bwd); write such runs to their own --name")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds; start no new cell after this (what was measured is kept)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows of an existing <out>/<name>.csv and measure only the missing cells "
                             "(and those that failed with an error); a file measured with other settings (dtype, "
                             "causal, dropout, --tokens, --hidden, block size, GPU, tiles) is refused")
    parser.add_argument("--merge", nargs="+", default=None, metavar="CSV",
                        help="measure nothing: merge these benchmark CSVs (later files win on the same cell) into "
                             "<out>/<name>.csv/.md/.meta.json, keeping each part's provenance; needs no GPU")
    parser.add_argument("--tiles", nargs="+", default=None, metavar="FILE",
                        help="JSON files from `python -m kernels.tuning --out` whose best tiles replace the GPU table")
    parser.rename("--approx", "--approx-attentions")
