"""Test-wide set-up: the Triton kernels run through the interpreter on CPU-only machines.

TRITON_INTERPRET must be set before Triton is imported anywhere, so it happens here, first.

``@pytest.mark.cpu_machine("why")`` marks a test that assumes a machine without CUDA (CI's): e.g. it
builds our kernels' modules on CPU tensors (which only the interpreter runs), or checks bit-exact
resumption of a run that Lightning would put on the GPU, whose float sums (cuBLAS, atomics) vary in
their last bits. On a CUDA machine it is skipped with that reason (the GPU side is covered by the
CUDA tests: tests/kernels and the model tests, run on the H200).
"""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu_machine(reason): assumes a machine without CUDA; skipped on CUDA machines")


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        return
    for item in items:
        marker = item.get_closest_marker("cpu_machine")
        if marker is not None:
            why = marker.args[0] if marker.args else "see the test"
            item.add_marker(pytest.mark.skip(reason=f"assumes a machine without CUDA: {why}"))
