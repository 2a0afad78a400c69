"""Bad input: one clear ValueError/TypeError naming the problem, raised before any kernel launch."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels import BlockSparseLayout, block_sparse_flash_attention, flash_attention, launch_args

from kernel_helpers import DEVICE  # CPU here; on a CUDA machine the same cases run on the GPU


def _qkv(n_q=8, n_k=8, d=16, dtype=torch.float32, batch=1, heads=2):
    return tuple(torch.randn(batch, heads, n, d, dtype=dtype).to(DEVICE) for n in (n_q, n_k, n_k))


@pytest.fixture(autouse=True)
def no_kernel_launch(monkeypatch):
    """Every case here must fail in validation: a launch would be a test failure."""
    def forbidden(*args, **kwargs):
        raise AssertionError("a kernel was launched for bad input")
    monkeypatch.setattr(torch.ops.lra_kernels, "flash_fwd", forbidden)
    monkeypatch.setattr(launch_args, "forward", forbidden)  # the eager paths (kernels.autograd)


q, k, v = _qkv()
CASES = [
    (dict(q=q.cpu().numpy()), TypeError, "q must be a torch.Tensor"),
    (dict(k=k.to_sparse()), TypeError, "k must be a dense (strided) tensor"),
    (dict(q=q[0]), ValueError, "q must have 4 dims"),
    (dict(k=k[:, :, :, None]), ValueError, "k must have 4 dims"),
    (dict(q=q.to(torch.int32)), TypeError, "dtype torch.int32"),
    (dict(q=q.double(), k=k.double(), v=v.double()), TypeError, "float64"),
    (dict(k=k.half()), TypeError, "share one dtype"),
    (dict(v=v.to("meta")), ValueError, "one device"),
    (dict(v=v[:, :, :4]), ValueError, "k and v must have the same shape"),
    (dict(k=_qkv(batch=2)[1], v=_qkv(batch=2)[2]), ValueError, "batch or heads"),
    (dict(k=_qkv(d=32)[1], v=_qkv(d=32)[2]), ValueError, "head_dim 16 but k/v have head_dim 32"),
    (dict(zip("qkv", _qkv(d=129))), ValueError, "head_dim 129 is not supported"),
    # expanded (no memory): one (batch, head) more than CUDA's grid axis holds
    (dict(zip("qkv", (t.expand(32768, 2, 8, 16) for t in _qkv(batch=1)))), ValueError,
     "batch * heads = 32768 * 2 = 65536 exceeds 65535"),
    (dict(zip("qkv", _qkv(n_q=0))), ValueError, "empty input"),
    (dict(key_padding_mask=torch.zeros(1, 8, device=DEVICE)), TypeError, "key_padding_mask must have dtype torch.bool"),
    (dict(key_padding_mask=torch.zeros(8, dtype=torch.bool, device=DEVICE)), ValueError, "key_padding_mask must have shape"),
    (dict(key_padding_mask=torch.zeros(1, 8, dtype=torch.bool, device="meta")), ValueError, "key_padding_mask is on"),
    (dict(key_padding_mask=[[False] * 8]), TypeError, "key_padding_mask must be a bool tensor"),
    (dict(key_padding_mask=torch.zeros(1, 8, dtype=torch.bool, device=DEVICE).to_sparse()), TypeError,
     "key_padding_mask must be a dense (strided) tensor"),
    (dict(dropout_p=1.0), ValueError, "dropout_p must be in [0, 1)"),
    (dict(dropout_p=-0.1), ValueError, "dropout_p must be in [0, 1)"),
    (dict(dropout_p="0.1"), TypeError, "dropout_p must be a float"),
    (dict(softmax_scale=0.0), ValueError, "softmax_scale must be a finite positive"),
    (dict(softmax_scale=float("nan")), ValueError, "softmax_scale must be a finite positive"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(causal=q[0, 0, 0, 0].cpu().numpy() > 0), TypeError, "(numpy.bool"),  # not "must be a bool, got bool"
]


@pytest.mark.parametrize("fn", ["dense", "sparse"])
@pytest.mark.parametrize("change,error,message", CASES, ids=[c[2][:30] for c in CASES])
def test_bad_input(fn, change, error, message):
    args = dict(q=q, k=k, v=v)
    args.update(change)
    tensors = [args.pop(n) for n in "qkv"]
    with pytest.raises(error) as info:
        if fn == "dense":
            flash_attention(*tensors, **args)
        else:
            block_sparse_flash_attention(*tensors, torch.ones(1, 1, dtype=torch.bool, device=DEVICE), block_size=32,
                                         **args)
    assert message in str(info.value)


LAYOUT_CASES = [
    (torch.ones(1, 1, device=DEVICE), 32, TypeError, "torch.bool"),
    ([[True]], 32, TypeError, "layout must be"),
    (torch.ones(1, 1, dtype=torch.bool, device=DEVICE).to_sparse(), 32, TypeError, "dense (strided)"),
    (torch.ones(2, 1, dtype=torch.bool, device=DEVICE), 32, ValueError, "blocks"),
    (torch.ones(1, 1, 1, 1, dtype=torch.bool, device=DEVICE), 32, ValueError, "dims"),
    (torch.ones(3, 1, 1, dtype=torch.bool, device=DEVICE), 32, ValueError, "heads"),
    (torch.ones(1, 1, dtype=torch.bool, device="meta"), 32, ValueError, "layout is on"),
    (torch.ones(1, 1, dtype=torch.bool, device=DEVICE), 48, ValueError, "block_size must be one of"),
    (torch.ones(1, 1, dtype=torch.bool, device=DEVICE), 32.0, TypeError, "block_size must be an int"),
    (BlockSparseLayout.from_dense(torch.ones(1, 1, dtype=torch.bool, device=DEVICE), 64), 32, ValueError,
     "built for block_size=64"),
    (BlockSparseLayout.from_dense(torch.ones(2, 2, dtype=torch.bool, device=DEVICE), 32), 32, ValueError, "blocks"),
]


@pytest.mark.parametrize("layout,block_size,error,message", LAYOUT_CASES, ids=[c[3][:25] for c in LAYOUT_CASES])
def test_bad_layout(layout, block_size, error, message):
    with pytest.raises(error) as info:
        block_sparse_flash_attention(q, k, v, layout, block_size=block_size)
    assert message in str(info.value)


def test_dropout_helper_validates():
    with pytest.raises(ValueError, match="dropout_p"):
        kernels.dropout_keep_mask(q, k, 1.5)
    with pytest.raises(TypeError, match="seed"):
        kernels.dropout_keep_mask(q, k, 0.5, seed=3)


def test_sparse_tensor_block_sparse_layout_object():
    with pytest.raises(TypeError, match=r"dense \(strided\)"):
        BlockSparseLayout.from_dense(torch.ones(1, 1, dtype=torch.bool, device=DEVICE).to_sparse(), 32)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU tensors with compiled kernels: a machine without CUDA")
def test_cpu_inputs_without_the_interpreter_get_one_clear_error():
    """TRITON_INTERPRET=0 on a machine without CUDA: the kernels are compiled for the GPU and cannot take CPU
    tensors; validation says so instead of Triton's "0 active drivers" RuntimeError at launch."""
    code = ("import torch, kernels\n"
            "q = torch.randn(1, 1, 8, 16)\n"
            "for call in (lambda: kernels.flash_attention(q, q, q),\n"
            "             lambda: kernels.block_sparse_flash_attention(q, q, q, torch.ones(1, 1, dtype=torch.bool),\n"
            "                                                          block_size=16)):\n"
            "    try:\n"
            "        call()\n"
            "    except ValueError as e:\n"
            "        assert 'TRITON_INTERPRET=1' in str(e), e\n"
            "    else:\n"
            "        raise AssertionError('no error')\n"
            "print('ok')\n")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(root))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
