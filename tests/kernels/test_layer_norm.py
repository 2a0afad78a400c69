"""kernels.layer_norm: the Triton LayerNorm (forward, backward, module) against float64 references.

On CPU through the interpreter; unchanged on a GPU (``DEVICE``), plus one test at the paper batch."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from kernel_helpers import DEVICE
from kernel_reference import rel_err
from torch import nn

from kernels import layer_norm as ln
from kernels.layer_norm import LayerNorm, LayerNormFunction, layer_norm

# ||got - want|| / ||want|| bounds: the kernel computes in float32, the result is rounded to dtype
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
LEADING = {1: (), 37: (37,), 300: (3, 100)}  # rows -> leading shape (ranks 1 to 3 with the last dim)


def _inputs(rows, d, dtype, *, seed=0, affine=(True, True), device=DEVICE):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*LEADING[rows], d, generator=g) * 2 + 0.5).to(device, dtype).requires_grad_()
    w = (torch.randn(d, generator=g) + 1).to(device, dtype).requires_grad_() if affine[0] else None
    b = torch.randn(d, generator=g).to(device, dtype).requires_grad_() if affine[1] else None
    return x, w, b


def _err(got, want) -> float:
    """||got - want|| / ||want|| with the reference's norm floored at 1e-6: for D = 1 the exact
    gradients of x and w are 0 (the kernel gives exactly 0, float64 autograd ~1e-15). NaN fails."""
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    return (got - want).norm().item() / max(want.norm().item(), 1e-6)


def _check(x, w, b, *, eps=1e-5, out_dtype=None, tol=None, run=None):
    """Kernel forward and backward (a random dy) vs float64 F.layer_norm autograd on the same values."""
    tol = tol if tol is not None else TOL[x.dtype]
    d = x.shape[-1]
    y = run(x, w, b, eps) if run else layer_norm(x, w, b, eps)
    assert y.shape == x.shape and y.dtype == (out_dtype or x.dtype)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).to(y.device, y.dtype)
    y.backward(dy)
    ref_in = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b)]
    ref = F.layer_norm(ref_in[0], (d,), ref_in[1], ref_in[2], eps)
    ref.backward(dy.double())
    assert _err(y, ref) < tol, ("y", _err(y, ref))
    for name, t, r in zip(("dx", "dw", "db"), (x, w, b), ref_in):
        if t is None:
            continue
        assert t.grad is not None and t.grad.dtype == t.dtype and t.grad.shape == t.shape, name
        assert _err(t.grad, r.grad) < tol, (name, _err(t.grad, r.grad))
    return y


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 48, 100, 1])
@pytest.mark.parametrize("rows", [1, 37, 300])
def test_forward_backward_match_float64_reference(rows, d, dtype):
    _check(*_inputs(rows, d, dtype, seed=rows + d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_column_input_gradient_is_exactly_zero(dtype):
    """D = 1: y = b whatever x is, so dx is exactly 0 (F.layer_norm's too). On the H200 the kernel
    gave |dx| ~ ulp(dy * w) / sqrt(eps) there (the compiler fused g - mean(g) into an FMA)."""
    x, w, b = _inputs(300, 1, dtype, seed=3)
    y = layer_norm(x, w, b, 1e-5)
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.device, y.dtype))
    assert torch.equal(x.grad, torch.zeros_like(x)), x.grad.abs().max()
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.isfinite(b.grad).all()


def test_tiles_and_grid_stride_cover_ragged_rows():
    """Rows not a multiple of the tile; more tiles than backward programs (each program loops)."""
    d = 64
    _, fwd_rows, _ = ln.fwd_config(d)
    _, bwd_rows, _ = ln.bwd_config(d)
    rows = 7 * bwd_rows + 5
    assert rows % fwd_rows and rows % bwd_rows
    if DEVICE.type == "cpu":
        assert ln.bwd_programs(DEVICE, 8) < 8
    x = torch.randn(rows, d, device=DEVICE).requires_grad_()
    w, b = (torch.randn(d, device=DEVICE).requires_grad_() for _ in range(2))
    _check(x, w, b)


@pytest.mark.parametrize("affine", [(False, False), (True, False), (False, True)])
def test_weight_and_bias_optional(affine):
    _check(*_inputs(37, 48, torch.float32, affine=affine))


def test_only_the_gradients_asked_for():
    x, w, b = _inputs(37, 64, torch.float32)
    x.requires_grad_(False)
    layer_norm(x, w, b).sum().backward()
    assert x.grad is None and w.grad is not None and b.grad is not None
    x, w, b = _inputs(37, 64, torch.float32)
    w.requires_grad_(False)
    layer_norm(x, w, b).square().sum().backward()
    assert w.grad is None and x.grad is not None and b.grad is not None
    _, w, b = _inputs(37, 64, torch.float32)
    x = torch.randn(37, 64, device=DEVICE)
    w.requires_grad_(False), b.requires_grad_(False)
    assert not layer_norm(x, w, b).requires_grad


def test_non_contiguous_input_and_gradient():
    x = torch.randn(10, 64, device=DEVICE)[:, ::2].requires_grad_()  # (10, 32), stride 2 in the last dim
    assert not x.is_contiguous()
    w, b = (torch.randn(32, device=DEVICE).requires_grad_() for _ in range(2))
    # the output transposed twice: its gradient arrives non-contiguous too
    _check(x, w, b, run=lambda x, w, b, eps: layer_norm(x, w, b, eps).t().contiguous().t())
    x = torch.randn(4, 6, 24, device=DEVICE).transpose(0, 1).requires_grad_()  # rows not in memory order
    _check(x, torch.randn(24, device=DEVICE).requires_grad_(), None)


def test_strided_and_expanded_weight_and_bias():
    """The kernels read weight and bias as contiguous (D,) arrays: a strided view or an expanded (stride-0)
    parameter must be read by its values, not past its storage, and its gradient flow back through the view."""
    x = torch.randn(37, 24, device=DEVICE).requires_grad_()
    w = (torch.randn(48, device=DEVICE) + 1)[::2].detach().requires_grad_()  # stride 2
    assert not w.is_contiguous()
    _check(x, w, torch.randn(72, device=DEVICE)[::3].detach().requires_grad_())  # bias: stride 3
    w0, b0 = torch.randn(1, device=DEVICE).requires_grad_(), torch.randn(1, device=DEVICE).requires_grad_()
    x = torch.randn(37, 24, device=DEVICE).requires_grad_()
    y = layer_norm(x, w0.expand(24), b0.expand(24))
    ref_in = [t.detach().double().requires_grad_() for t in (x, w0, b0)]
    ref = F.layer_norm(ref_in[0], (24,), ref_in[1].expand(24), ref_in[2].expand(24))
    assert _err(y, ref) < TOL[torch.float32]
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).to(DEVICE)
    y.backward(dy)
    ref.backward(dy.double())
    for name, t, r in zip(("dx", "dw", "db"), (x, w0, b0), ref_in):
        assert _err(t.grad, r.grad) < TOL[torch.float32], (name, _err(t.grad, r.grad))


def test_double_backward_raises_instead_of_dropping_terms():
    """The backward kernels are not differentiable: create_graph=True must not give a gradient graph that
    silently misses the second-order terms (F.layer_norm's has them)."""
    x = torch.randn(4, 8, device=DEVICE).requires_grad_()
    (g,) = torch.autograd.grad(layer_norm(x).pow(3).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.square().sum().backward()


def test_sixteen_bit_input_with_float32_output_and_parameters():
    """What CUDA autocast gives: bf16 activations, float32 parameters, float32 output."""
    x, _, _ = _inputs(37, 64, torch.bfloat16)
    w, b = (torch.randn(64, device=DEVICE).requires_grad_() for _ in range(2))
    _check(x, w, b, out_dtype=torch.float32,
           run=lambda x, w, b, eps: LayerNormFunction.apply(x, w, b, eps, torch.float32))
    assert w.grad.dtype == torch.float32 and x.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_dtype_under_autocast_is_f_layer_norms(dtype):
    """CPU autocast leaves layer_norm alone (x's dtype), CUDA autocast runs it in float32."""
    x, w, b = _inputs(37, 64, dtype)
    w32, b32 = (t.detach().float() for t in (w, b))
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        y = layer_norm(x, w32, b32)
        ref = F.layer_norm(x, (64,), w32, b32)
    assert y.dtype == ref.dtype
    assert rel_err(y, ref) < TOL[ref.dtype]


def test_wide_rows_and_empty_input_go_to_f_layer_norm(monkeypatch):
    def fail(*args):
        raise AssertionError("kernel called")

    monkeypatch.setattr(LayerNormFunction, "apply", fail)
    d = ln.MAX_D + 1
    x, w, b = (torch.randn(*shape, device=DEVICE) for shape in ((2, d), (d,), (d,)))
    torch.testing.assert_close(layer_norm(x, w, b), F.layer_norm(x, (d,), w, b))
    assert layer_norm(torch.randn(0, 64, device=DEVICE), torch.ones(64, device=DEVICE), None).shape == (0, 64)


def test_bad_input_raises_value_error():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"weight must have shape \(8,\)"):
        layer_norm(x, torch.ones(9))
    with pytest.raises(ValueError, match=r"bias must have shape \(8,\)"):
        layer_norm(x, torch.ones(8), torch.ones(2, 4))
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16, got torch.int64"):
        layer_norm(torch.ones(4, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="x must be float32, bfloat16 or float16, got torch.float64"):
        layer_norm(x.double())
    with pytest.raises(ValueError, match="weight must be float32"):
        layer_norm(x, torch.ones(8, dtype=torch.int32))
    with pytest.raises(ValueError, match="x is on cpu but weight is on meta"):
        layer_norm(x, torch.ones(8, device="meta"))
    with pytest.raises(ValueError, match="last dimension of size >= 1"):
        layer_norm(torch.randn(4, 0))
    with pytest.raises(ValueError, match="x must be a tensor"):
        layer_norm([1.0, 2.0])
    with pytest.raises(ValueError, match=r"x must be a dense \(strided\) tensor"):
        layer_norm(x.to_sparse())
    with pytest.raises(ValueError, match=r"bias must be a dense \(strided\) tensor"):
        layer_norm(x, None, torch.ones(8).to_sparse())
    for eps in (None, -1e-5, float("nan"), "1e-5", True):
        with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
            layer_norm(x, eps=eps)


# --- the module -------------------------------------------------------------------------------------


def test_module_is_a_drop_in_nn_layer_norm():
    ours, theirs = LayerNorm(48, eps=1e-6), nn.LayerNorm(48, eps=1e-6)
    assert isinstance(ours, nn.LayerNorm)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight", "bias"]
    theirs.weight.data.normal_()
    ours.load_state_dict(theirs.state_dict())  # strict: checkpoints load both ways
    theirs.load_state_dict(ours.state_dict())
    assert ours.eps == 1e-6 and ours.normalized_shape == (48,)


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the kernel's autograd Function calls (still running it)."""
    calls = []
    original = LayerNormFunction.apply

    def spy(*args):
        calls.append(args[0].shape)
        return original(*args)

    monkeypatch.setattr(LayerNormFunction, "apply", spy)
    return calls


def _module_and_input(device=DEVICE, **kwargs):
    torch.manual_seed(0)
    m = LayerNorm(48, **kwargs).to(device)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    return m, torch.randn(3, 5, 48, device=device, requires_grad=True)


@pytest.mark.parametrize("backend", [None, "auto", "torch"])
def test_module_uses_f_layer_norm_on_cpu_unless_forced(kernel_calls, backend):
    m, x = _module_and_input("cpu", **({} if backend is None else {"backend": backend}))
    assert m.backend == (backend or "auto")
    y = m(x)
    y.sum().backward()
    torch.testing.assert_close(y, F.layer_norm(x, (48,), m.weight, m.bias, m.eps))
    assert kernel_calls == []


def test_module_forced_kernel_matches_f_layer_norm(kernel_calls):
    m, x = _module_and_input(backend="triton")
    dy = torch.randn(3, 5, 48, device=DEVICE)
    y = m(x)
    y.backward(dy)
    grads = [t.grad.clone() for t in (x, m.weight, m.bias)]
    assert kernel_calls == [(3, 5, 48)]
    for t in (x, m.weight, m.bias):
        t.grad = None
    ref = F.layer_norm(x, (48,), m.weight, m.bias, m.eps)
    ref.backward(dy)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    for got, t in zip(grads, (x, m.weight, m.bias)):
        torch.testing.assert_close(got, t.grad, rtol=1e-5, atol=1e-5)


def test_module_forced_falls_back_where_the_kernel_does_not_apply(kernel_calls):
    LayerNorm(16, elementwise_affine=False, backend="triton")(torch.randn(2, 16, device=DEVICE))
    LayerNorm((4, 16), backend="triton").to(DEVICE)(torch.randn(2, 4, 16, device=DEVICE))
    LayerNorm(16, backend="triton").to(DEVICE, torch.float64)(torch.randn(2, 16, device=DEVICE, dtype=torch.float64))
    assert kernel_calls == []


def test_auto_mode_takes_the_kernel_for_large_cuda_inputs_only():
    """auto: the GPU-bound paper batch (262,144 x 64) takes the kernel; the host-bound small batch
    (32,768 x 64) and every CPU input keep F.layer_norm."""
    assert ln.auto_uses_kernel("cuda", 262_144 * 64)
    assert not ln.auto_uses_kernel("cuda", 32_768 * 64)
    assert ln.auto_uses_kernel("cuda", ln.AUTO_MIN_ELEMENTS) and not ln.auto_uses_kernel("cuda", ln.AUTO_MIN_ELEMENTS - 1)
    assert not ln.auto_uses_kernel("cpu", 262_144 * 64)


def test_module_rejects_unknown_backend():
    with pytest.raises(ValueError, match="backend='fast'; use one of auto, torch, triton"):
        LayerNorm(8, backend="fast")


def test_paper_like_model_same_loss_and_gradients_with_the_kernel(kernel_calls):
    """The `paper` model's shape (pre-LN blocks, final LN, mean pooling), tiny dims, softmax attention."""
    from lra.config import ModelConfig
    from lra.model import DataSpec, build_model

    cfg = ModelConfig(dim=32, depth=2, num_heads=2, head_dim=16, mlp_dim=64, dropout=0.0, attention_dropout=0.0,
                      positional="learned", grid_positions=False, pooling="mean")
    spec = DataSpec(vocab_size=20, num_classes=3, max_len=24)
    torch.manual_seed(0)
    model = build_model(cfg, spec, attention="softmax", seed=0).to(DEVICE).train()
    norms = [name for name, mod in model.named_modules() if isinstance(mod, nn.LayerNorm)]
    assert norms == ["encoder.blocks.0.norm1", "encoder.blocks.0.norm2", "encoder.blocks.1.norm1",
                     "encoder.blocks.1.norm2", "encoder.norm"]
    assert all(isinstance(model.get_submodule(n), LayerNorm) for n in norms)
    ids = torch.randint(0, 20, (3, 24), generator=torch.Generator().manual_seed(1)).to(DEVICE)
    mask = torch.zeros(3, 24, dtype=torch.bool, device=DEVICE)
    mask[1, 20:] = True
    labels = torch.tensor([0, 2, 1], device=DEVICE)

    def loss_and_grads(backend):
        m = copy.deepcopy(model)
        for name in norms:
            m.get_submodule(name).backend = backend
        loss = F.cross_entropy(m(ids, mask), labels)
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in m.named_parameters()}

    loss_t, grads_t = loss_and_grads("torch")
    assert kernel_calls == []
    loss_k, grads_k = loss_and_grads("triton")
    assert len(kernel_calls) == 5
    torch.testing.assert_close(loss_k, loss_t, rtol=1e-5, atol=1e-6)
    assert grads_k.keys() == grads_t.keys()
    for name in grads_t:
        assert rel_err(grads_k[name], grads_t[name]) < 1e-4, name
    assert [model.get_submodule(n).autocast_output for n in norms] == [True, True, True, True, False]


def test_autocast_output_writes_autocast_dtype_with_the_casts_values():
    """autocast_output: under autocast the kernel writes autocast's dtype, equal to F.layer_norm's
    output cast to it (what the next Linear would have done); its gradient is the same as through
    the cast; without autocast nothing changes."""
    x, w, b = _inputs(37, 64, torch.float32)
    dy = torch.randn(37, 64, device=DEVICE).bfloat16()
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        y = layer_norm(x, w, b, autocast_output=True)
        ref = F.layer_norm(x, (64,), w, b).to(torch.bfloat16)
    assert y.dtype == torch.bfloat16
    assert (y.float() - ref.float()).abs().max() <= 2 ** -7 * ref.float().abs().max()  # within a bf16 step
    y.backward(dy)
    got = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    F.layer_norm(x, (64,), w, b).to(torch.bfloat16).backward(dy)
    for g, t in zip(got, (x, w, b)):
        assert rel_err(g, t.grad) < 1e-5
    assert layer_norm(x, w, b, autocast_output=True).dtype == torch.float32   # autocast off


def test_module_autocast_output_only_on_the_kernel_path():
    m = LayerNorm(64, autocast_output=True, backend="triton").to(DEVICE)
    x = torch.randn(5, 64, device=DEVICE)
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        assert m(x).dtype == torch.bfloat16
    m.backend = "torch"
    with torch.autocast(DEVICE.type, dtype=torch.bfloat16):
        assert m(x).dtype == F.layer_norm(x, (64,)).dtype


def test_model_state_dict_keys_unchanged(monkeypatch):
    """The model's checkpoint keys and shapes are those it had with nn.LayerNorm."""
    import lra.model as model_module
    from lra.config import ModelConfig
    from lra.model import DataSpec, build_model

    cfg = ModelConfig(dim=16, depth=2, num_heads=2, head_dim=8, mlp_dim=32)
    spec = DataSpec(vocab_size=11, num_classes=4, max_len=12)
    ours = build_model(cfg, spec, attention="softmax").state_dict()
    monkeypatch.setattr(model_module, "LayerNorm",
                        lambda *args, autocast_output=False, **kwargs: nn.LayerNorm(*args, **kwargs))
    theirs = build_model(cfg, spec, attention="softmax").state_dict()
    assert [(k, v.shape) for k, v in ours.items()] == [(k, v.shape) for k, v in theirs.items()]
    assert "encoder.blocks.0.norm1.weight" in ours and "encoder.norm.bias" in ours


def test_kernels_compile_for_hopper_front_end():
    """Triton's real compiler front end for sm_90 (no GPU): the interpreter accepts more."""
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "kernels.compile_check", "--full", "--kernels", "ln_fwd,ln_bwd"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count(" ok ") == 40 and proc.stdout.count("ln_bwd") == 20


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_paper_batch_under_bf16_autocast(kernel_calls):
    """The profiled case: 262,144 rows of 64, bf16 activations, float32 parameters, bf16 autocast."""
    torch.manual_seed(0)
    m = LayerNorm(64).cuda()
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    x = (torch.randn(256, 1024, 64, device="cuda") * 3 + 1).bfloat16().requires_grad_()
    dy = torch.randn(256, 1024, 64, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
        ref = F.layer_norm(x, (64,), m.weight, m.bias, m.eps)
    assert kernel_calls == [(256, 1024, 64)]
    assert y.dtype == ref.dtype == torch.float32
    y.backward(dy)
    grads = [t.grad.clone() for t in (x, m.weight, m.bias)]
    for t in (x, m.weight, m.bias):
        t.grad = None
    ref.backward(dy)
    assert rel_err(y, ref) < 1e-5
    assert grads[0].dtype == torch.bfloat16 and rel_err(grads[0], x.grad) < 1e-2
    assert rel_err(grads[1], m.weight.grad) < 1e-4 and rel_err(grads[2], m.bias.grad) < 1e-4
