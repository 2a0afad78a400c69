"""The registered attentions and the names of their own options, without importing torch: what the
command line needs to build its parser (`--attention.<option>` flags, help texts) in a fraction of a
second. The registry, `lra.attention`, holds the types, defaults and factories, and refuses to
import unless it registers exactly these names and options."""
from __future__ import annotations

ATTENTION_OPTIONS: dict[str, tuple[str, ...]] = {
    "flash": (),
    "flash_sparse": ("layout", "block_size", "window", "num_random", "num_global", "num_factors", "layout_seed"),
    "softmax": (),
    "sdpa": ("backend",),
    "performer": ("nb_features", "kernel", "feature_type", "redraw_interval", "eps"),
    "linformer": ("proj_k", "sharing"),
    "bigbird": ("block_size", "window", "num_random"),
}


def option_users() -> dict[str, list[str]]:
    """{option: [attentions that take it]}, options sorted by name."""
    out: dict[str, list[str]] = {}
    for name, options in ATTENTION_OPTIONS.items():
        for option in options:
            out.setdefault(option, []).append(name)
    return dict(sorted(out.items()))
