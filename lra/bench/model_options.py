"""The command-line options of `lra bench models` and the names and defaults they choose from.

Light (no torch or pandas), so that `lra --help` builds this parser in a fraction of a second; the
benchmark itself is `lra.bench.models`.
"""
from __future__ import annotations

from pathlib import Path

from lra.commands.parser import Parser, seq_len

K = 1024
SEQ_LENS = (1 * K, 2 * K, 4 * K, 8 * K, 16 * K)
LONG_SEQ_LENS = (32 * K, 64 * K)
# Attentions whose memory is linear in N (our kernels and the approximate baselines) also run LONG_SEQ_LENS.
LONG_ATTENTIONS = ("flash", "flash_sparse", "performer", "linformer", "bigbird")
REGIMES = {"paper": 256 * K, "small": 32 * K}
MODES = ("eager", "compiled")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PROFILE_STEPS = 3
MODELS = ("lra", "user")
USER_ATTENTIONS = ("flash", "sdpa", "sdpa_flash", "softmax")  # lra.bench.user_model (kept light here)


def add_arguments(parser: Parser) -> None:
    parser.add_argument("--model", choices=MODELS, default="lra",
                        help="lra: the project's LRA model (default); user: a user's own plain-torch.nn model calling "
                             "the attention function on strided q/k/v views (attentions " + ", ".join(USER_ATTENTIONS)
                             + "), to measure drop-in use")
    parser.add_argument("--attentions", nargs="+", metavar="NAME",
                        help="attentions to measure (default: every registered one)")
    parser.add_argument("--seq-lens", nargs="+", type=seq_len, metavar="N",
                        help="sequence lengths for every attention, 4096 or 4K (default: 1K 2K 4K 8K 16K)")
    parser.add_argument("--long-seq-lens", nargs="*", type=seq_len, metavar="N",
                        help="extra lengths for " + ", ".join(LONG_ATTENTIONS) +
                             " (default: 32K 64K, or none when --seq-lens is given)")
    parser.add_argument("--regimes", nargs="+", choices=list(REGIMES), default=list(REGIMES), metavar="REGIME",
                        help="batch regimes: paper = 256 x 1K tokens per batch, small = 32K (default: both)")
    parser.add_argument("--tokens-per-batch", type=int, metavar="T",
                        help="one custom regime with T tokens per batch instead of --regimes")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=None, metavar="MODE",
                        help="eager and/or compiled (torch.compile); default: both on CUDA, eager on CPU")
    parser.add_argument("--compile-mode", choices=COMPILE_MODES, default="default", metavar="MODE",
                        help=f"torch.compile mode of the compiled cells: {', '.join(COMPILE_MODES)} (reduce-overhead: "
                             "CUDA graphs); a non-default mode is named in each compiled row's note — write such "
                             "runs to their own --out")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per cell (median reported)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (compilation included)")
    parser.add_argument("--options", nargs="+", default=[], metavar="ATTN.KEY=VALUE",
                        help="attention options, e.g. sdpa.backend=cudnn flash_sparse.layout=butterfly")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm as in training (0 = off)")
    parser.add_argument("--out", type=Path, default=Path("results/models/models.csv"), metavar="FILE.csv",
                        help="CSV to write; FILE.md and FILE.meta.json go next to it (default: the model-step topic "
                             "folder, results/models/models.csv)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the cells already in --out (ok/oom/unsupported) and measure only the rest; a file "
                             "measured with other settings (tokens per batch, attention dropout, options, compile "
                             "mode, device, kernel settings) is refused")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the models and inputs (default: 0)")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help=f"after timing each cell, profile {PROFILE_STEPS} more steps with torch.profiler and "
                             "write DIR/<attention>_<regime>_<mode>_N<seq>.txt (operator tables by self CPU and GPU "
                             "time) and .json.gz (Chrome/Perfetto trace)")
    parser.add_argument("--interleave", action="store_true",
                        help="measure the attentions of each (length, regime, mode) side by side: all models built "
                             "and warmed up, then --rounds rounds of steps of each in turn, so that host-bound cells "
                             "(small batch, 1K-4K) compare within the same time windows; peak memory is each model's own")
    parser.add_argument("--rounds", type=int, default=5,
                        help="with --interleave: rounds of ceil(steps / rounds) steps per attention (default 5)")
    parser.add_argument("--attention-dropout", type=float, default=0.1, metavar="P",
                        help="attention-probability dropout of the model (default 0.1, the paper's); 0 isolates "
                             "the cost of dropout — write such runs to their own --out")
