"""How a cell of runs departs from the paper's setting: another preset, settings overridden from
their preset, augmentation, generated instead of official data, a subset of the data, another
sequence length, fewer or more optimizer steps than the preset's `max_steps`, several devices (data-parallel:
a larger global batch), a CPU run. The table of record prints these beside the numbers, and compares
with the paper only runs of the `paper` preset on a GPU."""
from __future__ import annotations

import json
from functools import lru_cache

import pandas as pd

from lra.table.format import is_missing
from lra.table.variants import setting_text

PAPER_PRESET = "paper"
# Settings the override check leaves to the explicit checks below, or that describe the hardware
# rather than the experiment.
_NOT_OVERRIDES = ("data.augment", "data.limit_train", "data.limit_eval", "data.source", "train.max_steps",
                  "train.devices", "train.num_nodes", "train.strategy", "train.precision")


def _config_value(config, section: str, key: str):
    if not isinstance(config, dict):
        return None
    return (config.get(section) or {}).get(key)


@lru_cache(maxsize=None)
def preset_config(task: str, attention: str, preset: str) -> dict | None:
    """The config a preset of lra/presets/<task>.yaml resolves to (`RunConfig.to_dict`); None where
    there is no such preset (e.g. a transfer chain's stage presets)."""
    from lra.config import resolve

    try:
        return resolve(task, attention, preset=preset).to_dict()
    except ValueError:
        return None


def _flat(config: dict) -> dict:
    from lra.config import identity_of

    flat = pd.json_normalize(identity_of(config), sep=".").iloc[0].to_dict()
    return {k: json.dumps(v, sort_keys=True, default=str) for k, v in flat.items()}


def _overrides(runs: pd.DataFrame, preset: dict | None) -> list[str]:
    """`key=value (preset p)` for each setting a run changed from its preset."""
    if preset is None:
        return []
    wanted = _flat(preset)
    out = []
    for config in runs["config"]:
        if not isinstance(config, dict):
            continue
        for key, value in _flat(config).items():
            if key in wanted and value != wanted[key] and key not in _NOT_OVERRIDES:
                out.append(setting_text(key, json.loads(value)) if key == "train.init_from" else
                           f"{key}={json.loads(value)} (preset {json.loads(wanted[key])})")
    return list(dict.fromkeys(out))


def _other_length(runs: pd.DataFrame, task: str, preset: dict | None) -> list[str]:
    from tasks.registry import TASKS

    from lra.table.format import format_seq_len

    if preset is None or task not in TASKS:
        return []
    wanted = (preset.get("data") or {}).get("seq_len") or TASKS[task].max_len
    lengths = sorted({int(n) for n in runs["seq_len"].dropna()} - {int(wanted)})
    return [f"N={format_seq_len(n)} (preset {format_seq_len(wanted)})" for n in lengths]


def _official_exists(task: str) -> bool:
    from tasks.registry import TASKS

    return task in TASKS and "official" in TASKS[task].sources


def deviations(cell: pd.DataFrame) -> list[str]:
    """What the runs of one cell (same task, attention, preset, data; any seeds) do differently from
    the paper; [] for the paper's setting. Computed over the completed runs, else over all."""
    done = cell[cell["status"] == "completed"]
    runs = done if len(done) else cell
    task, attention, preset = (str(cell[c].iloc[0]) for c in ("task", "attention", "preset"))
    resolved = preset_config(task, attention, preset)
    out = []
    if preset != PAPER_PRESET:
        out.append(f"preset {preset or '?'}")
    out += _overrides(runs, resolved)
    out += _other_length(runs, task, resolved)
    configs = list(runs["config"])
    augments = sorted({str(a) for a in (_config_value(c, "data", "augment") for c in configs)
                       if not is_missing(a) and str(a) != "none"})
    out += [f"augment {a}" for a in augments]
    if (runs["data_source"] == "generated").any() and _official_exists(task):
        out.append("generated data (paper: official release)")
    for key, what in (("limit_train", "training"), ("limit_eval", "validation/test")):
        limits = sorted({int(v) for v in (_config_value(c, "data", key) for c in configs) if not is_missing(v)})
        if limits:
            out.append(f"first {'/'.join(f'{v:,}' for v in limits)} {what} examples")
    out += _training_length(runs, resolved)
    if "devices" in runs:   # data-parallel: each device takes a batch, the optimizer sees them all
        several = runs[runs["devices"] > 1]
        shapes = sorted({(int(n), int(b)) for n, b in zip(several["devices"], several["batch_size"].fillna(0))})
        out += [f"{n} devices (global batch {n} × {b})" if b else f"{n} devices" for n, b in shapes]
    if runs["on_cpu"].any():
        out.append("CPU")
    return out


def _training_length(runs: pd.DataFrame, preset: dict | None) -> list[str]:
    """`3,000/5,000 steps` when a run stopped (or was set to stop) before the preset's max_steps;
    `8,000 steps (preset 5,000)` when runs were set to train longer than the preset."""
    wanted = ((preset or {}).get("train") or {}).get("max_steps")
    configured = [_config_value(c, "train", "max_steps") for c in runs["config"]]
    configured = sorted({int(v) for v in configured if not is_missing(v)})
    if wanted is None:
        wanted = max(configured) if configured else None
    if wanted is None:
        return []
    out = []
    longer = [v for v in configured if v > wanted]
    if longer:
        out.append(f"{'/'.join(f'{v:,}' for v in longer)} steps (preset {wanted:,})")
    steps = runs["steps"].dropna()
    if not steps.empty and steps.min() < wanted:
        low, high = int(steps.min()), int(steps.max())
        span = f"{low:,}" if low == high else f"{low:,}–{high:,}"
        out.append(f"{span}/{wanted:,} steps")
    return out


def paper_comparable(cell: pd.DataFrame) -> bool:
    """Whether the paper's numbers are a fair reference: runs of the `paper` preset, none on a CPU."""
    return bool((cell["preset"] == PAPER_PRESET).all() and not cell["on_cpu"].any())
