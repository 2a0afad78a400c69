"""scripts/eager_overhead.py: the host-cost break-down of one eager attention call."""
from __future__ import annotations

import pytest
import torch

from kernels import triton_attention as kern


@pytest.mark.skipif(torch.cuda.is_available(), reason="times CPU tensors with the launches stubbed; the script is "
                    "for any machine, the test for the CPU suite")
def test_rows_are_timed_and_the_real_kernels_come_back(load_script, tmp_path):
    script = load_script("eager_overhead")
    before = {name: getattr(kern, name) for name in script.KERNELS}
    out = tmp_path / "overhead.md"
    assert script.main(["--iters", "20", "--out", str(out)]) == 0
    assert {name: getattr(kern, name) for name in script.KERNELS} == before  # stubs removed again
    rows = [line for line in out.read_text().splitlines() if line.startswith("| ") and "µs" not in line
            and not line.startswith("| ---")]
    assert len(rows) == 13
    assert sum(line.startswith("| model core") for line in rows) == 2  # q/k/v views; packed
    assert sum("block_sparse_flash_attention" in line for line in rows) == 2  # forward; forward + backward
    values = [float(line.rsplit("|", 2)[1]) for line in rows]
    assert all(v > 0 for v in values)
