"""A run's data checked before its run folder exists (`lra train`, and once per task and data source
in `lra sweep`'s plan).

`check_data` prepares the DataModule's source (a generator's data made, released images decoded
into their cache, a tfds download) and loads every split, so that released files are parsed up
front: a corrupt row is a ValueError naming its file and line, a missing file a FileNotFoundError,
both before anything of the run is written. The DataModule keeps the splits it loaded, so training
and testing read none of them again.
"""
from __future__ import annotations

from tasks.base import SPLITS


def check_data(dm) -> None:
    """Prepare `dm`'s data source and load its train, val and test splits into `dm`."""
    dm.prepare_data()
    for split in SPLITS:
        dm.dataset(split)
