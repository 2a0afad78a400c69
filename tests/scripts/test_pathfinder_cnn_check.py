"""scripts/pathfinder_cnn_check.py: draws the splits the data pipeline draws, trains, reports."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def check(load_script):
    return load_script("pathfinder_cnn_check")


def test_images_are_the_generators(check):
    from tasks.pathfinder_gen import generate_sample, params_for

    params = params_for(32, "easy")
    x, y = check.draw(params, 0, "val", 7, workers=1)
    assert x.shape == (7, 1, 32, 32) and 0 <= x.min() and x.max() <= 1
    for i in (0, 6):
        sample = generate_sample(params, 0, "val", i)
        assert torch.equal(x[i, 0], torch.from_numpy(sample.image).float() / 255) and y[i] == sample.label


def test_augmentation_only_rotates_and_flips(check):
    x = torch.arange(2 * 16, dtype=torch.float32).reshape(2, 1, 4, 4)
    rng = np.random.default_rng(1)
    for _ in range(6):
        a = check.augment(x, rng)
        assert a.shape == x.shape and torch.equal(a.flatten(1).sort(1).values, x.flatten(1).sort(1).values)


def test_a_tiny_run_reports_every_epoch(check, tmp_path, capsys):
    out = tmp_path / "cnn.json"
    assert check.main(["--difficulty", "easy", "--n-train", "64", "--n-val", "16", "--epochs", "2",
                       "--batch-size", "32", "--workers", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {"command", "device", "versions", "git_rev", "date"} <= set(report["provenance"])
    history = report["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    assert all(0 <= h["train_acc"] <= 1 and 0 <= h["val_acc"] <= 1 for h in history)
    assert "epoch 2: train" in capsys.readouterr().out
