"""The Hopper Gluon backward (:mod:`kernels.hopper_attention_bwd`) against the float64 reference and
autograd, on an sm_90 GPU with a Triton release the kernels support (elsewhere they cannot run:
skipped with the reason; ``test_hopper_compile.py`` compiles them offline instead). d = 64 and 128,
bfloat16 and float16, ragged and unequal N_q / N_k, causal (bottom-right aligned; with N_q > N_k
some rows see no key), key padding with a fully padded batch entry. O and the row statistics come
from our portable forward (``launch_args.forward``); the portable backward's own error on the same
inputs is the yardstick beside the dtype's tolerance."""
from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import TOL, hopper_inputs, hopper_skip_reason
from kernel_reference import attention_reference, rel_err



pytestmark = pytest.mark.skipif(bool(hopper_skip_reason()), reason=hopper_skip_reason() or "supported")

SHAPES = [(2, 3, 256, 256), (1, 2, 200, 333), (2, 2, 513, 129), (1, 1, 64, 1000)]  # (B, H, N_q, N_k)


def _portable(grad_out, q, k, v, mask, causal, scale):
    """(out, row_stats, (dq, dk, dv)) of our portable kernels."""
    from kernels import launch_args, tiles

    t = tiles.select(q.device, q.dtype, q.shape[-1]).as_list()
    out, row_stats = launch_args.forward(launch_args.eager, q, k, v, mask, None, None, None, causal, 0.0, scale, t)
    grads = launch_args.backward(launch_args.eager, grad_out, None, q, k, v, out, row_stats, mask, None, None, None,
                                 None, None, causal, 0.0, scale, t)
    return out, row_stats, grads


def _check_against_reference(grads, portable, q, k, v, grad_out, mask, causal, scale):
    """``grads`` (dq, dk, dv) against the float64 reference's, within the dtype's tolerance or 1.5x
    the portable backward's own error (``portable``); padded keys and rows that see no key get
    exactly zero."""
    dtype, d = q.dtype, q.shape[-1]
    B, H, n_q, n_k = (*q.shape[:3], k.shape[2])
    qr, kr, vr = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = attention_reference(qr, kr, vr, key_padding_mask=mask, causal=causal, softmax_scale=scale)
    ref.backward(grad_out.double())
    where = f"{dtype} d={d} {(B, H, n_q, n_k)}"
    for name, got, mine, expected in zip(("dq", "dk", "dv"), grads, portable, (qr.grad, kr.grad, vr.grad)):
        assert got.shape == expected.shape and got.dtype == dtype, f"{name} {where}"
        err, yardstick = rel_err(got, expected), rel_err(mine, expected)
        assert err < max(TOL[dtype], 1.5 * yardstick), f"{name} {where}: {err:.2e} (portable {yardstick:.2e})"
    if mask is not None:
        dq, dk, dv = grads
        # padded keys get no gradient; the fully padded entry passes none to its queries
        assert torch.all(dk[mask[:, None, :, None].expand_as(dk)] == 0), where
        assert torch.all(dv[mask[:, None, :, None].expand_as(dv)] == 0), where
        assert torch.all(dq[0] == 0), where
    if causal and n_q > n_k:
        # query rows i < N_q - N_k see no key
        assert torch.all(grads[0][:, :, : n_q - n_k] == 0), where


