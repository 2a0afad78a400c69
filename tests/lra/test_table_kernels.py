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


def test_block_sparse_ranges_against_flex_and_the_dense_bound(tmp_path):
    rows = []
    for n, dense_ms, ours, flex in ((1024, 1.0, 0.6, 0.9), (4096, 4.0, 1.0, 1.5), (8192, 8.0, 2.5, 3.0)):
        rows += [dict(impl="ours", pattern="dense", density=1.0, ms=dense_ms),
                 dict(impl="ours_sparse", pattern="local", density=0.2, ms=ours),
                 dict(impl="flex_sparse", pattern="local", density=0.2, ms=flex)]
        for row in rows[-3:]:
            row.update({"pass": "fwd", "seq_len": n, "head_dim": 64, "tflops": 1.0, "status": "ok"})
    sparse = tmp_path / "block_sparse.csv"
    pd.DataFrame(rows).to_csv(sparse, index=False)
    dense = kernels_csv(tmp_path / "dense.csv", CELLS)
    frame = table.load_kernels([dense, sparse])
    ranges, span = table.block_sparse_ranges(frame)
    assert span == "1K–8K" and len(ranges) == 1
    row = ranges.iloc[0]
    assert (row["layout"], row["vs flex_sparse"]) == ("local", "1.20×–1.50×")
    # time / dense / (1.25 * 0.2 + 0.02): 0.6 / 1 / 0.27 = 2.22, 1 / 4 / 0.27 = 0.93, 2.5 / 8 / 0.27 = 1.16
    assert row["time ÷ bound"] == "0.93–2.22" and row["within bound, N ≥ 4K"] == "1 of 2"
    # the block-sparse file's own dense reference does not enter the dense headline
    dense_only, _ = table.kernel_ranges(table.load_kernels([dense]))
    assert table.kernel_ranges(frame)[0].equals(dense_only)
    titles = [s.title for s in table.kernel_sections(frame)]
    assert titles == ["Kernels: ranges over N = 1K–4K", "Block-sparse kernels: ranges over N = 1K–8K"]
