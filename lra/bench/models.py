"""`lra bench models`: training-step throughput and peak memory of the LRA model per attention and length.

What one measurement is: the `paper`-size LRA classifier (dim 64, MLP 128, 2 heads of 32, 2 layers,
dropout 0.1, learned 1-D positions, mean pooling — the FlashAttention paper's LRA setting, see
lra/config.py) on a Pathfinder-like input (256-token vocabulary, 2 classes, no padding), one full
training step — forward, cross-entropy, backward, gradient clipping, AdamW step (fused on CUDA) — under
bf16 autocast on GPU. The same number of tokens goes into every batch at every length (batch =
tokens_per_batch // N), so rows of one regime compare like for like. Warm-up steps (which include
torch.compile's compilation and autotuning) are excluded; the step time is the median over the timed
steps, measured with CUDA events (perf_counter on CPU); peak memory is `max_memory_allocated` over the
timed steps.

Regimes: `paper` = 256 x 1K tokens per batch (the Pathfinder-32 batch of the paper), `small` = 32K
tokens per batch. Modes: `eager` and `compiled` (torch.compile of the model). An out-of-memory cell is
recorded as `oom` (and longer lengths of the same attention, regime and mode are not tried: memory
grows with N at constant tokens per batch); an attention that cannot run a length is `unsupported`;
any other failure is `error` with its message. Nothing stops the sweep.

Interleaving (`--interleave`): the attentions of one (length, regime, mode) are built and warmed up
together and then timed in rounds, a block of steps of each in turn, so that their ratio is measured in
the same time windows. Host-bound cells (the small batch at 1K-4K on the H200) drift by tens of percent
within one run of the benchmark, more than the attentions differ; the rows say what
they were interleaved with.

Profiling (`--profile DIR`): after a cell is timed, 3 more steps run under torch.profiler (CPU and, on
CUDA, GPU activity) and DIR/<attention>_<regime>_<mode>_N<seq>.txt gets the operator tables (sorted by
self CPU time and, on CUDA, self GPU time) with a Chrome/Perfetto trace beside it (.json.gz); the
profiled steps are not part of the timing.

Output: CSV (columns in docs/interfaces.md), rewritten atomically after every cell, so `--resume`
continues a killed run; a Markdown table (lra.table's efficiency view) and `<name>.meta.json` with the
provenance (command, GPU, versions, date, git revision) and the settings.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from lra.bench.model_options import LONG_ATTENTIONS, LONG_SEQ_LENS, MODES, PROFILE_STEPS, REGIMES, SEQ_LENS
from lra.bench.resume import differences, earlier_runs
from lra.records import atomic_write_text

# Attention options the benchmark uses unless --options says otherwise: the SDPA row is the cuDNN
# back-end, the fastest fused attention PyTorch ships on Hopper (the comparison point).
DEFAULT_OPTIONS = {"cuda": {"sdpa": {"backend": "cudnn"}}, "cpu": {}}
VOCAB_SIZE = 256
NUM_CLASSES = 2
# ms_p10 / ms_p90: the 10th / 90th percentile of the timed steps, so that noisy (launch-bound) cells show
# compile_mode: the torch.compile mode of a compiled row ("default", "reduce-overhead" = CUDA graphs, ...),
# empty for eager rows (one mode per file: --resume refuses another).
CSV_COLUMNS = ["attention", "seq_len", "batch_size", "tokens_per_batch", "regime", "compile", "compile_mode",
               "ms_per_step", "ms_p10", "ms_p90", "samples_per_s", "tokens_per_s", "peak_mem_gb", "status", "note"]
DONE_STATUSES = ("ok", "oom", "unsupported")
# What a cell measures besides its key (attention, N, regime, mode): --resume refuses a file measured
# with other values of these (settings keys, then top-level meta keys), and keeps the earlier runs'
# provenance in the meta as `earlier_runs`.
RESUME_SETTINGS = ("attention_dropout", "compile_mode", "grad_clip", "interleave")
RESUME_META = ("device", "bench_device", "kernel_env", "model", "input")
PROFILE_ROWS = 30


# ------------------------------------------------------------------------------------------ planning
@dataclasses.dataclass(frozen=True)
class Cell:
    attention: str
    seq_len: int
    regime: str
    tokens: int          # requested tokens per batch
    compile: bool
    model: str = "lra"   # "lra": the project's model; "user": lra.bench.user_model (one model per file)

    @property
    def batch_size(self) -> int:
        return max(1, self.tokens // self.seq_len)

    @property
    def key(self) -> tuple:
        return (self.attention, self.seq_len, self.regime, self.compile)

    def describe(self) -> str:
        from lra.table import format_seq_len

        return f"{self.attention} N={format_seq_len(self.seq_len)} {self.regime} {'compiled' if self.compile else 'eager'}"


def parse_options(items: list[str], attentions: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, option = key.partition(".")
        if not sep or not dot or not option:
            raise ValueError(f"--options {item!r}: expected ATTENTION.OPTION=VALUE, e.g. sdpa.backend=cudnn")
        if name not in attentions:
            raise ValueError(f"--options {item!r}: attention {name!r} is not benchmarked (have {', '.join(attentions)})")
        out.setdefault(name, {})[option] = value
    return out


def plan(args, registered: list[str], device_type: str) -> tuple[list[Cell], dict]:
    """The grid of cells in the order they run, and the resolved settings."""
    attentions = list(args.attentions or registered)
    unknown = [a for a in attentions if a not in registered]
    if unknown:
        raise ValueError(f"unknown attention {unknown[0]!r}: registered are {', '.join(registered)}")
    seq_lens = list(args.seq_lens) if args.seq_lens else list(SEQ_LENS)
    if args.long_seq_lens is not None:
        long_lens = list(args.long_seq_lens)
    else:
        long_lens = [] if args.seq_lens else list(LONG_SEQ_LENS)
    if args.tokens_per_batch is not None:
        if args.tokens_per_batch < 1:
            raise ValueError(f"--tokens-per-batch must be >= 1, got {args.tokens_per_batch}")
        regimes = {"custom": args.tokens_per_batch}
    else:
        regimes = {name: REGIMES[name] for name in args.regimes}
    modes = args.modes or (list(MODES) if device_type == "cuda" else ["eager"])
    model = getattr(args, "model", "lra")
    if args.steps < 1 or args.warmup < 0:
        raise ValueError(f"--steps must be >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}")
    cells = []
    for regime, tokens in regimes.items():
        for mode in modes:
            for attention in attentions:
                lens = seq_lens + [n for n in long_lens if attention in LONG_ATTENTIONS and n not in seq_lens]
                for n in sorted(lens):
                    if n < tokens and tokens % n:  # batch = tokens // N would feed fewer tokens at this N
                        raise ValueError(f"sequence length {n} does not divide the {tokens} tokens per batch of "
                                         f"regime {regime}: the batches would not hold the same tokens at every "
                                         "length (use lengths that divide it, or exceed it: then batch = 1)")
                    cells.append(Cell(attention, n, regime, tokens, mode == "compiled", model))
    options = {name: dict(DEFAULT_OPTIONS.get(device_type, {}).get(name, {})) for name in attentions}
    for name, values in parse_options(args.options, attentions).items():
        options[name].update(values)
    settings = {"model": model, "attentions": attentions, "seq_lens": seq_lens, "long_seq_lens": long_lens,
                "long_attentions": list(LONG_ATTENTIONS), "regimes": regimes, "modes": modes,
                "steps": args.steps, "warmup": args.warmup, "grad_clip": args.grad_clip,
                "options": {k: v for k, v in options.items() if v}, "seed": args.seed,
                "attention_dropout": args.attention_dropout,
                "profile": str(args.profile) if args.profile is not None else None,
                "compile_mode": args.compile_mode,
                "interleave": bool(args.interleave), "rounds": args.rounds if args.interleave else None}
    if args.interleave and args.profile is not None:
        raise ValueError("--profile and --interleave do not go together: profile cells one at a time")
    if args.interleave and not 1 <= args.rounds <= args.steps:
        raise ValueError(f"--rounds must be between 1 and --steps ({args.steps}), got {args.rounds}")
    if not 0.0 <= args.attention_dropout < 1.0:
        raise ValueError(f"--attention-dropout must be in [0, 1), got {args.attention_dropout}")
    return cells, settings


def resume_mismatches(old: dict, new: dict) -> list[str]:
    """What differs between the provenance of the file being resumed (``old``) and this run's (``new``):
    the tokens of a regime both plan, the options of an attention both measure, RESUME_SETTINGS and
    RESUME_META (a key only one of them records is not compared)."""
    old_settings, new_settings = old.get("settings") or {}, new.get("settings") or {}
    pairs = [(k, old_settings.get(k), new_settings.get(k)) for k in RESUME_SETTINGS]
    pairs += [(k, old.get(k), new.get(k)) for k in RESUME_META]
    old_regimes, new_regimes = old_settings.get("regimes") or {}, new_settings.get("regimes") or {}
    pairs += [(f"tokens per batch of regime {r}", old_regimes[r], new_regimes[r]) for r in new_regimes if r in old_regimes]
    if "options" in old_settings and "options" in new_settings:
        both = set(old_settings.get("attentions") or []) & set(new_settings.get("attentions") or [])
        pairs += [(f"options of {a}", old_settings["options"].get(a, {}), new_settings["options"].get(a, {}))
                  for a in sorted(both)]
    return differences(pairs)


# ------------------------------------------------------------------------------------------ measuring
def paper_model_config(attention_dropout: float = 0.1):
    """The FlashAttention paper's LRA model (Nyströmformer's LRA settings) — see lra/config.py."""
    from lra.config import ModelConfig

    return ModelConfig(dim=64, depth=2, num_heads=2, head_dim=32, mlp_dim=128, dropout=0.1,
                       attention_dropout=attention_dropout,
                       positional="learned", grid_positions=False, pooling="mean")


class Unsupported(Exception):
    """The attention cannot be built for this cell (e.g. a sparsity layout that needs a longer N)."""


def _is_oom(err: BaseException) -> bool:
    import torch

    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, (RuntimeError, MemoryError)) and ("out of memory" in text or isinstance(err, MemoryError))


def _free_memory(device) -> None:
    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def profile_stem(profile_dir: Path, cell: Cell) -> Path:
    """DIR/<attention>_<regime>_<mode>_N<seq> (the .txt table and .json.gz trace of a profiled cell)."""
    mode = "compiled" if cell.compile else "eager"
    return Path(profile_dir) / f"{cell.attention}_{cell.regime}_{mode}_N{cell.seq_len}"


def profile_steps(step, first: int, cell: Cell, profile_dir: Path, device, ms_per_step: float) -> Path:
    """Run PROFILE_STEPS more training steps under torch.profiler; write the operator tables (.txt) and
    the trace (.json.gz). Returns the .txt path."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    stem = profile_stem(profile_dir, cell)
    stem.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        for i in range(PROFILE_STEPS):
            with record_function(f"train_step_{i}"):
                step(first + i)
        if cuda:
            torch.cuda.synchronize(device)
    wall_ms = (time.perf_counter() - t0) * 1e3 / PROFILE_STEPS
    averages = prof.key_averages()
    sorts = [("self_cpu_time_total", "self CPU time")]
    if cuda:
        sorts.append(("self_device_time_total", "self GPU (CUDA) time"))
    parts = [
        f"lra bench models --profile: {cell.describe()}, batch {cell.batch_size} x {cell.seq_len} tokens, {device}",
        f"{PROFILE_STEPS} training steps profiled after the timed ones; timed median {ms_per_step:.3f} ms/step, "
        f"{wall_ms:.3f} ms/step wall clock under the profiler (which adds overhead)",
        "totals are over all profiled steps; divide by the step count for per-step values",
        "",
    ]
    for key, title in sorts:
        parts += [f"== operators by {title} (top {PROFILE_ROWS}) ==",
                  averages.table(sort_by=key, row_limit=PROFILE_ROWS, max_name_column_width=80), ""]
    text_path = stem.with_name(stem.name + ".txt")
    atomic_write_text(text_path, "\n".join(parts))
    trace_path = stem.with_name(stem.name + ".json.gz")
    partial = trace_path.with_name(trace_path.name + ".partial.json.gz")
    prof.export_chrome_trace(str(partial))
    os.replace(partial, trace_path)
    return text_path


