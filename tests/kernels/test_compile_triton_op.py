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
    # the arguments torch's analysis finds written: exactly the outputs and work buffers each kernel
    # stores to (see kernels.triton_attention._program_slot for the pattern that made Inductor copy QKV)
    written_fwd = [["O", "ROWS"]]
    written_split = [["DQ", "STATS"], ["DK", "DV"]]
    for case in ("dense_fwd", "dense_fwd_mask_dropout_causal", "sparse_fwd"):
        assert reports[case]["kernels"] == ["flash_fwd_kernel"] and reports[case]["undecomposed"] == [], reports[case]
        assert reports[case]["clones"] == written_fwd, reports[case]
    for case in ("dense_bwd_mask_dropout", "sparse_bwd"):  # the two-pass backward (deterministic): dQ first
        assert reports[case]["kernels"] == ["flash_bwd_dq_kernel", "flash_bwd_dkdv_kernel"], reports[case]
        assert reports[case]["undecomposed"] == [], reports[case]
        assert reports[case]["clones"] == written_split, reports[case]
    fused = reports["dense_bwd_mask_dropout_fused"]  # the one-pass backward (the default): no dQ kernel
    assert fused["kernels"] == ["flash_bwd_preprocess_kernel", "flash_bwd_dkdv_kernel"], fused
    assert fused["undecomposed"] == [], fused
    assert fused["clones"] == [["DQ_ACC", "STATS"], ["DK", "DQ_ACC", "DV"]], fused


def test_the_op_form_follows_how_the_kernels_were_built(monkeypatch):
    """triton_op where CUDA runs compiled kernels; custom_op under the interpreter (wrap_triton cannot
    trace it) and without CUDA. No setting chooses it."""
    from kernels import triton_attention as kern

    assert ops.OP_FORM == ops.op_form() == ("triton_op" if torch.cuda.is_available() and not kern.INTERPRETED
                                            else "custom_op")
    monkeypatch.setattr(kern, "INTERPRETED", True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert ops.op_form() == "custom_op"
    monkeypatch.setattr(kern, "INTERPRETED", False)
    assert ops.op_form() == "triton_op"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ops.op_form() == "custom_op"
    with pytest.raises(ValueError, match="unknown op form 'triton'"):
        ops.register_ops("lra_unused", "triton")


def test_inductor_static_launch_is_switched_on_explicitly(monkeypatch):
    """kernels.enable_inductor_static_launch switches on Inductor's static launch of user Triton kernels
    (where this torch has the setting) -- in this process's config and, for Inductor's compile worker
    processes, through torch's environment variable; a user's own value of that variable is kept. The
    settings report says which is in force."""
    import torch._inductor.config as inductor_config

    import kernels
    from kernels import inductor

    if not hasattr(inductor_config, "static_launch_user_defined_triton_kernels"):
        assert kernels.enable_inductor_static_launch() is False
        pytest.skip("this torch has no static launch of user Triton kernels")
    monkeypatch.setenv(inductor.STATIC_LAUNCH_ENV, "")  # recorded, so that the test's own setting is undone
    monkeypatch.delenv(inductor.STATIC_LAUNCH_ENV)
    with inductor_config.patch(static_launch_user_defined_triton_kernels=False):
        assert inductor.inductor_static_launch() is False
        assert kernels.enable_inductor_static_launch() is True
        assert inductor.inductor_static_launch() is True and os.environ[inductor.STATIC_LAUNCH_ENV] == "1"
        assert kernels.kernel_settings()["inductor_static_launch"] is True
    monkeypatch.setenv(inductor.STATIC_LAUNCH_ENV, "0")  # the user's choice
    with inductor_config.patch(static_launch_user_defined_triton_kernels=False):
        assert kernels.enable_inductor_static_launch() is False
        assert inductor.inductor_static_launch() is False and os.environ[inductor.STATIC_LAUNCH_ENV] == "0"


IMPORT_CHECK = """
import json, os, sys
import torch
import torch._inductor.config as inductor_config
before = (dict(os.environ), repr(sorted(inductor_config.get_config_copy().items(), key=str)))
import kernels
after = (dict(os.environ), repr(sorted(inductor_config.get_config_copy().items(), key=str)))
print(json.dumps({"environ": before[0] == after[0], "inductor_config": before[1] == after[1],
                  "changed": sorted(set(after[0].items()) ^ set(before[0].items()))}))
"""


@pytest.mark.parametrize("interpret", ["1", "0", None])
def test_importing_kernels_changes_no_global_state(interpret):
    """`import kernels` leaves os.environ and torch._inductor.config as they were (in a fresh process;
    the interpreter on, off, or its variable unset)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    env.pop("TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS", None)
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    proc = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"environ": True, "inductor_config": True, "changed": []}, report
