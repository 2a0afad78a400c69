"""Pathfinder: generator (labels checked from the pixels), official PNG + metadata reader, caches."""
from __future__ import annotations

import collections
import math

import numpy as np
import pytest

from tasks import build_datamodule, pathfinder, pathfinder_gen


def markers_connected(image: np.ndarray, a, b, radius: float) -> bool:
    """Independent check from the pixels: breadth-first search over inked pixels (value > 0), two
    pixels being neighbours when they are at most `radius` apart (bridges the dashes' gaps)."""
    h, w = image.shape
    ink = image > 0
    r = int(math.floor(radius))
    offsets = [(dy, dx) for dy in range(-r, r + 1) for dx in range(-r, r + 1)
               if (dy or dx) and dy * dy + dx * dx <= radius * radius]
    start = (int(round(a[1])), int(round(a[0])))
    goal = (int(round(b[1])), int(round(b[0])))
    assert ink[start] and ink[goal], "markers must be drawn"
    seen = {start}
    queue = collections.deque([start])
    while queue:
        y, x = queue.popleft()
        if (y, x) == goal:
            return True
        for dy, dx in offsets:
            q = (y + dy, x + dx)
            if 0 <= q[0] < h and 0 <= q[1] < w and ink[q] and q not in seen:
                seen.add(q)
                queue.append(q)
    return False


def link_radius(params, margin) -> float:
    # Dashes inside a snake are 2*margin apart; different snakes at least one pixel more.
    return 2 * margin + 1 - params.paddle_thickness


@pytest.mark.parametrize("size, n", [(32, 96), (128, 12)])
def test_labels_agree_with_the_pixels(size, n):
    p = pathfinder_gen.params_for(size, "hard")
    agree = 0
    for i in range(n):
        s = pathfinder_gen.generate_sample(p, 0, "train", i)
        assert s.image.dtype == np.uint8 and s.image.shape == (size, size)
        assert s.image.min() == 0 and s.image.max() == 255           # stretched to 0..255
        connected = markers_connected(s.image, *s.markers, link_radius(p, s.margin))
        agree += connected == bool(s.label)
    assert agree / n >= 0.95, f"only {agree}/{n} labels agree with the drawn pixels"


def test_samples_are_pure_and_balanced():
    p = pathfinder_gen.params_for(32, "easy")
    a = pathfinder_gen.generate_sample(p, 7, "val", 5)
    pathfinder_gen.generate_sample(p, 7, "val", 4)
    b = pathfinder_gen.generate_sample(p, 7, "val", 5)
    assert np.array_equal(a.image, b.image) and a.label == b.label
    assert not np.array_equal(a.image, pathfinder_gen.generate_sample(p, 8, "val", 5).image)
    labels = pathfinder_gen.sample_labels(0, "train", 1000)
    assert labels.sum() == 500 and 0 < labels[::2].sum() < 500
    out = np.zeros((4, 32, 32), np.uint8)
    got = pathfinder_gen.generate_into(p, 7, "val", [2, 3, 4, 5], out)
    assert np.array_equal(out[3], a.image) and got[3] == a.label


def test_difficulty_and_parameters():
    assert pathfinder_gen.contour_length_of("intermediate") == 9
    assert pathfinder_gen.contour_length_of(6) == 6
    with pytest.raises(ValueError, match="difficulty"):
        pathfinder_gen.contour_length_of("extreme")
    with pytest.raises(ValueError, match="size"):
        pathfinder_gen.params_for(48)
    p = pathfinder_gen.params_for(128)
    assert (p.paddle_margins, p.seed_distance, p.num_distractors) == ((2, 3), 20, 35 // 4)


def test_generated_source_cache_reuse_and_prefix(tmp_path, monkeypatch):
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=8, limit_train=24, limit_eval=8,
                          generator_workers=1)
    assert dm.source.kind == "generated" and dm.max_len == 1024 and dm.vocab_size == 256
    dm.prepare_data()
    dm.setup()
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape == (8, 1024) and batch["input_ids"].dtype.is_floating_point is False
    assert not batch["padding_mask"].any()                         # pixel 0 is never padding
    assert (batch["input_ids"] == 0).any()
    assert batch["label"].dtype == pytest.importorskip("torch").long
    # Second prepare: nothing is generated again.
    calls = []
    monkeypatch.setattr(pathfinder_gen, "generate_into", lambda *a, **k: calls.append(a))
    dm2 = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=8, limit_train=24, limit_eval=8,
                           generator_workers=1)
    dm2.prepare_data()
    # A smaller request is served from the larger cache (image i is the same in both).
    dm3 = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=8, limit_train=10, limit_eval=4,
                           generator_workers=1)
    dm3.prepare_data()
    dm3.setup()
    assert calls == []
    assert np.array_equal(dm3.dataset("train")[9]["input_ids"], dm.dataset("train")[9]["input_ids"])
    assert dm3.split_sizes == {"train": 10, "val": 4, "test": 4}


