"""How long a run whose Triton kernels go through the CPU interpreter will take, and the refusal to
start one that takes long without `--yes`.

Without CUDA, `flash` and `flash_sparse` run through Triton's interpreter, which executes every
tile in numpy: about a microsecond per attention score for forward + backward (measured at 1,024
tokens, head_dim 16, on one core; a third of that for a forward pass alone). The work of a run is
its attention scores: tokens² per sequence, head and layer, times the sequences it trains on and
evaluates. The estimate counts every score of dense attention (for flash_sparse an upper bound),
so it errs on the long side: the smoke presets of ListOps and Pathfinder-32 stay far below the
limit, Path-X (16K tokens) is hours. An evaluation (`lra eval`) is the forward passes over the
examples of one split.
"""
from __future__ import annotations

import math

SECONDS_PER_SCORE_TRAIN = 1.0e-6    # forward + backward, per score, per sequence x head x layer
SECONDS_PER_SCORE_EVAL = 0.35e-6    # forward only
LIMIT_S = 600.0                     # runs planned longer than this ask for --yes
DEFAULT_EVAL_EXAMPLES = 2000        # a validation split when the config does not limit it


def runs_through_interpreter(config, cuda: bool) -> bool:
    """Does this run's attention go through the Triton interpreter (Triton kernels, no CUDA)?"""
    from lra import attention

    return not cuda and attention._entry(config.attention).uses_kernels


def _scores_per_sequence(config) -> int:
    """Attention scores of one example through the whole model (both documents of a dual task)."""
    from tasks.registry import TASKS

    spec = TASKS[config.task]
    tokens = (config.data.seq_len or spec.max_len) + (1 if config.model.pooling == "cls" else 0)
    return tokens * tokens * config.model.num_heads * config.model.depth * (2 if spec.dual else 1)


def estimate_seconds(config) -> float:
    """Seconds of attention work the run plans through the interpreter (training steps, every
    validation and the test pass)."""
    t = config.train
    train_sequences = t.max_steps * t.batch_size * t.accumulate_grad_batches
    eval_examples = config.data.limit_eval or DEFAULT_EVAL_EXAMPLES
    if t.limit_val_batches is not None:
        eval_examples = min(eval_examples, t.limit_val_batches * t.batch_size)
    validations = math.ceil(t.max_steps / max(1, t.val_check_interval))
    eval_sequences = (validations + 1) * eval_examples          # + the test pass
    return _scores_per_sequence(config) * (train_sequences * SECONDS_PER_SCORE_TRAIN
                                           + eval_sequences * SECONDS_PER_SCORE_EVAL)


def estimate_eval_seconds(config, examples: int | None) -> float:
    """Seconds of attention work of one evaluation of `examples` examples through the interpreter;
    None: DEFAULT_EVAL_EXAMPLES (as many as ListOps' test split, the smallest of the tasks' full
    splits)."""
    return _scores_per_sequence(config) * (examples or DEFAULT_EVAL_EXAMPLES) * SECONDS_PER_SCORE_EVAL


def human_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.0f} days"


def long_run_warning(config, cuda: bool, limit_s: float = LIMIT_S) -> str | None:
    """A one-line description of a run that would spend more than `limit_s` in the interpreter,
    else None."""
    if not runs_through_interpreter(config, cuda):
        return None
    seconds = estimate_seconds(config)
    if seconds <= limit_s:
        return None
    tokens = config.data.seq_len or "the task's"
    return (f"{config.task}/{config.attention} (preset {config.preset}, {tokens} tokens, {config.train.max_steps} "
            f"steps of batch {config.train.batch_size}): its Triton kernels run through the CPU interpreter, "
            f"about {human_duration(seconds)} of attention alone")


def long_eval_warning(config, cuda: bool, split: str, limit_s: float = LIMIT_S,
                      examples: int | None = None) -> str | None:
    """A one-line description of an evaluation (`lra eval`) of `examples` examples (default
    data.limit_eval) that would spend more than `limit_s` in the interpreter, else None."""
    if not runs_through_interpreter(config, cuda):
        return None
    examples = examples or config.data.limit_eval
    seconds = estimate_eval_seconds(config, examples)
    if seconds <= limit_s:
        return None
    tokens = config.data.seq_len or "the task's"
    if examples:
        which, about = f"the first {examples:,} examples of the {split} split", "about"
    else:
        which, about = f"the {split} split, {DEFAULT_EVAL_EXAMPLES:,} examples or more", "at least"
    return (f"{config.task}/{config.attention} (preset {config.preset}, {tokens} tokens, {which}): its Triton "
            f"kernels run through the CPU interpreter, {about} {human_duration(seconds)} of attention alone")


def refusal(warnings: list[str], command: str,
            instead: str = "--preset smoke (seconds to minutes on a CPU)") -> str:
    """The message of `lra train` / `sweep` / `transfer` / `eval` when runs would take long on the
    interpreter; `instead`: what the command offers in their place."""
    listed = "\n".join(f"  {line}" for line in warnings)
    return (f"{command}: no CUDA GPU here, and this would take long:\n{listed}\n"
            f"Use {instead}, run on a machine with a CUDA GPU, or pass --yes to start anyway.")
