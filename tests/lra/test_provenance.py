"""Provenance: the environment settings that change how our kernels run are recorded with every result."""
from __future__ import annotations

from lra import provenance


def test_kernel_env_records_the_settings_that_are_set(monkeypatch):
    for name in provenance.KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    assert provenance.kernel_env() == {} and provenance.collect()["kernel_env"] == {}
    static = "TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS"
    monkeypatch.setenv(static, "0")
    monkeypatch.setenv("LRA_DROPOUT_BWD", "fused")  # read by nothing: not recorded
    monkeypatch.setenv("UNRELATED", "x")
    assert provenance.collect()["kernel_env"] == {static: "0"}