def test_official_reader_nested_layout_with_empty_image(nested, write_pathfinder):
    data_dir, inner = nested
    folder, labels, images = write_pathfinder(inner, size=32, n=20, empty=(3,))
    with pytest.warns(UserWarning, match="skipping 1 empty image"):
        dm = build_datamodule("pathfinder32", data_dir=data_dir, batch_size=4, generator_workers=1)
        assert dm.source.kind == "official"
        dm.prepare_data()
    dm.setup()
    keep = [i for i in range(20) if i != 3]
    sizes = dm.split_sizes
    assert sum(sizes.values()) == 19 and sizes["train"] == round(0.8 * 19)
    split = pathfinder.split_indices(19, 0)
    seen = []
    for name in ("train", "val", "test"):
        ds = dm.dataset(name)
        for j in range(len(ds)):
            item = ds[j]
            original = keep[split[name][j]]
            assert np.array_equal(item["input_ids"].numpy(), images[original].reshape(-1))
            assert item["label"].item() == labels[original]
            assert not item["padding_mask"].any()
            seen.append(original)
    assert sorted(seen) == keep                        # 80/10/10 partition of all non-empty images
    # Decoded once: the cache is reused by a new DataModule (same split).
    dm2 = build_datamodule("pathfinder32", data_dir=data_dir, batch_size=4)
    assert dm2.source._cache_folder() == dm.source._cache_folder()
    assert np.array_equal(dm2.dataset("test")[0]["input_ids"], dm.dataset("test")[0]["input_ids"])


def test_corrupt_png_names_file_and_metadata_line(tmp_path, write_pathfinder):
    folder, _, _ = write_pathfinder(tmp_path, n=6)
    (folder / "imgs" / "1" / "sample_4.png").write_bytes(b"not a png at all")
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, source="official", generator_workers=1)
    with pytest.raises(ValueError, match=r"unreadable image .*sample_4\.png \(listed at .*metadata/1\.npy:2\)"):
        dm.prepare_data()
    assert not any(p.name.endswith("COMPLETE") for p in (tmp_path / "cache").rglob("*"))


def test_wrong_size_and_bad_metadata(tmp_path, write_pathfinder):
    folder, _, _ = write_pathfinder(tmp_path, size=64, n=4)
    target = tmp_path / "pathfinder32"
    (folder.parent).rename(target)
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, source="official", generator_workers=1)
    with pytest.raises(ValueError, match="is 64x64, expected 32x32"):
        dm.prepare_data()
    meta = target / "curv_contour_length_14" / "metadata" / "0.npy"
    meta.write_text("imgs/0 sample_0.png 0 1 1.8 14\n")
    with pytest.raises(ValueError, match=r"metadata/0\.npy:1: expected 11 space-separated fields, got 6"):
        pathfinder.read_metadata(target / "curv_contour_length_14")
    meta.write_text("imgs/0 sample_0.png 0 7 1.8 14 4 5 1.5 3 1\n")
    with pytest.raises(ValueError, match=r"0\.npy:1: label \(field 4\) must be 0 or 1, got '7'"):
        pathfinder.read_metadata(target / "curv_contour_length_14")
    meta.write_text("imgs/0 sample_99.png 0 1 1.8 14 4 5 1.5 3 1\n")
    with pytest.raises(FileNotFoundError, match=r"sample_99\.png listed at .*0\.npy:1 does not exist"):
        build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, source="official",
                         generator_workers=1).prepare_data()


