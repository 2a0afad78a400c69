"""The attentions on a CUDA device: SDPA back-ends with key padding, bf16 autocast, long sequences.

These need a GPU and are skipped without one (CI has none; run them on the GPU machine with
`pytest tests/baselines/test_cuda.py`). Memory checks compare peak allocations with the N x N score
matrix the attention must avoid; there are no timing assertions.
"""
import math

import pytest
import torch

from lra import attention as registry

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PLAIN = {
    "softmax": {},
    "sdpa": {},
    "performer": {},
    "linformer": {},
    "bigbird": {},
}


def reference(q, k, v, key_padding_mask):
    q, k, v = (t.double() for t in (q, k, v))
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(
        key_padding_mask[:, None, None, :], float("-inf")
    )
    return torch.nan_to_num(torch.softmax(scores, -1)) @ v


def inputs(n=1024, b=3, h=4, d=64, dtype=torch.bfloat16, requires_grad=False):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (
        torch.randn(b, h, n, d, device="cuda", generator=gen, dtype=dtype).requires_grad_(requires_grad)
        for _ in range(3)
    )
    mask = torch.zeros(b, n, dtype=torch.bool, device="cuda")
    if b >= 3:  # rows: full, ragged, all padding
        mask[1, n // 2 + 3 :] = True
        mask[2] = True
    return q, k, v, mask


@pytest.mark.parametrize("backend", ["auto", "cudnn", "efficient", "math"])
def test_sdpa_backends_with_key_padding_and_empty_rows(backend):
    ok, reason = registry.can_run("sdpa", "cuda", {"backend": backend})
    if not ok:
        pytest.skip(reason)
    attention = registry.build("sdpa", backend=backend)
    q, k, v, mask = inputs(requires_grad=True)
    out = attention(q, k, v, mask)
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    torch.testing.assert_close(out[:2].double(), reference(q, k, v, mask)[:2], rtol=0.02, atol=0.02)
    out.float().square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_sdpa_flash_backend_refuses_padding_but_runs_unpadded():
    attention = registry.build("sdpa", backend="flash")
    q, k, v, mask = inputs()
    with pytest.raises(ValueError, match="takes no attention mask"):
        attention(q, k, v, mask)
    out = attention(q, k, v, torch.zeros_like(mask))
    torch.testing.assert_close(out.double(), reference(q, k, v, torch.zeros_like(mask)), rtol=0.02, atol=0.02)


@pytest.mark.parametrize("name", ["softmax", "sdpa", "flash"])
def test_exact_attentions_match_reference_in_bf16(name):
    ok, reason = registry.can_run(name, "cuda")
    if not ok:
        pytest.skip(reason)
    attention = registry.build(name, num_heads=4, head_dim=64, max_len=1024).cuda()
    q, k, v, mask = inputs()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = attention(q, k, v, mask)
    torch.testing.assert_close(out.double(), reference(q, k, v, mask), rtol=0.02, atol=0.02)


@pytest.mark.parametrize("name", list(PLAIN))
def test_every_plain_attention_trains_under_bf16_autocast(name):
    attention = registry.build(name, num_heads=4, head_dim=64, max_len=1024, dropout=0.1, **PLAIN[name]).cuda()
    q, k, v, mask = inputs(dtype=torch.float32, requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert torch.isfinite(out).all() and torch.equal(out[2], torch.zeros_like(out[2]))
    out.float().square().mean().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("name", ["performer", "linformer", "bigbird"])
def test_long_sequences_stay_far_below_quadratic_memory(name):
    n, heads, d = 16384, 8, 64
    attention = registry.build(name, num_heads=heads, head_dim=d, max_len=n).cuda()
    q, k, v, mask = inputs(n=n, b=1, h=heads, d=d, requires_grad=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = attention(q, k, v, mask)
    out.float().sum().backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    dense_scores = heads * n * n * 4  # one float32 N x N score matrix per head
    assert extra < dense_scores / 4, f"{name}: {extra / 2**30:.2f} GiB vs {dense_scores / 2**30:.2f} GiB of scores"
