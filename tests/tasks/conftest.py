"""Writers of small data sets in the official formats (LRA release, Stanford IMDB, CIFAR python)."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image


def _write_listops(root: Path, rows_per_split=None) -> Path:
    folder = root / "listops-1000"
    folder.mkdir(parents=True)
    rows = rows_per_split or {
        "train": [("( ( ( [MAX 2 ) 9 ) ] )", 9), ("( ( ( [MIN 4 ) ( ( ( [SM 3 ) 9 ) ] ) ) ] )", 2),
                  ("( ( ( ( [MED 1 ) 5 ) 7 ) ] )", 5), ("( ( ( [SM 8 ) 7 ) ] )", 5)],
        "val": [("( ( ( [MAX 0 ) 0 ) ] )", 0)],
        "test": [("( ( ( [MIN 6 ) 3 ) ] )", 3), ("( ( ( [MED 2 ) 7 ) ] )", 4)],
    }
    for split, items in rows.items():
        with open(folder / f"basic_{split}.tsv", "w") as handle:
            handle.write("Source\tTarget\n")
            for expr, label in items:
                handle.write(f"{expr}\t{label}\n")
    return folder


def _write_aan(root: Path, rows=None) -> Path:
    folder = root / "tsv_data"
    folder.mkdir(parents=True)
    rows = rows or [("1.0", "a1", "b1", "Attention is all you need", "Long range arena"),
                    ("0", "a2", "b2", "Pixel 0 is black", '"quoted ""text"" here"'),
                    ("1", "a3", "b3", "x" * 50, "y")]
    for name in ("train", "eval", "test"):
        with open(folder / f"new_aan_pairs.{name}.tsv", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write("\t".join(row) + "\n")
    return folder


def _write_pathfinder(root: Path, size=32, n=20, empty=(), seed=0) -> tuple[Path, np.ndarray, list]:
    """pathfinder{size}/curv_contour_length_14 with `n` PNGs in two metadata batches; returns the
    folder, labels (metadata order) and images (None for empty files)."""
    folder = root / f"pathfinder{size}" / "curv_contour_length_14"
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    images = []
    (folder / "metadata").mkdir(parents=True)
    for batch in range(2):
        lines = []
        (folder / "imgs" / str(batch)).mkdir(parents=True)
        for i in range(batch * (n // 2), (batch + 1) * (n // 2)):
            path = folder / "imgs" / str(batch) / f"sample_{i}.png"
            if i in empty:
                path.write_bytes(b"")
                images.append(None)
            else:
                img = rng.integers(0, 256, (size, size), dtype=np.uint8)
                img[0, 0] = 0
                Image.fromarray(img, mode="L").save(path)
                images.append(img)
            lines.append(f"imgs/{batch} sample_{i}.png {i} {labels[i]} 1.8 14 4 5 1.5 3 1")
        (folder / "metadata" / f"{batch}.npy").write_text("\n".join(lines) + "\n")
    return folder, labels, images


def _write_imdb(root: Path, per_class=6) -> Path:
    base = root / "aclImdb"
    for split in ("train", "test"):
        for name in ("pos", "neg"):
            folder = base / split / name
            folder.mkdir(parents=True)
            for i in range(per_class):
                text = f"{split} {name} review {i}: " + ("great " if name == "pos" else "awful ") * (i + 1)
                (folder / f"{i}_{7 if name == 'pos' else 2}.txt").write_text(text + "<br />é")
    (base / "train" / "unsup").mkdir()
    (base / "train" / "unsup" / "0_0.txt").write_text("ignored")
    return base


def _write_cifar(root: Path, per_batch=10, seed=0) -> tuple[Path, dict]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        data[0, :] = 0                                  # an all-black image
        labels = [int(x) for x in rng.integers(0, 10, per_batch)]
        with open(folder / name, "wb") as handle:
            pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": data,
                         b"filenames": [b"x.png"] * per_batch}, handle, protocol=2)
        written[name] = (data, labels)
    return folder, written


@pytest.fixture
def write_listops():
    return _write_listops


@pytest.fixture
def write_aan():
    return _write_aan


@pytest.fixture
def write_pathfinder():
    return _write_pathfinder


@pytest.fixture
def write_imdb():
    return _write_imdb


@pytest.fixture
def write_cifar():
    return _write_cifar


@pytest.fixture
def nested(tmp_path):
    """The release's nested layout: data/lra_release/lra_release/."""
    inner = tmp_path / "data" / "lra_release" / "lra_release"
    inner.mkdir(parents=True)
    return tmp_path / "data", inner