def test_official_missing_and_pixel_seq_len(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        build_datamodule("pathx", data_dir=tmp_path, batch_size=2, source="official")
    text = str(err.value)
    assert "pathfinder128/curv_contour_length_14" in text and "lra data generate pathx" in text
    with pytest.raises(ValueError, match=r"128x128 = 16384 pixels.*seq_len must be 16384 \(got 4096\).*pathfinder64"):
        build_datamodule("pathx", data_dir=tmp_path, batch_size=2, seq_len=4096)
    dm = build_datamodule("path256", data_dir=tmp_path, batch_size=2, seq_len=65536, difficulty="easy")
    assert dm.image_shape == (256, 256) and dm.source.params.contour_length == 6


def test_pixel_dataset_pickles_the_memmap_path(tmp_path):
    import pickle

    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, limit_train=4, limit_eval=2,
                          generator_workers=1)
    dm.prepare_data()
    ds = dm.dataset("train")
    blob = pickle.dumps(ds)
    assert len(blob) < 4 * 1024                     # the images stay on disk
    copy = pickle.loads(blob)
    assert np.array_equal(copy[3]["input_ids"], ds[3]["input_ids"]) and copy[3]["label"] == ds[3]["label"]


def test_repeated_metadata_rows_cannot_leak_across_splits(tmp_path, write_pathfinder):
    folder, labels, images = write_pathfinder(tmp_path, n=20)
    meta0, meta1 = folder / "metadata" / "0.npy", folder / "metadata" / "1.npy"
    meta1.write_text(meta1.read_text() + meta0.read_text())        # batch 0 listed a second time
    with pytest.warns(UserWarning, match=r"skipping 10 repeated metadata row\(s\).*1\.npy:11 repeats .*0\.npy:1"):
        rows = pathfinder.read_metadata(folder)
    assert len(rows) == 20 and len({r.image for r in rows}) == 20
    with pytest.warns(UserWarning, match="repeated metadata"):
        dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, source="official",
                              generator_workers=1)
        dm.prepare_data()
    dm.setup()
    assert sum(dm.split_sizes.values()) == 20
    seen = [dm.dataset(s)[i]["input_ids"].numpy().tobytes() for s in ("train", "val", "test")
            for i in range(dm.split_sizes[s])]
    assert len(set(seen)) == 20                                    # no image in two splits
    first = meta0.read_text().splitlines()[0].split()
    first[3] = str(1 - int(first[3]))
    meta1.write_text(meta1.read_text() + " ".join(first) + "\n")
    with pytest.raises(ValueError, match=r"1\.npy:21: image .*sample_0\.png has label .* but .*0\.npy:1 lists it"):
        pathfinder.read_metadata(folder)


def test_16_bit_png_is_an_error_not_clipped(tmp_path, write_pathfinder):
    from PIL import Image

    folder, _, _ = write_pathfinder(tmp_path, n=6)
    wide = (np.arange(32 * 32).reshape(32, 32) * 60).astype(np.uint16)   # values up to 61380
    Image.fromarray(wide).save(folder / "imgs" / "0" / "sample_1.png")
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=2, source="official", generator_workers=1)
    with pytest.raises(ValueError, match=r"sample_1\.png \(listed at .*0\.npy:2\).*mode 'I;16' is not 8-bit"):
        dm.prepare_data()


def test_an_empty_metadata_file_is_reported_not_skipped_silently(tmp_path, write_pathfinder):
    folder, _, _ = write_pathfinder(tmp_path, n=20)
    (folder / "metadata" / "1.npy").write_bytes(b"")               # e.g. an interrupted unpack
    with pytest.warns(UserWarning, match=r"1 empty metadata file\(s\) \(1\.npy\).*left out"):
        rows = pathfinder.read_metadata(folder)
    assert len(rows) == 10                                         # batch 0's rows only
