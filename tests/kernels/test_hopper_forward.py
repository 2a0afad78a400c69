"""The Hopper Gluon forward (:mod:`kernels.hopper_attention`) against the float64 reference, on an sm_90
GPU with a Triton release the kernel supports (elsewhere the module cannot run: skipped with the
reason; ``test_hopper_compile.py`` compiles it offline instead). Every schedule (warp-specialised,
single-partition or ping-pong, with or without the softmax / PV overlap), d = 64 and 128, ragged and
unequal N_q / N_k, causal, key padding with a fully padded batch entry (out 0, lse -inf)."""
from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import hopper_skip_reason
from kernel_reference import attention_reference, rel_err



pytestmark = pytest.mark.skipif(bool(hopper_skip_reason()), reason=hopper_skip_reason() or "supported")

# (warp_specialize, overlap, pingpong)
SCHEDULES = [(False, False, False), (False, True, False), (True, False, False), (True, True, False),
             (True, False, True), (True, True, True)]
SHAPES = [(2, 3, 256, 256), (1, 2, 200, 333), (2, 2, 513, 129), (1, 1, 64, 1000)]  # (B, H, N_q, N_k)


@pytest.mark.parametrize("warp_specialize,overlap,pingpong", SCHEDULES,
                         ids=["plain", "overlap", "ws", "ws-overlap", "pp", "pp-overlap"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["nomask", "mask"])
def test_hopper_forward_matches_the_reference(warp_specialize, overlap, pingpong, d, causal, padded):
    dtypes = (torch.bfloat16, torch.float16) if (warp_specialize and overlap) else (torch.bfloat16,)
    _check_against_the_reference(d, causal, padded, dtypes, warp_specialize=warp_specialize, overlap=overlap,
                                 pingpong=pingpong)


def _check_against_the_reference(d, causal, padded, dtypes, **schedule):
    from kernels.hopper_attention import hopper_forward

    g = torch.Generator(device="cuda").manual_seed(d)
    for dtype in dtypes:
        for B, H, n_q, n_k in SHAPES:
            q = torch.randn(B, H, n_q, d, device="cuda", generator=g).to(dtype)
            k = torch.randn(B, H, n_k, d, device="cuda", generator=g).to(dtype)
            v = torch.randn(B, H, n_k, d, device="cuda", generator=g).to(dtype)
            mask = None
            if padded:
                mask = torch.rand(B, n_k, device="cuda", generator=g) < 0.3
                mask[0] = True  # a batch entry with every key padded
            out, row_stats = hopper_forward(q, k, v, mask, causal, None, **schedule)
            lse, row_max, log2_l = row_stats.double().unbind(2)
            ref, ref_lse = attention_reference(q, k, v, key_padding_mask=mask, causal=causal,
                                               softmax_scale=1 / math.sqrt(d))
            where = f"{dtype} {(B, H, n_q, n_k)}"
            assert rel_err(out, ref) < 1e-2, where
            seen = torch.isfinite(ref_lse)
            assert torch.equal(torch.isneginf(lse), ~seen), where
            assert torch.all(out[~seen] == 0), where
            assert torch.all(torch.isposinf(row_max[~seen])) and torch.all(log2_l[~seen] == 0), where
            if seen.any():
                assert (lse[seen] - ref_lse[seen]).abs().max() < 1e-2, where
                # the row statistics the backward reads: lse = (m * scale * log2(e) + log2(l)) * ln(2)
                combined = (row_max * math.log2(math.e) / math.sqrt(d) + log2_l) * math.log(2)
                assert (combined[seen] - lse[seen]).abs().max() < 1e-3, where


@pytest.mark.parametrize("overlap", [False, True], ids=["plain", "overlap"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_hopper_pingpong_matches_the_warp_specialised_schedule_exactly(overlap, causal):
    """Each ping-pong consumer runs the 8-warp consumer's instructions on its 64 rows (same tiles,
    masks and wgmma shapes per warpgroup); only the issue order between the warpgroups differs, so
    out and the row statistics are bit-identical."""
    from kernels.hopper_attention import hopper_forward

    g = torch.Generator(device="cuda").manual_seed(7)
    for d in (64, 128):
        for B, H, n_q, n_k in SHAPES:
            q, k, v = (torch.randn(B, H, n, d, device="cuda", generator=g).to(torch.bfloat16)
                       for n in (n_q, n_k, n_k))
            mask = torch.rand(B, n_k, device="cuda", generator=g) < 0.3
            ws = hopper_forward(q, k, v, mask, causal, None, overlap=overlap)
            pp = hopper_forward(q, k, v, mask, causal, None, overlap=overlap, pingpong=True)
            assert torch.equal(ws[0], pp[0]) and torch.equal(ws[1], pp[1]), f"d={d} {(B, H, n_q, n_k)}"


def test_hopper_pingpong_needs_warp_specialisation():
    from kernels.hopper_attention import hopper_forward

    q = torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="warp_specialize"):
        hopper_forward(q, q, q, warp_specialize=False, pingpong=True)
