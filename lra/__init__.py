"""lra: Long Range Arena harness — model, training, registry, CLI, results.

Without CUDA our Triton kernels run through Triton's interpreter, which must be switched on before
anything (Lightning, torch._dynamo) imports Triton; importing `lra` does that first.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
