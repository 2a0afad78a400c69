"""Reading TensorFlow Datasets (optional extra `lra[tfds]`) without making TensorFlow a dependency.

`tfds.data_source` (tensorflow-datasets >= 4.9, array_record files) reads examples as numpy without
TensorFlow; older installs or data prepared as TFRecords fall back to `tfds.load` + `tfds.as_numpy`.
tfds looks for prepared data in `<data_dir>/tensorflow_datasets` when that folder exists, else in its
own default (~/tensorflow_datasets or $TFDS_DATA_DIR), and downloads what is missing.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Iterator

from . import release


def installed() -> bool:
    return importlib.util.find_spec("tensorflow_datasets") is not None


def require():
    if not installed():
        raise FileNotFoundError(f"tensorflow-datasets is not installed: {release.TFDS_HINT}")
    import tensorflow_datasets as tfds
    return tfds


def tfds_dir(data_dir: Path) -> str | None:
    folder = Path(data_dir) / "tensorflow_datasets"
    return str(folder) if folder.is_dir() else None


def prepare(name: str, data_dir: Path) -> None:
    """Download and prepare `name` once (rank 0, before training)."""
    tfds = require()
    tfds.builder(name, data_dir=tfds_dir(data_dir)).download_and_prepare()


def examples(name: str, split: str, data_dir: Path) -> Iterator[dict]:
    """The examples of `name[split]` as dicts of numpy values, in the stored order."""
    tfds = require()
    kwargs = {"split": split, "data_dir": tfds_dir(data_dir)}
    if hasattr(tfds, "data_source"):
        try:
            source = tfds.data_source(name, **kwargs)
        except Exception as err:  # noqa: BLE001 - e.g. prepared as TFRecords: fall back to tfds.load
            fallback_reason = err
        else:
            return (source[i] for i in range(len(source)))
    else:
        fallback_reason = None
    try:
        dataset = tfds.load(name, **kwargs)
    except ImportError as err:  # tfds.load needs TensorFlow
        raise FileNotFoundError(f"tfds could not read {name}[{split}] without TensorFlow "
                                f"({fallback_reason or err}); install tensorflow or prepare the data set "
                                "in array_record format (tensorflow-datasets >= 4.9)") from err
    return iter(tfds.as_numpy(dataset))
