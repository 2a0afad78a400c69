"""Test-wide set-up: the Triton kernels run through the interpreter on CPU-only machines.

TRITON_INTERPRET must be set before Triton is imported anywhere, so it happens here, first.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
