"""Cell formatting shared by the tables and plots: sequence lengths, rates, durations, missing values."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

NO_VALUE = "–"


def is_missing(value) -> bool:
    """None, NaN, NA — and nothing else (lists and dicts are values)."""
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def plain(value):
    """256.0 -> 256 (option columns become floats when some records lack the option)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return value


def int_or(value, default: int) -> int:
    return default if is_missing(value) else int(value)


def format_seq_len(n) -> str:
    if n is None or (isinstance(n, float) and math.isnan(n)) or n is pd.NA:
        return "?"
    n = int(n)
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else str(n)


def format_rate(value: float) -> str:
    if value is None or not np.isfinite(value):
        return NO_VALUE
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def format_duration(seconds: float) -> str:
    if seconds is None or not np.isfinite(seconds):
        return NO_VALUE
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def format_published(value: float) -> str:
    """The papers print one (FlashAttention) or two (LRA) decimals; keep what the number needs."""
    return f"{value:.1f}" if round(value, 1) == round(value, 2) else f"{value:.2f}"


def format_ratio(value: float) -> str:
    return f"{value:.2f}×" if not is_missing(value) and np.isfinite(value) else NO_VALUE
