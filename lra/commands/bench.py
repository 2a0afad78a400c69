"""`lra bench kernels|models`: GPU benchmarks that write CSV + Markdown records with provenance."""
from __future__ import annotations

import importlib

# target: (module with add_arguments, module with run, help)
TARGETS = {
    "kernels": ("lra.bench.kernel_options", "lra.bench.kernels",
                "attention kernels: ours vs SDPA back-ends, FlexAttention, softmax"),
    "models": ("lra.bench.model_options", "lra.bench.models",
               "LRA model training-step throughput and memory per attention"),
}


def _runner(module_name: str):
    """`run(args)` of the benchmark module, imported when the target runs (not to build the parser)."""
    def run(args) -> int:
        return importlib.import_module(module_name).run(args)
    return run


def add_parser(sub) -> None:
    parser = sub.add_parser("bench", help="benchmark kernels or whole models (GPU)",
                            description=__doc__.split(": ", 1)[1])
    targets = parser.add_subparsers(dest="target", metavar="TARGET")
    targets.required = True
    for name, (options_module, run_module, help_text) in TARGETS.items():
        target = targets.add_parser(name, help=help_text, description=help_text)
        importlib.import_module(options_module).add_arguments(target)
        target.set_defaults(func=_runner(run_module))