# the backward's forms: the two-pass kernels (dK/dV single-partition or warp-specialised) and the one-pass one
FORMS = {"two-pass": {}, "two-pass-ws": dict(warp_specialize=True), "one-pass": dict(one_pass=True)}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["nomask", "mask"])
def test_hopper_backward_matches_the_reference(form, dtype, d, causal, padded):
    """Every form against the float64 reference. The warp-specialised dK/dV kernel
    (``warp_specialize=True``) runs the single-partition kernel's instructions on the same tiles,
    only its loads come from a producer partition: the same bits as the plain two-pass form. The
    one-pass form (``one_pass=True``: dQ^T shares from the dK/dV kernel, added atomically into a
    float32 sum; narrower query tiles at d = 128) agrees with it to within rounding."""
    from kernels.hopper_attention_bwd import hopper_backward

    g = torch.Generator(device="cuda").manual_seed(d + 2 * causal + padded)
    scale = 1 / math.sqrt(d)
    for B, H, n_q, n_k in SHAPES:
        q, k, v, grad_out, mask = hopper_inputs(B, H, n_q, n_k, d, dtype, padded, g, grad_out=True)
        out, row_stats, portable = _portable(grad_out, q, k, v, mask, causal, scale)
        grads = hopper_backward(grad_out, q, k, v, out, row_stats, mask, causal, scale, **FORMS[form])
        _check_against_reference(grads, portable, q, k, v, grad_out, mask, causal, scale)
        if form == "two-pass":
            continue
        plain = hopper_backward(grad_out, q, k, v, out, row_stats, mask, causal, scale)
        for name, got, expected in zip(("dq", "dk", "dv"), grads, plain):
            where = f"{name} {dtype} d={d} {(B, H, n_q, n_k)}"
            if form == "two-pass-ws":
                assert torch.equal(got, expected), where
            else:
                assert rel_err(got, expected) < TOL[dtype] / 2, where


def test_hopper_backward_rejects_what_it_cannot_run():
    from kernels.hopper_attention_bwd import hopper_backward

    q = torch.randn(1, 1, 64, 64, device="cuda", dtype=torch.bfloat16)
    stats = torch.zeros(1, 1, 3, 64, device="cuda")
    with pytest.raises(ValueError, match="row_stats"):
        hopper_backward(q, q, q, q, q, stats[:, :, :2])
    with pytest.raises(ValueError, match="head_dim 32"):
        x = q[..., :32]
        hopper_backward(x, x, x, x, x, stats)
    with pytest.raises(ValueError, match="grad_out"):
        hopper_backward(q.float(), q, q, q, q, stats)
    with pytest.raises(ValueError, match="one_pass=True runs the single-partition"):
        hopper_backward(q, q, q, q, q, stats, warp_specialize=True, one_pass=True)


@pytest.mark.parametrize("warp_specialize,overlap,backward_ws,backward_1p",
                         [(False, False, False, False), (True, True, False, False), (True, True, True, False),
                          (True, True, False, True)],
                         ids=["plain", "ws-overlap", "ws-overlap-ws-bwd", "ws-overlap-1p-bwd"])
def test_hopper_flash_attention_gradients_match_autograd_of_the_reference(warp_specialize, overlap, backward_ws,
                                                                          backward_1p):
    """Forward and backward as one differentiable call, on views of a fused projection and with an
    incoming gradient TMA cannot read (a transposed view: copied first)."""
    from kernels.hopper_autograd import hopper_flash_attention

    g = torch.Generator(device="cuda").manual_seed(7)
    B, N, H, d = 2, 384, 2, 64
    qkv = torch.randn(B, N, 3, H, d, device="cuda", generator=g).to(torch.bfloat16).requires_grad_()
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    out = hopper_flash_attention(q, k, v, causal=True, warp_specialize=warp_specialize, overlap=overlap,
                                 backward_warp_specialize=backward_ws, backward_one_pass=backward_1p)
    grad = torch.randn(B, H, d, N, device="cuda", generator=g).to(torch.bfloat16).transpose(-1, -2)
    out.backward(grad)

    ref_qkv = qkv.detach().double().requires_grad_()
    rq, rk, rv = ref_qkv.permute(2, 0, 3, 1, 4).unbind(0)
    ref, _ = attention_reference(rq, rk, rv, causal=True, softmax_scale=1 / math.sqrt(d))
    ref.backward(grad.double())
    assert rel_err(out, ref) < TOL[torch.bfloat16]
    assert rel_err(qkv.grad, ref_qkv.grad) < TOL[torch.bfloat16]