class Workload:
    """One cell's model, optimizer, input batches and training step, built and ready to time."""

    def __init__(self, cell: Cell, *, device, options: dict, grad_clip: float, seed: int,
                 attention_dropout: float = 0.1, compile_mode: str = "default", reset_compiler: bool = True):
        import torch
        import torch.nn.functional as F

        from lra.model import DataSpec, build_model

        torch.manual_seed(seed)
        self.cell, self.device = cell, device
        cuda = device.type == "cuda"
        batch = cell.batch_size
        try:
            if cell.model == "user":
                from lra.bench.user_model import UserModel

                model = UserModel(cell.attention, vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES, max_len=cell.seq_len,
                                  attention_dropout=attention_dropout, options=options)
            else:
                model = build_model(paper_model_config(attention_dropout),
                                    DataSpec(vocab_size=VOCAB_SIZE, num_classes=NUM_CLASSES, max_len=cell.seq_len),
                                    attention=cell.attention, attention_options=options, seed=seed)
        except ValueError as err:  # the registry refuses this length / option combination
            raise Unsupported(str(err)) from None
        model = model.to(device)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0,
                                      **({"fused": True} if cuda else {}))
        forward = model
        if cell.compile:
            if reset_compiler:
                torch._dynamo.reset()  # a fresh cache per cell: recompilation limits never silently fall back to eager
            from kernels import enable_inductor_static_launch

            enable_inductor_static_launch()  # as `lra train` compiles: our kernels launched statically
            forward = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
        # A few distinct random batches (never constant inputs), cycled through the steps.
        generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        batches = [(torch.randint(0, VOCAB_SIZE, (batch, cell.seq_len), generator=generator).to(device),
                    torch.randint(0, NUM_CLASSES, (batch,), generator=generator).to(device)) for _ in range(3)]

        def step(i: int) -> None:
            inputs, labels = batches[i % len(batches)]
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=cuda):
                logits = forward(inputs)
            loss = F.cross_entropy(logits.float(), labels)
            loss.backward()
            if grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        self.step = step
        self.steps_done = 0

    def run(self, n: int) -> list[float]:
        """n more training steps; the time of each in ms (CUDA events on GPU, perf_counter on CPU)."""
        import torch

        first = self.steps_done
        self.steps_done += n
        if self.device.type != "cuda":
            times = []
            for i in range(first, first + n):
                t0 = time.perf_counter()
                self.step(i)
                times.append((time.perf_counter() - t0) * 1e3)
            return times
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for i, (start, end) in enumerate(events):
            start.record()
            self.step(first + i)
            end.record()
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) for start, end in events]


