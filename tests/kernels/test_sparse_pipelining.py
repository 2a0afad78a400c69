"""The block-sparse loops must software-pipeline their copies as the dense loops do (Triton's
front end for sm_90, no GPU needed): loaded in the step that uses it, a block-sparse list index
made every K/V (Q/dO) copy an indirect load that Triton 3.6 left unpipelined below 5 stages; the
loops carry the index one step ahead."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, sys
from kernels.compile_check import loop_copy_waits
from kernels.tiles import _GPU_16BIT_SPARSE
out = {}
for d in (32, 64, 128):
    tiles = _GPU_16BIT_SPARSE[d]
    for kernel, t in (("fwd", tiles.fwd), ("dkdv", tiles.dkdv), ("dq", tiles.dq)):
        out[f"{kernel} d={d}"] = [loop_copy_waits(kernel, sparse, t.block_m, t.block_n, d, t.num_warps, t.num_stages)
                                  for sparse in (False, True)]
print(json.dumps(out))
"""


def test_block_sparse_loops_pipeline_like_the_dense_loops():
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0 and "CUDABackend" in proc.stderr:
        pytest.skip("this Triton has no CUDA back end to compile with")
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    waits = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, (dense, sparse) in waits.items():
        # the block-sparse table's tiles all have 3 stages: copies stay in flight in both loops
        assert dense and sparse == dense, f"{name}: dense loop waits {dense}, block-sparse {sparse}"
        assert min(sparse) > 0, f"{name}: block-sparse loop not pipelined (waits {sparse})"
