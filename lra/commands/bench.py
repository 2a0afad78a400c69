"""`lra bench kernels|models`: GPU benchmarks that write CSV + Markdown records with provenance."""
from __future__ import annotations

import importlib

TARGETS = {
    "kernels": ("lra.bench.kernels", "attention kernels: ours vs SDPA back-ends, FlexAttention, softmax"),
    "models": ("lra.bench.models", "LRA model training-step throughput and memory per attention"),
}


def add_parser(sub) -> None:
    parser = sub.add_parser("bench", help="benchmark kernels or whole models (GPU)")
    targets = parser.add_subparsers(dest="target", metavar="TARGET")
    targets.required = True
    for name, (module_name, help_text) in TARGETS.items():
        module = importlib.import_module(module_name)
        target = targets.add_parser(name, help=help_text)
        module.add_arguments(target)
        target.set_defaults(func=module.run)