def _metrics(cell: Cell, times_ms: list[float], peak_gb: float) -> dict:
    ms = statistics.median(times_ms)
    p10, p90 = (float(x) for x in np.percentile(times_ms, [10, 90]))
    batch = cell.batch_size
    return {"ms_per_step": ms, "ms_p10": p10, "ms_p90": p90, "samples_per_s": batch / ms * 1e3,
            "tokens_per_s": batch * cell.seq_len / ms * 1e3, "peak_mem_gb": peak_gb}


def measure(cell: Cell, *, device, options: dict, steps: int, warmup: int, grad_clip: float, seed: int,
            attention_dropout: float = 0.1, profile_dir: Path | None = None, compile_mode: str = "default") -> dict:
    """Time one cell (then profile it, with ``profile_dir``). Raises on OOM and other errors (the caller
    records them)."""
    import torch

    work = Workload(cell, device=device, options=options, grad_clip=grad_clip, seed=seed,
                    attention_dropout=attention_dropout, compile_mode=compile_mode)
    work.run(warmup)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    times_ms = work.run(steps)
    peak_gb = torch.cuda.max_memory_allocated(device) / 1e9 if cuda else math.nan
    metrics = _metrics(cell, times_ms, peak_gb)
    if profile_dir is not None:
        try:
            profile_steps(work.step, work.steps_done, cell, profile_dir, device, metrics["ms_per_step"])
        except Exception as err:  # noqa: BLE001 - a failed profile must not lose the timing
            path = profile_stem(profile_dir, cell)
            atomic_write_text(path.with_name(path.name + ".txt"), f"{cell.describe()}: profiling failed: "
                                                                  f"{_first_line(err, 1000)}\n")
    return metrics


