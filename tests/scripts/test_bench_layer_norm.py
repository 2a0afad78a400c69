"""scripts/bench_layer_norm.py: our LayerNorm vs PyTorch's, timed per shape and pass."""
from __future__ import annotations

import json

import pandas as pd
import pytest


def test_a_tiny_run_writes_every_cell_and_its_provenance(load_script, tmp_path, capsys):
    script = load_script("bench_layer_norm")
    out = tmp_path / "ln.csv"
    assert script.main(["--shapes", "37x48", "8x64", "--reps", "1", "--no-compiled", "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert len(frame) == 2 * 2 * 2  # shapes x implementations x passes
    assert set(frame["impl"]) == {"torch", "triton"} and set(frame["pass"]) == {"fwd", "fwd+bwd"}
    assert (frame["ms"] > 0).all() and (frame["gb_per_s"] > 0).all()
    assert (frame.loc[frame["impl"] == "torch", "speedup_vs_torch"] == 1.0).all()
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert {"command", "device", "versions", "git_rev", "date", "timing"} <= set(meta)


def test_a_bad_shape_is_one_clear_error(load_script, capsys):
    script = load_script("bench_layer_norm")
    with pytest.raises(SystemExit):
        script.main(["--shapes", "262144by64"])
    assert "expected ROWSxD" in capsys.readouterr().err
