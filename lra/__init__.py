"""lra: Long Range Arena harness — model, training, registry, CLI, results.

Without CUDA our Triton kernels run through Triton's interpreter, which must be switched on
(TRITON_INTERPRET=1) before anything (Lightning, torch._dynamo, `kernels`) imports Triton. Importing
`lra` makes that decision at the last moment: a one-time import hook asks torch for a CUDA device
right before Triton's first import. Importing `lra` itself imports neither torch nor Triton, so the
command line (`lra --help`) and the other light modules start in a fraction of a second.
"""
import importlib.abc
import os
import sys

__version__ = "0.1.0"


def _interpret_triton_without_cuda() -> None:
    """TRITON_INTERPRET=1 (unless set) when torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")


class _BeforeTriton(importlib.abc.MetaPathFinder):
    """Runs `_interpret_triton_without_cuda` when Triton is about to be imported, then steps aside."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "triton" and self in sys.meta_path:
            sys.meta_path.remove(self)
            _interpret_triton_without_cuda()
        return None  # the ordinary finders import Triton


if "triton" in sys.modules:
    _interpret_triton_without_cuda()
else:
    sys.meta_path.insert(0, _BeforeTriton())