def _prime_gpu_libraries(cell: Cell, *, device, options: dict, grad_clip: float, seed: int,
                         attention_dropout: float) -> int:
    """Two eager steps of ``cell``'s model on one sequence, then everything freed; returns the bytes
    still allocated that were not before (the workspaces the GPU libraries keep after first use). A
    failure here is left to the cell's own build, which reports it (0 bytes then)."""
    import torch

    _free_memory(device)
    before = torch.cuda.memory_allocated(device)
    tiny = dataclasses.replace(cell, tokens=cell.seq_len, compile=False)
    try:
        Workload(tiny, device=device, options=options, grad_clip=grad_clip, seed=seed,
                 attention_dropout=attention_dropout, reset_compiler=False).run(2)
    except Exception:  # noqa: BLE001
        pass
    _free_memory(device)
    return max(0, torch.cuda.memory_allocated(device) - before)


def measure_interleaved(cells: list[Cell], *, device, options: dict, steps: int, warmup: int, grad_clip: float,
                        seed: int, rounds: int, attention_dropout: float = 0.1,
                        compile_mode: str = "default") -> dict[tuple, dict | BaseException]:
    """Time cells of one (length, regime, mode) side by side: every model is built and warmed up, then
    ``rounds`` rounds each run ceil(steps / rounds) steps of every model in turn (the order rotates by one
    each round). Host-bound steps drift by tens of percent within one run of the benchmark; interleaving puts every attention in the same time windows, so their ratio is not the
    drift's. Returns, per cell key, its metrics or the exception that stopped it (building, warm-up or
    a round). Peak memory is each model's own: the others' resident memory (parameters, optimizer
    state, batches) is subtracted. What the GPU libraries keep once they have run (cuBLAS workspaces)
    is charged to every model, as in a run of that model alone: it is measured by two one-sequence
    eager steps of the first cell before any model is built (else it would fall on the first model
    only, ~70 MB at the small batch)."""
    import torch

    cuda = device.type == "cuda"
    results: dict[tuple, dict | BaseException] = {}
    works: list[Workload] = []
    resident: dict[tuple, int] = {}
    if any(c.compile for c in cells):
        torch._dynamo.reset()
    libraries = 0
    if cuda and cells:
        libraries = _prime_gpu_libraries(cells[0], device=device, options=options.get(cells[0].attention, {}),
                                         grad_clip=grad_clip, seed=seed, attention_dropout=attention_dropout)
    for cell in cells:
        before = torch.cuda.memory_allocated(device) if cuda else 0
        try:
            work = Workload(cell, device=device, options=options.get(cell.attention, {}), grad_clip=grad_clip,
                            seed=seed, attention_dropout=attention_dropout, compile_mode=compile_mode,
                            reset_compiler=False)
            work.run(warmup)
        except Exception as err:  # noqa: BLE001 - recorded per cell by the caller
            # without its traceback, whose frames would keep the failed model's tensors alive
            results[cell.key] = err.with_traceback(None)
            work = None
            _free_memory(device)
            continue
        if cuda:
            torch.cuda.synchronize(device)
            resident[cell.key] = torch.cuda.memory_allocated(device) - before
        works.append(work)
    per_round = -(-steps // rounds)
    times: dict[tuple, list[float]] = {w.cell.key: [] for w in works}
    peaks: dict[tuple, float] = {w.cell.key: 0.0 for w in works}
    for r in range(rounds):
        live = [w for w in works if w.cell.key not in results]
        shift = r % len(live) if live else 0
        for w in live[shift:] + live[:shift]:
            key = w.cell.key
            try:
                if cuda:
                    torch.cuda.synchronize(device)
                    others = torch.cuda.memory_allocated(device) - resident[key] - libraries
                    torch.cuda.reset_peak_memory_stats(device)
                times[key] += w.run(per_round)
                if cuda:
                    peaks[key] = max(peaks[key], torch.cuda.max_memory_allocated(device) - others)
            except Exception as err:  # noqa: BLE001
                results[key] = err.with_traceback(None)
        kept = [w for w in works if w.cell.key not in results]
        if len(kept) < len(works):
            works = kept  # a model that failed in this round leaves, and its memory with it
            _free_memory(device)
    for w in works:
        if w.cell.key not in results:
            results[w.cell.key] = _metrics(w.cell, times[w.cell.key], peaks[w.cell.key] / 1e9 if cuda else math.nan)
    return results


def _row(cell: Cell, status: str, note: str = "", **metrics) -> dict:
    row = {"attention": cell.attention, "seq_len": cell.seq_len, "batch_size": cell.batch_size,
           "tokens_per_batch": cell.batch_size * cell.seq_len, "regime": cell.regime, "compile": cell.compile,
           "ms_per_step": math.nan, "ms_p10": math.nan, "ms_p90": math.nan, "samples_per_s": math.nan,
           "tokens_per_s": math.nan, "peak_mem_gb": math.nan, "status": status, "note": note}
    row.update(metrics)
    return row


def _first_line(err: BaseException, limit: int = 200) -> str:
    """A one-line reason: the first line, plus the last one where the message spans several (compiler
    errors put the location first and the cause last); an OOM message up to the size it tried to allocate."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"
    oom = re.match(r".*?Tried to allocate [\d.]+ [KMGT]i?B\.?", text)
    if oom:
        text = oom.group(0)
    return f"{type(err).__name__}: {text[:limit]}"


def _unsupported_row(cell: Cell, device, options: dict, attention_dropout: float) -> dict | None:
    """The `unsupported` row of a cell the registry says cannot run here, or None."""
    from lra import attention as registry

    if cell.model == "user":
        from lra.bench.user_model import support

        ok, reason = support(cell.attention, device, options, attention_dropout)
        return None if ok else _row(cell, "unsupported", reason)

    ok, reason = registry.can_run(cell.attention, device, {**options, "dropout": attention_dropout})
    if not ok:
        return _row(cell, "unsupported", reason)
    shortest = registry.min_supported_len(cell.attention, options)
    if shortest is not None and cell.seq_len < shortest:
        return _row(cell, "unsupported", f"needs N >= {shortest} with these options")
    return None


def uses_cuda_graphs(compile_mode: str) -> bool:
    """Whether torch.compile's ``compile_mode`` records CUDA graphs (reduce-overhead, max-autotune)."""
    return compile_mode in ("reduce-overhead", "max-autotune")


def _ok_row(cell: Cell, options: dict, compile_mode: str, outcome: dict, *extra_notes: str) -> dict:
    """The row of a measured cell. Under CUDA graphs the step's tensors live in the graphs' private memory
    pool, allocated while warming up and reused by every replay, so the timed steps' peak allocation says
    nothing about the model's memory (it reads 0.00-0.07 GB): no peak memory there, and the note says so."""
    notes = [", ".join(f"{k}={v}" for k, v in options.items())]
    if cell.compile and compile_mode != "default":
        notes.append(f"torch.compile mode={compile_mode}")
        if uses_cuda_graphs(compile_mode):
            outcome = {**outcome, "peak_mem_gb": math.nan}
            notes.append("no peak memory under CUDA graphs (their private memory pool)")
    if cell.tokens < cell.seq_len:
        notes.append(f"1 sequence of {cell.seq_len} > {cell.tokens} tokens")
    return _row(cell, "ok", ", ".join(filter(None, [*notes, *extra_notes])), **outcome)


def _failure(err: BaseException) -> tuple[str, str]:
    """(status, note) of a cell that raised: unsupported, oom or error."""
    status = "unsupported" if isinstance(err, Unsupported) else "oom" if _is_oom(err) else "error"
    return status, str(err).strip().splitlines()[0][:200] if status == "unsupported" else _first_line(err)


def run_cell(cell: Cell, *, device, options: dict, steps: int, warmup: int, grad_clip: float, seed: int,
             attention_dropout: float = 0.1, profile_dir: Path | None = None, compile_mode: str = "default") -> dict:
    """Measure one cell and turn every outcome into a CSV row."""
    unsupported = _unsupported_row(cell, device, options, attention_dropout)
    if unsupported is not None:
        return unsupported
    outcome, failure = None, None
    try:
        outcome = measure(cell, device=device, options=options, steps=steps, warmup=warmup, grad_clip=grad_clip,
                          seed=seed, attention_dropout=attention_dropout, profile_dir=profile_dir,
                          compile_mode=compile_mode)
    except Exception as err:  # noqa: BLE001 - every failure becomes a row; the sweep goes on
        failure = _failure(err)
        del err  # drop the traceback (and the tensors its frames hold) before freeing memory
    if cell.compile:
        # the compiled cell's caches (and, with mode=reduce-overhead, its CUDA-graph memory pool) would
        # otherwise stay allocated into the next cells — eager ones too, which never reset them
        import torch

        torch._dynamo.reset()
    _free_memory(device)
    if failure is not None:
        return _row(cell, failure[0], failure[1])
    return _ok_row(cell, options, compile_mode, outcome)


def run_interleaved(cells: list[Cell], *, device, options: dict, steps: int, warmup: int, grad_clip: float,
                    seed: int, rounds: int, attention_dropout: float = 0.1, compile_mode: str = "default") -> list[dict]:
    """The rows of cells of one (length, regime, mode) measured side by side (:func:`measure_interleaved`)."""
    rows: dict[tuple, dict] = {}
    runnable = []
    for cell in cells:
        unsupported = _unsupported_row(cell, device, options.get(cell.attention, {}), attention_dropout)
        if unsupported is not None:
            rows[cell.key] = unsupported
        else:
            runnable.append(cell)
    if runnable:
        results = measure_interleaved(runnable, device=device, options=options, steps=steps, warmup=warmup,
                                      grad_clip=grad_clip, seed=seed, rounds=rounds,
                                      attention_dropout=attention_dropout, compile_mode=compile_mode)
        for cell in runnable:
            outcome = results[cell.key]
            if isinstance(outcome, BaseException):
                rows[cell.key] = _row(cell, *_failure(outcome))
                continue
            others = [c.attention for c in runnable if c is not cell and isinstance(results[c.key], dict)]
            together = f"interleaved with {', '.join(others)} ({rounds} rounds)" if others else "interleaved (alone)"
            rows[cell.key] = _ok_row(cell, options.get(cell.attention, {}), compile_mode, outcome, together)
        del results
        if any(c.compile for c in runnable):
            import torch

            torch._dynamo.reset()
        _free_memory(device)
    return [rows[c.key] for c in cells]


# ------------------------------------------------------------------------------------------ output
def _paths(out: Path) -> tuple[Path, Path, Path]:
    out = Path(out)
    if out.suffix != ".csv":
        out = out.with_name(out.name + ".csv")
    stem = out.with_suffix("")
    return out, stem.with_name(stem.name + ".md"), stem.with_name(stem.name + ".meta.json")


def write_csv(path: Path, rows: list[dict], compile_mode: str = "default") -> pd.DataFrame:
    """The rows as the CSV (atomically); ``compile_mode`` fills the column for compiled rows (eager: empty)."""
    rows = [{**r, "compile_mode": compile_mode if r["compile"] else ""} for r in rows]
    frame = pd.DataFrame(rows, columns=CSV_COLUMNS)
    atomic_write_text(path, frame.to_csv(index=False, float_format="%.6g"))
    return frame


def _model_text(meta: dict) -> str:
    dropout = meta["settings"].get("attention_dropout", 0.1)
    if meta["settings"].get("model") == "user":
        return f"{meta['model']['description']}, dropout 0.1, attention dropout {dropout}"
    return (f"`paper` size (dim 64, MLP 128, 2 heads × 32, 2 layers, dropout 0.1, attention dropout {dropout}; "
            "packed QKV path, our LayerNorm kernel)")


def markdown_report(frame: pd.DataFrame, meta: dict, csv_path: Path) -> str:
    from lra import table

    bench = frame.copy()
    bench["file"] = str(csv_path)
    summary = table.efficiency_summary(None, table.load_bench_frame(bench))
    versions = meta.get("versions", {})
    head = [
        "# LRA model benchmark: training step per attention and sequence length", "",
        f"- Device: {meta.get('device')}; torch {versions.get('torch')}, triton {versions.get('triton')}, "
        f"CUDA {meta.get('cuda')}, cuDNN {meta.get('cudnn')}",
        f"- Date: {meta.get('date')}; git revision: {meta.get('git_rev')}",
        f"- Command: `{meta.get('command')}`",
        f"- Model: {_model_text(meta)}, bf16 autocast on GPU, fused AdamW on CUDA; one step = forward + backward + clip + optimizer step; median over "
        f"{meta['settings']['steps']} timed steps after {meta['settings']['warmup']} warm-up steps.",
        "- Same tokens per batch at every length (batch = tokens ÷ N): "
        + ", ".join(f"{k} = {v:,}" for k, v in meta["settings"]["regimes"].items()) + ".",
    ]
    if meta["settings"].get("compile_mode", "default") != "default":
        head.append(f"- Compiled cells: torch.compile mode={meta['settings']['compile_mode']}.")
    if meta.get("kernel_env"):
        head.append("- Kernel settings: " + ", ".join(f"`{k}={v}`" for k, v in sorted(meta["kernel_env"].items())) + ".")
    if meta.get("compile_op", "custom_op") != "custom_op":
        static = {True: ", launched by Inductor's static launcher", False: ", launched through Triton's launcher"}
        head.append(f"- Our kernels under torch.compile: `{meta['compile_op']}` form"
                    f"{static.get(meta.get('inductor_static_launch'), '')}.")
    if meta["settings"].get("options"):
        head.append("- Attention options: " + "; ".join(
            f"{a}: " + ", ".join(f"{k}={v}" for k, v in o.items()) for a, o in meta["settings"]["options"].items()))
    head.append("")
    return "\n".join(head) + "\n" + table.render(table.efficiency_sections(summary), "markdown")


def run(args) -> int:
    import torch
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lra import attention as registry
    from lra import provenance
    from lra.table import format_rate, format_seq_len

    if args.device is None and not torch.cuda.is_available():
        # the defaults (every attention, 1K-16K at 256K tokens per batch) would run for days on a CPU,
        # flash and flash_sparse through the Triton interpreter
        print("lra bench models: no CUDA GPU here (torch.cuda.is_available() is False); model-step timings are "
              "meant for the GPU. To time on this CPU anyway pass --device cpu with a small grid, e.g. --device cpu "
              "--seq-lens 256 --regimes small --attentions softmax sdpa performer linformer bigbird "
              "(flash and flash_sparse run through the Triton interpreter here: minutes per step)", file=sys.stderr)
        return 2
    device = torch.device(args.device or "cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device here (torch.cuda.is_available() is False); use --device cpu")
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"--device {args.device!r}: use cuda or cpu")
    user = args.model == "user"
    if user:
        from lra.bench import user_model

    cells, settings = plan(args, list(user_model.USER_ATTENTIONS if user else registry.available()), device.type)
    for name, values in settings["options"].items():  # bad option -> one clear ValueError before any work
        if user:
            ok, reason = user_model.support(name, device, values)
            if not ok:
                raise ValueError(f"--options {name}: {reason}")
        else:
            registry.resolve_options(name, **values)
    csv_path, md_path, meta_path = _paths(args.out)

    meta = provenance.collect()
    meta.update(benchmark="lra bench models", settings=settings, model=({"name": "user", "description": user_model.DESCRIPTION} if user
                       else dataclasses.asdict(paper_model_config(args.attention_dropout))),
                input={"vocab_size": VOCAB_SIZE, "num_classes": NUM_CLASSES, "padding": False},
                cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version() if device.type == "cuda" else None,
                bench_device=str(device))
    import kernels  # our kernels' attention-dropout settings in force (flash, flash_sparse)

    meta.update(kernels.kernel_settings())

    rows: list[dict] = []
    done: set = set()
    if args.resume and csv_path.exists():
        from lra.table import load_bench

        # the provenance of the rows kept: checked against this run, then kept
        earlier = earlier_runs(meta_path, meta, resume_mismatches,
                               ("command", "date", "git_rev", "device", "versions", "settings", "kernel_env", "cuda",
                                "cudnn"), csv_path, "--out")
        previous = load_bench([csv_path])
        for _, r in previous.iterrows():
            row = {c: r[c] for c in CSV_COLUMNS}
            row["note"] = "" if pd.isna(row["note"]) else row["note"]
            if r["status"] in DONE_STATUSES:
                rows.append(row)
                done.add((r["attention"], int(r["seq_len"]), r["regime"], bool(r["compile"])))
        meta.update(earlier_runs=earlier, resumed_rows=len(rows))
    atomic_write_text(meta_path, json.dumps(meta, indent=2, default=str) + "\n")

    console = Console(stderr=True)
    oom_at: dict[tuple, int] = {}  # (attention, regime, compile) -> shortest N that ran out of memory
    for row in rows:
        if row["status"] == "oom":
            k = (row["attention"], row["regime"], bool(row["compile"]))
            oom_at[k] = min(oom_at.get(k, 1 << 62), int(row["seq_len"]))
    todo = [c for c in cells if c.key not in done]
    if len(todo) < len(cells):
        console.print(f"resuming: {len(cells) - len(todo)} of {len(cells)} cells already in {csv_path}")
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    # one cell at a time, or (--interleave) the cells of one (length, regime, mode) together
    groups: dict[tuple, list[Cell]] = {}
    for cell in todo:
        groups.setdefault((cell.seq_len, cell.regime, cell.compile) if args.interleave else cell.key, []).append(cell)
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("lra bench models", total=len(todo))
        for group in groups.values():
            progress.update(bar, description=" + ".join(c.describe() for c in group))
            new_rows: dict[tuple, dict] = {}
            to_run = []
            for cell in group:
                first_oom = oom_at.get((cell.attention, cell.regime, cell.compile))
                if first_oom is not None and cell.seq_len > first_oom:
                    new_rows[cell.key] = _row(cell, "oom", f"not run: out of memory already at N={format_seq_len(first_oom)}")
                else:
                    to_run.append(cell)
            if args.interleave and to_run:
                for row in run_interleaved(to_run, device=device, options=settings["options"], steps=args.steps,
                                           warmup=args.warmup, grad_clip=args.grad_clip, seed=args.seed,
                                           rounds=args.rounds, attention_dropout=args.attention_dropout,
                                           compile_mode=args.compile_mode):
                    new_rows[(row["attention"], int(row["seq_len"]), row["regime"], bool(row["compile"]))] = row
            else:
                for cell in to_run:
                    new_rows[cell.key] = run_cell(cell, device=device, options=settings["options"].get(cell.attention, {}),
                                                  steps=args.steps, warmup=args.warmup, grad_clip=args.grad_clip,
                                                  seed=args.seed, attention_dropout=args.attention_dropout,
                                                  profile_dir=args.profile, compile_mode=args.compile_mode)
            for cell in group:
                row = new_rows[cell.key]
                if row["status"] == "oom":
                    k = (cell.attention, cell.regime, cell.compile)
                    oom_at[k] = min(oom_at.get(k, 1 << 62), cell.seq_len)
                rows = [r for r in rows if (r["attention"], int(r["seq_len"]), r["regime"], bool(r["compile"])) != cell.key]
                rows.append(row)
                if row["status"] == "ok":
                    shown = f"{row['ms_per_step']:.2f} ms/step, {format_rate(row['tokens_per_s'])} tokens/s" + (
                        f", {row['peak_mem_gb']:.2f} GB" if math.isfinite(row["peak_mem_gb"]) else "")
                else:
                    shown = f"{row['status']}: {row['note']}"
                progress.console.print(f"{cell.describe()}: {shown}")
                progress.advance(bar)
            write_csv(csv_path, rows, args.compile_mode)  # after every cell (group): a killed run loses at most the current one
    order = {c.key: i for i, c in enumerate(cells)}
    rows.sort(key=lambda r: order.get((r["attention"], int(r["seq_len"]), r["regime"], bool(r["compile"])), 1 << 30))
    frame = write_csv(csv_path, rows, args.compile_mode)
    atomic_write_text(md_path, markdown_report(frame, meta, csv_path))
    print(f"wrote {csv_path}, {md_path}, {meta_path}")
    return 0
