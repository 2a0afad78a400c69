"""Label-preserving training augmentation of pixel tasks (`data.augment`, tasks.base)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tasks import TASKS, build_datamodule, pathfinder_gen
from tasks.base import AUGMENTATIONS, PixelDataset, PixelSplit, augment_image
from tests.tasks.test_pathfinder import link_radius, markers_connected


def test_dihedral_variants_are_the_eight_symmetries_of_the_square():
    image = np.arange(25, dtype=np.uint8).reshape(5, 5)   # no symmetry of its own
    variants = [augment_image(image, "dihedral", v) for v in range(8)]
    assert np.array_equal(variants[0], image)
    expected = [np.rot90(image, k) for k in range(4)] + [np.rot90(image, k)[:, ::-1] for k in range(4)]
    for got, want in zip(variants, expected):
        assert np.array_equal(got, want)
    assert len({v.tobytes() for v in variants}) == 8               # all distinct
    # closed under composition: every variant of a variant is again one of the eight
    group = {v.tobytes() for v in variants}
    for v in variants:
        assert {augment_image(np.ascontiguousarray(v), "dihedral", u).tobytes() for u in range(8)} == group
    assert np.array_equal(augment_image(image, "hflip", 1), image[:, ::-1])
    assert np.array_equal(augment_image(image, "hflip", 0), image)


def test_bad_augmentation_requests():
    image = np.zeros((4, 6), np.uint8)
    with pytest.raises(ValueError, match="square"):
        augment_image(image, "dihedral", 1)
    with pytest.raises(ValueError, match="variants 0..1"):
        augment_image(image, "hflip", 2)
    with pytest.raises(ValueError, match="unknown augmentation 'rotate'"):
        PixelDataset(PixelSplit(np.zeros((2, 4, 4), np.uint8), np.zeros(2, np.int64)), augment="rotate")


def test_pixel_dataset_lists_every_image_in_every_variant():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(7, 6, 6), dtype=np.uint8)
    labels = rng.integers(0, 2, size=7)
    plain = PixelDataset(PixelSplit(images, labels), limit=5)
    aug = PixelDataset(PixelSplit(images, labels), limit=5, augment="dihedral")
    assert len(plain) == 5 and len(aug) == 5 * AUGMENTATIONS["dihedral"] == 40
    for i in range(len(aug)):
        variant, j = divmod(i, 5)
        item = aug[i]
        assert torch.equal(item["input_ids"], torch.from_numpy(
            augment_image(images[j], "dihedral", variant).astype(np.int64).reshape(-1)))
        assert int(item["label"]) == labels[j] and not item["padding_mask"].any()
    assert torch.equal(aug[3]["input_ids"], plain[3]["input_ids"])   # variant 0 = the image
    with pytest.raises(IndexError):
        aug[40]


def test_pathfinder_labels_survive_every_variant():
    """The reason Pathfinder admits the dihedral group: the markers stay joined (or not) — checked
    from the pixels with the independent search of test_pathfinder on each transformed image."""
    p = pathfinder_gen.params_for(32, "hard")
    checked = 0
    for i in range(12):
        s = pathfinder_gen.generate_sample(p, 0, "train", i)
        radius = link_radius(p, s.margin)
        base = markers_connected(s.image, *s.markers, radius)
        marks = np.zeros(s.image.shape, np.uint8)   # carry the marker positions through the transform
        (ax, ay), (bx, by) = s.markers
        marks[int(round(ay)), int(round(ax))], marks[int(round(by)), int(round(bx))] = 1, 2
        for v in range(8):
            image = augment_image(s.image, "dihedral", v)
            moved = augment_image(marks, "dihedral", v)
            a = np.argwhere(moved == 1)[0][::-1]
            b = np.argwhere(moved == 2)[0][::-1]
            assert markers_connected(np.ascontiguousarray(image), a, b, radius) == base
            checked += 1
    assert checked == 96


def test_datamodule_augments_training_only_and_checks_the_task(tmp_path):
    assert "dihedral" in TASKS["pathfinder32"].augmentations and TASKS["image"].augmentations == ("hflip",)
    dm = build_datamodule("pathfinder32", data_dir=tmp_path, batch_size=4, limit_train=6, limit_eval=3,
                          generator_workers=1, augment="dihedral")
    dm.prepare_data()
    dm.setup()
    assert dm.split_sizes == {"train": 48, "val": 3, "test": 3}
    train = dm.dataset("train")
    assert torch.equal(train[6 + 2]["input_ids"].view(32, 32),
                       torch.from_numpy(np.rot90(train[2]["input_ids"].view(32, 32).numpy()).copy()))
    assert len(next(iter(dm.train_dataloader()))["label"]) == 4
    for task, augment in (("listops", "hflip"), ("image", "dihedral"), ("pathfinder32", "rotate")):
        with pytest.raises(ValueError, match=fr"augmentation '{augment}' \(data.augment\) is not label-preserving "
                                             fr"for {task}"):
            build_datamodule(task, data_dir=tmp_path, batch_size=4, augment=augment)
