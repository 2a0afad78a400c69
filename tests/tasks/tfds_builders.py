"""Tiny stand-ins of the tfds data sets the tasks read (`imdb_reviews`, `cifar10`), prepared by tfds.

Each builder subclasses tfds's own builder of that data set (same name, config, version and
features) and replaces only the download with a few generated examples, so `prepare` leaves in
`data_dir` what `tfds.builder(name).download_and_prepare()` would: dataset_info.json, features.json
and one array_record file per split. Preparing needs no TensorFlow: tfds serialises the examples
with its own copy of the tf.train.Example protos. Images go in as PIL images, which tfds encodes
with PIL (numpy arrays it encodes with TensorFlow).

tfds locates a builder's code through its module, so the builders live in this module file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from tensorflow_datasets.core import registered
from tensorflow_datasets.datasets.imdb_reviews import imdb_reviews_dataset_builder as imdb
from tensorflow_datasets.image_classification import cifar

SPLIT_SIZES = {"train": 12, "test": 6}


def imdb_example(split: str, i: int) -> dict:
    label = i % 2
    return {"text": f"{split} review {i}: " + ("great " if label else "awful ") * (i + 1), "label": label}


def cifar_example(split: str, i: int) -> dict:
    rng = np.random.default_rng([SPLIT_SIZES[split], i])
    return {"id": f"{split}_{i:05d}", "image": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), "label": i % 10}


with registered.skip_registration():  # tfds's own builders keep the names
    class TinyImdbReviews(imdb.Builder):
        name = "imdb_reviews"

        def _split_generators(self, dl_manager):
            return {split: self._examples(split) for split in SPLIT_SIZES}

        def _examples(self, split):
            for i in range(SPLIT_SIZES[split]):
                yield i, imdb_example(split, i)

    class TinyCifar10(cifar.Cifar10):
        name = "cifar10"

        def _split_generators(self, dl_manager):
            return {split: self._examples(split) for split in SPLIT_SIZES}

        def _examples(self, split):
            for i in range(SPLIT_SIZES[split]):
                example = cifar_example(split, i)
                yield i, {**example, "image": Image.fromarray(example["image"])}


BUILDERS = {"imdb_reviews": TinyImdbReviews, "cifar10": TinyCifar10}
EXAMPLES = {"imdb_reviews": imdb_example, "cifar10": cifar_example}


def prepare(name: str, data_dir: Path) -> Path:
    """Prepare the stand-in of tfds `name` in array_record format under `data_dir`; returns the
    folder of its files (`data_dir/<name>/<config>/<version>`)."""
    builder = BUILDERS[name](data_dir=str(data_dir), file_format="array_record")
    builder.download_and_prepare()
    return Path(builder.data_dir)


def expected(name: str, split: str) -> list[dict]:
    """The examples of the stand-in's `split`, in generation order (tfds stores them shuffled)."""
    return [EXAMPLES[name](split, i) for i in range(SPLIT_SIZES[split])]
