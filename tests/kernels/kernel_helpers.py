"""Shared helpers of the kernel tests: random inputs, running kernel vs reference, tolerances."""
from __future__ import annotations

import contextlib

import torch

from kernel_reference import attention_reference, rel_err

# the suite runs on CPU through the interpreter, and unchanged on a GPU (a quick on-device check)
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")

# relative-error bounds (||x - ref|| / ||ref||) per dtype; the interpreter's float32 dot is exact IEEE
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


def make_qkv(batch, heads, n_q, n_k, d, dtype, *, seed=0, requires_grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, n_q, d, generator=g).to(dtype)
    k = torch.randn(batch, heads, n_k, d, generator=g).to(dtype)
    v = torch.randn(batch, heads, n_k, d, generator=g).to(dtype)
    return tuple(x.to(DEVICE).requires_grad_(requires_grad) for x in (q, k, v))


def hopper_inputs(B, H, n_q, n_k, d, dtype, padded, g, *, grad_out=False):
    """The Hopper kernel tests' inputs on CUDA, drawn in this order from ``g``: q (B, H, n_q, d), k and v
    (B, H, n_k, d) standard normal in ``dtype``, with ``grad_out`` an incoming gradient like q, and with
    ``padded`` a key padding mask (about 30 % of the keys; batch entry 0 entirely). Returns (q, k, v,
    mask), or (q, k, v, grad_out, mask)."""
    q = torch.randn(B, H, n_q, d, device="cuda", generator=g).to(dtype)
    k = torch.randn(B, H, n_k, d, device="cuda", generator=g).to(dtype)
    v = torch.randn(B, H, n_k, d, device="cuda", generator=g).to(dtype)
    dout = torch.randn(B, H, n_q, d, device="cuda", generator=g).to(dtype) if grad_out else None
    mask = None
    if padded:
        mask = torch.rand(B, n_k, device="cuda", generator=g) < 0.3
        mask[0] = True  # a batch entry with every key padded
    return (q, k, v, dout, mask) if grad_out else (q, k, v, mask)


def check_against_reference(fn, q, k, v, *, ref_kwargs=None, tol=None, grad_seed=1, **kwargs):
    """Runs fn(q, k, v, **kwargs), backpropagates a random dO and compares out, dq, dk, dv with the
    float64 reference (ref_kwargs go to attention_reference). Returns the kernel output."""
    tol = tol if tol is not None else TOL[q.dtype]
    for x in (q, k, v):
        x.grad = None
    out = fn(q, k, v, **kwargs)
    assert out.shape == q.shape and out.dtype == q.dtype
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(q.device, q.dtype)
    out.backward(grad)
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = attention_reference(qr, kr, vr, **(ref_kwargs or {}))
    ref.backward(grad.double())
    for name, got, want in (("out", out, ref), ("dq", q.grad, qr.grad), ("dk", k.grad, kr.grad),
                            ("dv", v.grad, vr.grad)):
        err = rel_err(got, want)
        assert err < tol, f"{name}: relative error {err:.3g} >= {tol:g}"
    return out



@contextlib.contextmanager
def deterministic():
    """torch's deterministic algorithms on (warnings only) inside the block: calls with dropout take
    the two-pass (split) backward instead of the one-pass one (kernels.dropout.fused_backward)."""
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


def hopper_skip_reason() -> str:
    """Why the Hopper Gluon kernels cannot run here ("" when they can): no CUDA device, not sm_90,
    or a Triton release they were not built for (:func:`kernels.hopper_support.supported`)."""
    if not torch.cuda.is_available():
        return "needs an sm_90 GPU"
    import triton

    from kernels.hopper_support import supported
    ok, why = supported(triton.__version__, torch.cuda.get_device_capability(), torch.bfloat16, 64)
    return "" if ok else why
