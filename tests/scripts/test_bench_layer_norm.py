"""scripts/bench_layer_norm.py: our LayerNorm vs PyTorch's, timed per shape and pass."""
from __future__ import annotations

import json

import pandas as pd
import pytest


def test_a_tiny_run_writes_every_cell_and_its_provenance(load_script, tmp_path, capsys):
    script = load_script("bench_layer_norm")
    out = tmp_path / "ln.csv"
    assert script.main(["--shapes", "37x48", "8x64", "37x48", "--reps", "1", "--no-compiled", "--out", str(out)]) == 0
    frame = pd.read_csv(out)
    assert len(frame) == 2 * 2 * 2  # shapes (the repeated one once) x implementations x passes
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


def test_the_compiled_anchor_stays_compiled_for_every_shape(load_script):
    """Two compile-cache entries per shape (no_grad forward, forward + backward): without a fresh cache per
    shape the fifth shape hit Dynamo's recompile limit and `compiled` silently timed eager F.layer_norm."""
    import torch
    import torch._dynamo.testing
    import torch.nn.functional as F

    script = load_script("bench_layer_norm")
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    impls = {"compiled": torch.compile(F.layer_norm, dynamic=False, backend=counter)}
    shapes = [(8, 16), (16, 16), (8, 32), (16, 32), (8, 48), (16, 48)]
    for shape in shapes:
        script.measure(shape, torch.float32, torch.device("cpu"), impls, reps=1)
    assert counter.frame_count == 2 * len(shapes)
