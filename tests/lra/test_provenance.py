"""Provenance: the kernel settings taken from the environment are recorded with every result."""
from __future__ import annotations

from lra import provenance


def test_kernel_env_records_the_settings_that_are_set(monkeypatch):
    for name in provenance.KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    assert provenance.kernel_env() == {} and provenance.collect()["kernel_env"] == {}
    monkeypatch.setenv("LRA_DROPOUT_BWD", "fused")
    monkeypatch.setenv("LRA_DROPOUT_RNG", "rounds=10")
    monkeypatch.setenv("UNRELATED", "x")
    assert provenance.collect()["kernel_env"] == {"LRA_DROPOUT_BWD": "fused", "LRA_DROPOUT_RNG": "rounds=10"}
