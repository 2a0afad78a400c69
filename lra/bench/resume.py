"""Resuming a benchmark file (`lra bench kernels|models --resume`): the rows kept were measured with
the settings of an earlier run, so a run with other settings is refused, and the earlier runs'
provenance (command, date, git revision, GPU, versions) is carried in the new `.meta.json` as
`earlier_runs` rather than overwritten."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable


def canonical(value):
    """`value` as JSON would give it back (tuples as lists, sorted keys): what two metas compare."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def differences(pairs: Iterable[tuple[str, object, object]]) -> list[str]:
    """`key: old vs new` for each (key, old, new) whose values differ; a value one side lacks
    (None) is not compared."""
    return [f"{key}: {canonical(a)!r} vs {canonical(b)!r}" for key, a, b in pairs
            if a is not None and b is not None and canonical(a) != canonical(b)]


def earlier_runs(meta_path: Path, meta: dict, mismatches: Callable[[dict, dict], list[str]],
                 keep: Iterable[str], target, own_flag: str) -> list[dict]:
    """The `earlier_runs` of a resumed file's new meta: those of its `.meta.json` plus that run's
    `keep` fields. ValueError when `mismatches(previous meta, meta)` finds a setting that differs
    (`target` names the file, `own_flag` the option that writes elsewhere)."""
    if not meta_path.exists():
        return []
    try:
        previous = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return [{"note": f"{meta_path} unreadable"}]
    found = mismatches(previous, meta)
    if found:
        raise ValueError(f"--resume: {target} was measured with other settings ({'; '.join(found)}); "
                         f"write this run to its own {own_flag}")
    return previous.get("earlier_runs", []) + [{k: previous.get(k) for k in keep}]
