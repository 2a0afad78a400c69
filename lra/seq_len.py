"""Sequence lengths as people write them, on the command line and in filters: 4096, or 4K / 4k
(multiples of 1024)."""
from __future__ import annotations

import numbers
import re


def parse_seq_len(text: str | int) -> int:
    """'1K' / '16k' -> 1024 / 16384; '1000' -> 1000."""
    if isinstance(text, numbers.Integral) and not isinstance(text, bool):
        return int(text)
    match = re.fullmatch(r"\s*(\d+)\s*([kK]?)\s*", str(text))
    if not match:
        raise ValueError(f"bad sequence length {text!r}: use a number of tokens (4096) or a multiple of 1K (4K)")
    value = int(match.group(1))
    return value * 1024 if match.group(2) else value
