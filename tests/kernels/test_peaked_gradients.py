"""16-bit gradients under a peaked softmax: our kernel's dQ, dK, dV error against a float64 reference is
no worse than that of SDPA's FlashAttention-2 and cuDNN back-ends on the same inputs (on the CPU,
through Triton's interpreter: than PyTorch's CPU flash kernel, at smaller sizes).

q and k are scaled by 10 and by 100, so each query's probability mass sits on a few keys and the
backward's ``P * (dP - delta)`` cancels almost exactly: the rounding of O (and so of delta) to 16 bits
dominates the gradient error of every flash-style backward. Errors are relative Frobenius norms,
medians over three input draws. Run with ``-s`` to print the table."""
from __future__ import annotations

import statistics

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from kernels import flash_attention
from kernel_reference import attention_reference, rel_err

from kernel_helpers import DEVICE

SLACK = 1.15  # rounding noise between implementations of the same algorithm
DRAWS = 3
CUDA = DEVICE.type == "cuda"
BACKENDS = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, **({"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION} if CUDA else {})}
# Cells still behind an anchor on the H200 (results/kernels/peaked_gradients_h200.log); strict: a
# cell that passes fails the run, so that it leaves this list.
KNOWN_GAPS: dict[tuple, str] = {}  # (d, magnitude, dtype) -> what is behind, and why
SHAPE = (2, 2, 512) if CUDA else (1, 2, 128)  # (B, H, N); the head dim is a parameter


def _grads(fn, q, k, v, grad_out):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    fn(q, k, v).backward(grad_out)
    return q.grad, k.grad, v.grad


def _errors(dtype, magnitude, d, draw):
    gen = torch.Generator(device=DEVICE).manual_seed(1000 * draw + d)
    q, k, v, grad_out = (torch.randn((*SHAPE, d), device=DEVICE, generator=gen) for _ in range(4))
    q, k = q * magnitude, k * magnitude
    q, k, v, grad_out = (x.to(dtype) for x in (q, k, v, grad_out))
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    out64, _ = attention_reference(q64, k64, v64)
    out64.backward(grad_out.double())
    reference = (q64.grad, k64.grad, v64.grad)
    impls = {"ours": flash_attention}
    for name, backend in BACKENDS.items():
        def sdpa(q, k, v, backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v)
        impls[name] = sdpa
    return {name: [rel_err(g, r) for g, r in zip(_grads(fn, q, k, v, grad_out), reference)]
            for name, fn in impls.items()}


# On the CPU bfloat16 only: PyTorch's CPU flash kernel computes float16 in float32 (no 16-bit P), so
# it is no float16 anchor for a kernel that rounds P to 16 bits as the GPU kernels all do.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16] if CUDA else [torch.bfloat16],
                         ids=["bf16", "fp16"] if CUDA else ["bf16"])
@pytest.mark.parametrize("magnitude", [10.0, 100.0], ids=["x10", "x100"])
@pytest.mark.parametrize("d", [32, 64, 128] if CUDA else [32, 64])
def test_peaked_gradient_error_is_no_worse_than_sdpa(dtype, magnitude, d, request):
    gap = KNOWN_GAPS.get((d, magnitude, dtype)) if CUDA else None
    if gap:
        request.applymarker(pytest.mark.xfail(strict=True, reason=gap))
    draws = [_errors(dtype, magnitude, d, i) for i in range(DRAWS)]
    median = {name: [statistics.median(draw[name][j] for draw in draws) for j in range(3)] for name in draws[0]}
    print(f"\n{str(dtype)[6:]} x{magnitude:g} d={d}: " + "; ".join(
        f"{name} dq {e[0]:.2e} dk {e[1]:.2e} dv {e[2]:.2e}" for name, e in median.items()))
    for j, grad in enumerate(("dq", "dk", "dv")):
        anchors = {name: median[name][j] for name in BACKENDS}
        if min(anchors.values()) >= 1.0:
            # the exact gradient lies below every implementation's 16-bit rounding (on the CPU's
            # small shapes at x100 the softmax rows are one-hot to within it): errors of 1e4 times
            # the gradient's norm compare rounding noise, not accuracy
            continue
        assert median["ours"][j] <= SLACK * min(anchors.values()) + 1e-6, (
            f"{grad}: ours {median['ours'][j]:.3e} vs " + ", ".join(f"{n} {e:.3e}" for n, e in anchors.items()))


def test_float32_inputs_recompute_p_from_the_row_max():
    """float32 inputs recompute P from the row max and log2 of the denominator (``EXACT_P``). With
    q, k x 30 at d = 16 (log-sum-exp up to ~4e3, rounded to float32 in steps of 2**-11) the one
    float32 log-sum-exp of the bfloat16 form gives dQ, dK errors of 1.4e-4 / 1.2e-4 against the
    float64 reference here; from (m, log2 l) they are 3.7e-5 / 3.6e-5, the scores' own rounding.
    The inputs are drawn on the CPU for every device: the error depends on the draw (other draws of
    this size give 1e-4 to 4e-4 with either form), so the bounds hold for this draw only."""
    gen = torch.Generator().manual_seed(5)
    q, k, v, grad_out = (torch.randn((1, 2, 64, 16), generator=gen).to(DEVICE) for _ in range(4))
    q, k = q * 30, k * 30
    grads = _grads(flash_attention, q, k, v, grad_out)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    out64, _ = attention_reference(q64, k64, v64)
    out64.backward(grad_out.double())
    for name, got, want, bound in zip(("dq", "dk", "dv"), grads, (q64.grad, k64.grad, v64.grad), (7e-5, 7e-5, 1e-4)):
        assert rel_err(got, want) < bound, (name, rel_err(got, want))
