"""The ``triton_op`` form of the attention ops (what torch.compile uses on CUDA) decomposes into the
Triton kernel launches, so Inductor launches them itself, copying no input; checked by tracing with
fake CUDA tensors (tests/kernels/triton_op_trace.py), which needs no GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import ops

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the trace uses fake CUDA tensors of a GPU-less machine; on a "
                    "GPU the compile tests (test_compile.py, tests/lra/test_model_compile.py) run the real form")
def test_triton_op_decomposes_into_the_kernel_launches():
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "kernels" / "triton_op_trace.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    reports = {r["case"]: r for r in map(json.loads, filter(None, proc.stdout.splitlines()))}
    backward = ["flash_bwd_preprocess_kernel", "flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel"]
    # the arguments torch's analysis finds written: exactly the outputs and work buffers each kernel
    # stores to. (Session 16: a pointer passed into a @triton.jit helper whose result fed a store address
    # counted as written, so Inductor copied the block-sparse counts -- in the dense form q's placeholder,
    # all of QKV -- before each launch and back after it: 8 extra full copies per model step.)
    written_fwd = [["LSE", "O"]]
    written_split = [["DELTA", "LSE2"], ["DK", "DV"], ["DQ"]]
    for case in ("dense_fwd", "dense_fwd_mask_dropout_causal", "sparse_fwd"):
        assert reports[case]["kernels"] == ["flash_fwd_kernel"] and reports[case]["undecomposed"] == [], reports[case]
        assert reports[case]["clones"] == written_fwd, reports[case]
    for case in ("dense_bwd_mask_dropout", "sparse_bwd"):  # under $LRA_DROPOUT_BWD=split
        assert reports[case]["kernels"] == backward and reports[case]["undecomposed"] == [], reports[case]
        assert reports[case]["clones"] == written_split, reports[case]
    fused = reports["dense_bwd_mask_dropout_fused"]  # $LRA_DROPOUT_BWD=fused (default): no dQ kernel
    assert fused["kernels"] == backward[:2] and fused["undecomposed"] == [], fused
    assert fused["clones"] == [["DELTA", "DQ_ACC", "LSE2"], ["DK", "DQ_ACC", "DV"]], fused


def test_compile_op_kind_is_chosen_once_and_overridable(monkeypatch):
    # the default: triton_op where CUDA runs compiled kernels, custom_op otherwise
    assert ops.COMPILE_OP == ("triton_op" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"
                              else "custom_op")
    monkeypatch.delenv(ops.COMPILE_OP_ENV, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert ops._compile_op_kind() == "custom_op"
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert ops._compile_op_kind() == "triton_op"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ops._compile_op_kind() == "custom_op"
    monkeypatch.setenv(ops.COMPILE_OP_ENV, "custom_op")
    assert ops._compile_op_kind() == "custom_op"
    monkeypatch.setenv(ops.COMPILE_OP_ENV, "triton")
    with pytest.raises(ValueError, match="use triton_op or custom_op"):
        ops._compile_op_kind()
    monkeypatch.setenv(ops.COMPILE_OP_ENV, "triton_op")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="wrap_triton cannot trace"):
        ops._compile_op_kind()


def test_inductor_is_let_launch_our_kernels_statically(monkeypatch):
    """The triton_op form switches on Inductor's static launch of user Triton kernels (ours) at import
    (where this torch has the setting) -- in this process's config and, for Inductor's compile worker
    processes, through torch's environment variable; a user's own value of that variable is kept. The
    bench metadata records the setting in force."""
    import torch._inductor.config as inductor_config

    if not hasattr(inductor_config, "static_launch_user_defined_triton_kernels"):
        pytest.skip("this torch has no static launch of user Triton kernels")
    monkeypatch.setenv(ops.STATIC_LAUNCH_ENV, "")  # recorded, so that the test's own setting is undone
    monkeypatch.delenv(ops.STATIC_LAUNCH_ENV)
    with inductor_config.patch(static_launch_user_defined_triton_kernels=False):
        assert ops.inductor_static_launch() is False
        ops._let_inductor_launch_ours_statically()
        assert ops.inductor_static_launch() is True and os.environ[ops.STATIC_LAUNCH_ENV] == "1"
        assert ops.kernel_settings()["inductor_static_launch"] is True
    monkeypatch.setenv(ops.STATIC_LAUNCH_ENV, "0")  # the user's choice
    with inductor_config.patch(static_launch_user_defined_triton_kernels=False):
        ops._let_inductor_launch_ours_statically()
        assert ops.inductor_static_launch() is False and os.environ[ops.STATIC_LAUNCH_ENV] == "0"
