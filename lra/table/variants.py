"""What distinguishes a run from the other runs of its attention: the attention options and config
settings that differ among them, as a short label (`optim.lr=0.001`, `from pathfinder64 best`)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from lra.config import identity_of
from lra.table.format import is_missing, plain


def variants(df: pd.DataFrame) -> pd.Series:
    """Per run, what distinguishes it from other runs ('' if nothing): the attention options that differ
    among runs of the same attention, then the config settings that differ among runs of the same
    (attention, preset, task), e.g. `optim.lr=0.001` for a learning-rate variant recorded under the
    `paper` preset — so that such runs get their own rows instead of being averaged with (or dropped
    as reruns of) the preset's own."""
    option_columns = sorted(c for c in df.columns if c.startswith("attention_options."))
    parts: dict = {index: [] for index in df.index}
    for _, group in df.groupby("attention", sort=False):
        differing = [c for c in option_columns if group[c].astype(str).nunique(dropna=False) > 1]
        for index, row in group.iterrows():
            parts[index] += [f"{c.split('.', 1)[1]}={plain(row[c])}" for c in differing if not is_missing(row[c])]
    if "config" in df.columns:
        settings = df["config"].map(config_settings)
        for _, group in df.groupby(["attention", "preset", "task"], sort=False):
            known = [settings[i] for i in group.index if settings[i] is not None]
            keys = sorted({k for one in known for k in one})
            differing = [k for k in keys if len({repr(one.get(k)) for one in known}) > 1]
            for index in group.index:
                if settings[index] is not None:
                    parts[index] += [setting_text(k, settings[index].get(k)) for k in differing]
    return pd.Series({index: ", ".join(p) for index, p in parts.items()}, index=df.index, dtype=object)


def setting_text(key: str, value) -> str:
    """`key=value`, except the starting checkpoint of a fine-tune: `from scratch`, or `from <task> <file>`
    for a checkpoint in a run folder (`.../<task>/<attention>/<run id>/checkpoints/<file>.ckpt`) --
    the path itself is too long for a legend."""
    if key != "train.init_from":
        return f"{key}={plain(value)}"
    if is_missing(value) or not value:
        return "from scratch"
    path = Path(str(value))
    parts = path.parts
    if len(parts) >= 5 and parts[-2] == "checkpoints":
        return f"from {parts[-5]} {path.stem}"
    return f"from {path.name}"


def config_settings(config) -> dict | None:
    """A record's config flattened to {"optim.lr": 0.001, ...}: the settings that change what a run
    computes (`lra.config.identity_of`) apart from the attention options (compared on their own);
    None for a record without one."""
    if not isinstance(config, dict):
        return None
    settings = identity_of(config)
    settings.pop("attention_options", None)
    return pd.json_normalize(settings, sep=".").iloc[0].to_dict() if settings else {}
