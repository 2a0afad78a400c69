"""`lra table kernels`: the dense kernels' headline from `lra bench kernels` CSVs."""
from __future__ import annotations

import pandas as pd
import pytest

from lra import table
from tests.lra.test_table_record import run_cli


def kernels_csv(path, cells):
    """cells: {(impl, pass, N, d): ms}; TFLOP/s from a fixed FLOP count per cell."""
    rows = [dict(impl=impl, pattern="dense", **{"pass": p}, seq_len=n, head_dim=d, ms=ms, tflops=100.0 / ms,
                 status="ok") for (impl, p, n, d), ms in cells.items()]
    rows.append(dict(impl="flex", pattern="dense", **{"pass": "fwd"}, seq_len=4096, head_dim=64, ms=None,
                     tflops=None, status="oom"))
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


CELLS = {("ours", "fwd", 1024, 64): 1.0, ("ours", "fwd", 4096, 64): 2.0,
         ("sdpa_cudnn", "fwd", 1024, 64): 0.9, ("sdpa_cudnn", "fwd", 4096, 64): 2.4,
         ("flex", "fwd", 1024, 64): 1.5,
         ("ours", "fwd_bwd", 1024, 64): 3.0, ("sdpa_cudnn", "fwd_bwd", 1024, 64): 3.3}


def test_ranges_over_n_of_ours_and_its_speed_up_over_each_anchor(tmp_path):
    frame = table.load_kernels([kernels_csv(tmp_path / "k.csv", CELLS)])
    ranges, span = table.kernel_ranges(frame, passes=["fwd"])
    assert span == "1K–4K"
    row = ranges.iloc[0]
    assert (row["d"], row["pass"], row["ours TFLOP/s"]) == ("64", "fwd", "50–100")
    assert row["vs sdpa_cudnn"] == "0.90×–1.20×"
    assert row["vs flex"] == "1.50×–1.50×"  # the out-of-memory 4K cell is left out, not counted as 0
    assert list(table.kernel_ranges(frame)[0]["pass"]) == ["fwd", "fwd_bwd"]


def test_cli_renders_the_kernels_table_and_refuses_mixed_inputs(tmp_path, capsys):
    csv = kernels_csv(tmp_path / "k.csv", CELLS)
    assert run_cli("kernels", "--kernels", csv, "--passes", "fwd_bwd") == 0
    out = capsys.readouterr().out
    assert out.startswith("## Kernels: ranges over N = 1K–4K") and "| 64  | fwd_bwd" in out and "| fwd " not in out
    with pytest.raises(ValueError, match="pass --kernels FILE"):
        run_cli("kernels")
    with pytest.raises(ValueError, match="--kernels feeds the kernels table only"):
        run_cli("record", "--kernels", csv)
    models = tmp_path / "models.csv"
    pd.DataFrame([dict(attention="flash", seq_len=1024, regime="paper", ms_per_step=1.0)]).to_csv(models, index=False)
    with pytest.raises(ValueError, match="looks like a `lra bench models` CSV"):
        run_cli("kernels", "--kernels", models)
