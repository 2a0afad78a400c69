"""Reading TensorFlow Datasets (optional extra `lra[tfds]`) without making TensorFlow a dependency.

`tfds.data_source` (tensorflow-datasets >= 4.9, array_record files) reads examples as numpy without
TensorFlow; older installs or data prepared as TFRecords fall back to `tfds.load` + `tfds.as_numpy`.
tfds looks for prepared data in `<data_dir>/tensorflow_datasets` when that folder exists, else in its
own default (~/tensorflow_datasets or $TFDS_DATA_DIR), and downloads what is missing. Before a
download the server is probed (DNS and TCP, seconds): without a network the task stops at once with
what to put where, instead of tfds's minutes of retries ending in a connection error.
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import socket
import threading
import urllib.request
from pathlib import Path
from typing import Iterator

from . import release

# the server tfds's own builders download each data set from (host, port)
DOWNLOAD_SERVERS = {"imdb_reviews": ("ai.stanford.edu", 80), "cifar10": ("www.cs.toronto.edu", 443)}
PROBE_TIMEOUT_S = 10.0


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


def unreachable(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why ``host:port`` cannot be reached from here (name lookup or TCP connection within
    ``timeout`` seconds), or None when it answers."""
    outcome: list = []

    def probe():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as err:
            outcome.append(str(err) or type(err).__name__)

    # the name lookup has no timeout of its own: the probe runs in a thread that is given up on
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    return outcome[0] if outcome else f"no answer within {timeout:.0f} s"


@contextlib.contextmanager
def _quiet_absl():
    """Without the absl warning tfds logs while it looks for a data set not prepared yet ("Variant
    folder ... has no dataset_info.json"): :func:`prepare` says itself what is missing and where."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl.setLevel(level)


def prepare(name: str, data_dir: Path, otherwise: str = "") -> None:
    """Download and prepare `name` once (rank 0, before training); nothing when tfds has it prepared.
    Raises FileNotFoundError, saying what to put where (``otherwise``: the task's other way to get
    the data), when the download server cannot be reached or the download fails."""
    tfds = require()
    with _quiet_absl():
        builder = tfds.builder(name, data_dir=tfds_dir(data_dir))
        if builder.is_prepared():
            return
        where = builder.data_dir
    target = Path(data_dir) / "tensorflow_datasets"
    how = (f"Prepare it where there is a network (python -c \"import tensorflow_datasets as tfds; "
           f"tfds.builder('{name}').download_and_prepare()\") and copy its folder ({name}/ of "
           f"~/tensorflow_datasets) to {target}/" + (f"; or {otherwise}" if otherwise else ""))
    server = DOWNLOAD_SERVERS.get(name)
    if server is not None and not urllib.request.getproxies():  # through a proxy, tfds tries itself
        problem = unreachable(*server)
        if problem is not None:
            raise FileNotFoundError(f"tfds '{name}' is not prepared in {where} and its download server "
                                    f"{server[0]} cannot be reached from here ({problem}). {how}.")
    try:
        builder.download_and_prepare()
    except OSError as err:  # requests' connection errors are OSErrors too
        raise FileNotFoundError(f"tfds could not download and prepare '{name}' in {where}: {err}. "
                                f"{how}.") from err


def examples(name: str, split: str, data_dir: Path, otherwise: str = "") -> Iterator[dict]:
    """The examples of `name[split]` as dicts of numpy values, in the stored order; the data set is
    prepared first (:func:`prepare`, with ``otherwise``), reading never downloads."""
    tfds = require()
    prepare(name, data_dir, otherwise)
    kwargs = {"split": split, "data_dir": tfds_dir(data_dir), "download": False}
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
