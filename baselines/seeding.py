"""Reproducible random streams for attentions with random structure (Performer features, BigBird
patterns, sparse layouts): each draw gets its own CPU generator seeded from (seed, layer, ...), so it
does not depend on, nor disturb, the global RNG state or the device.
"""
from __future__ import annotations

import hashlib

import torch


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed that depends on every part (order matters); stable across runs and platforms."""
    text = "/".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") & ((1 << 63) - 1)


def generator(*parts: int | str) -> torch.Generator:
    """A fresh CPU generator for the stream named by `parts`."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(derive_seed(*parts))
    return gen
