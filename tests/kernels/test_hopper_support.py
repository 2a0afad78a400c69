"""kernels.hopper_support: which calls may take the Hopper Gluon kernels, and which eager forwards do (pure
Python, no GPU)."""
from __future__ import annotations

import pytest

from kernels.hopper_support import FORWARD_TILE, device_supported, supported, takes_hopper_forward, triton_version_ok

CONTIGUOUS = (4 * 256 * 64, 256 * 64, 64, 1)  # (B, H, N, d) = (*, 4, 256, 64)
OK_ARGS = dict(strides=(CONTIGUOUS,) * 3, data_ptrs=(0, 4096, 8192))


@pytest.mark.parametrize("version, ok", [("3.6.0", True), ("3.6.1+git1234", True), ("3.9.0", True),
                                         ("3.5.1", False), ("3.7.0", False), ("4.0.0", False), ("dev", False)])
def test_triton_version_gate(version, ok):
    assert triton_version_ok(version)[0] is ok
    assert supported(version, (9, 0), "bfloat16", 64, **OK_ARGS)[0] is ok


def test_supported_call():
    assert supported("3.6.0", (9, 0), "torch.bfloat16", 64, **OK_ARGS) == (True, "")
    assert supported("3.6.0", None, "float16", 128) == (True, "")  # offline: no device check


@pytest.mark.parametrize("changes, words", [
    (dict(capability=(8, 0)), "sm_90"),
    (dict(capability=(10, 0)), "sm_90"),
    (dict(dtype="float32"), "float32"),
    (dict(head_dim=32), "head_dim 32"),
    (dict(strides=(CONTIGUOUS, (64, 64, 1, 256), CONTIGUOUS)), "last dim contiguous"),
    # a (B, H, N, d) view of a (B, N, H, d) tensor is fine; a head dim of odd stride 36 is not
    (dict(strides=(CONTIGUOUS, CONTIGUOUS, (256 * 4 * 36, 36, 4 * 36 + 2, 1))), "16-byte aligned strides"),
    (dict(data_ptrs=(0, 4098, 8192)), "16-byte aligned base"),
])
def test_unsupported_calls_give_a_reason(changes, words):
    args = dict(triton_version="3.6.0", capability=(9, 0), dtype="bfloat16", head_dim=64, **OK_ARGS)
    args.update(changes)
    ok, why = supported(**args)
    assert not ok and words in why, why


def test_transposed_heads_view_is_supported():
    """q of a (B, N, H, d) projection viewed as (B, H, N, d): strides (N*H*d, d, H*d, 1)."""
    strides = (256 * 4 * 64, 64, 4 * 64, 1)
    assert supported("3.6.0", (9, 0), "bfloat16", 64, strides=(strides,) * 3)[0]


def test_reasons_name_the_backward_tensors():
    """The backward checks grad_out beside q, k, v and names it in the reason."""
    bad = (256 * 4 * 36, 36, 4 * 36 + 2, 1)
    ok, why = supported("3.6.0", (9, 0), "bfloat16", 64, strides=(CONTIGUOUS,) * 3 + (bad,),
                        names=("q", "k", "v", "grad_out"))
    assert not ok and why.startswith("grad_out:"), why


def test_launch_argument_checks_name_the_problem():
    """The Hopper launchers' shared argument checks (run on any machine with a Triton that has Gluon)."""
    import torch

    hopper = pytest.importorskip("kernels.hopper_common", reason="this Triton has no Gluon")
    assert hopper.softmax_scale_of(64, None) == pytest.approx(0.125) and hopper.softmax_scale_of(64, 0.5) == 0.5
    with pytest.raises(ValueError, match="softmax_scale must be > 0"):
        hopper.softmax_scale_of(64, 0.0)
    placeholder = torch.zeros(1)
    assert hopper.padding_args(None, 2, 5, placeholder) == (placeholder, 0, 0)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    assert hopper.padding_args(mask, 2, 5, placeholder) == (mask, 5, 1)
    for bad in (torch.zeros(2, 5), torch.zeros(2, 4, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"key_padding_mask must be bool \(B, N_k\) = \(2, 5\)"):
            hopper.padding_args(bad, 2, 5, placeholder)


def test_tma_descriptors_take_the_tensors_shape_and_strides_and_the_wgmma_shared_layout():
    """A descriptor per tensor (its own shape and strides: views are read in place) with the block
    (1, 1, rows, d) in the NVMMA shared layout of its dtype, the layout computed once per block."""
    import torch

    hopper = pytest.importorskip("kernels.hopper_common", reason="this Triton has no Gluon")
    gl = hopper.gl
    qkv = torch.empty(2, 256, 3, 4, 64, dtype=torch.bfloat16)
    k = qkv.permute(2, 0, 3, 1, 4)[1]   # (B, H, N, d) view of a fused projection
    desc = hopper.tma_descriptor(k, 128)
    assert (desc.shape, desc.strides, desc.block_shape) == ([2, 4, 256, 64], list(k.stride()), [1, 1, 128, 64])
    assert desc.layout == gl.NVMMASharedLayout.get_default_for([1, 1, 128, 64], gl.bfloat16)
    half = hopper.tma_descriptor(torch.empty(1, 1, 64, 128, dtype=torch.float16), 64)
    assert half.layout == gl.NVMMASharedLayout.get_default_for([1, 1, 64, 128], gl.float16)
    assert hopper.tma_descriptor(k.contiguous(), 128).layout is desc.layout


def test_the_reduce_descriptor_covers_a_float32_sum_in_tiles_of_rows():
    """The one-pass backward's dQ sum, float32 (B * H, rows, d): block (1, rows, d) in the float32
    NVMMA layout, which the kernel's shared-memory tile takes as its own."""
    import torch

    hopper = pytest.importorskip("kernels.hopper_common", reason="this Triton has no Gluon")
    gl = hopper.gl
    total = torch.zeros(6, 96, 128)
    desc = hopper.reduce_descriptor(total, 32)
    assert (desc.shape, desc.strides, desc.block_shape) == ([6, 96, 128], [96 * 128, 128, 1], [1, 32, 128])
    assert desc.layout == gl.NVMMASharedLayout.get_default_for([1, 32, 128], gl.float32)
    assert hopper.reduce_descriptor(torch.zeros(2, 32, 128), 32).layout is desc.layout


def test_an_incoming_gradient_tma_cannot_read_is_copied_first():
    """The Hopper autograd call passes dO through as it is when TMA can read it, else a contiguous copy."""
    import torch

    from kernels.hopper_autograd import _tma_ready

    grad = torch.randn(2, 3, 64, 128, dtype=torch.bfloat16)
    assert _tma_ready(grad) is grad
    transposed = torch.randn(2, 3, 128, 64, dtype=torch.bfloat16).transpose(-1, -2)  # last dim strided
    assert _tma_ready(transposed).is_contiguous() and torch.equal(_tma_ready(transposed), transposed)


class _Tensor:
    """What takes_hopper_forward reads of q, k, v and the output: strides and base address."""

    def __init__(self, strides, data_ptr):
        self._strides, self._data_ptr = strides, data_ptr

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._data_ptr


def _tensors(strides, data_ptrs=(0, 1 << 20, 2 << 20, 3 << 20)):
    return tuple(_Tensor(s, p) for s, p in zip(strides, data_ptrs))


CONTIGUOUS_4K = (4 * 4096 * 64, 4096 * 64, 64, 1)
# an eager dense forward the Hopper ping-pong kernel takes: q, k, v and out contiguous (B, H, N, d) = (2, 4, 4096, 64)
TAKES = dict(triton_version="3.9.0", capability=(9, 0), dtype="bfloat16", head_dim=64, n_k=4096, dropout_p=0.0,
             sparse_tile=None, tensors=_tensors((CONTIGUOUS_4K,) * 4))


def test_eager_dense_forward_takes_the_hopper_kernel():
    assert takes_hopper_forward(**TAKES)
    assert takes_hopper_forward(**dict(TAKES, triton_version="3.6.0", dtype="torch.float16"))
    # q, k, v views of a fused (B, N, 3, H, d) projection, out a (B, H, N, d) view of a (B, N, H, d) tensor
    qkv_view, out_view = (4096 * 3 * 4 * 64, 64, 3 * 4 * 64, 1), (4096 * 4 * 64, 64, 4 * 64, 1)
    assert takes_hopper_forward(**dict(TAKES, tensors=_tensors((qkv_view,) * 3 + (out_view,))))


def test_block_sparse_forward_takes_the_hopper_kernel_with_a_plan_for_its_tile():
    """A block-sparse call whose forward plan is made for the Hopper tile (128 x 128) takes the kernel
    under the dense call's conditions, at d = 128 only (SPARSE_PINGPONG_MIN_KEYS)."""
    assert FORWARD_TILE == (128, 128)
    d128 = dict(TAKES, head_dim=128, tensors=_tensors(((4 * 4096 * 128, 4096 * 128, 128, 1),) * 4))
    assert takes_hopper_forward(**dict(d128, sparse_tile=FORWARD_TILE))
    assert takes_hopper_forward(**dict(d128, sparse_tile=[128, 128]))  # the tiles list's ints
    assert takes_hopper_forward(**dict(d128, sparse_tile=FORWARD_TILE, n_k=256))
    assert not takes_hopper_forward(**dict(d128, sparse_tile=FORWARD_TILE, dropout_p=0.1))
    for n_k in (1024, 4096, 65536):  # d = 64: the portable block-sparse forward at every N_k
        assert takes_hopper_forward(**dict(TAKES, n_k=n_k)) is (n_k >= 2048)
        assert not takes_hopper_forward(**dict(TAKES, sparse_tile=FORWARD_TILE, n_k=n_k))
    assert not takes_hopper_forward(**dict(TAKES, sparse_tile=FORWARD_TILE, head_dim=32))


@pytest.mark.parametrize("head_dim, n_k, takes", [
    (128, 1, True), (128, 333, True), (128, 16384, True),
    (64, 2047, False), (64, 2048, True), (64, 16384, True), (64, 1024, False),
    (32, 4096, False), (96, 4096, False), (16, 16384, False),
])
def test_hopper_forward_speed_rule(head_dim, n_k, takes):
    """d = 128 at any N_k, d = 64 from N_k = 2048 (results/kernels/h200/hopper.md); no other head dim."""
    d = head_dim
    tensors = _tensors(((4 * n_k * d, n_k * d, d, 1),) * 4)
    assert takes_hopper_forward(**dict(TAKES, head_dim=d, n_k=n_k, tensors=tensors)) is takes


@pytest.mark.parametrize("changes", [
    dict(enabled=False),  # kernels.use_hopper_forward(False)
    dict(capability=None),  # not a CUDA tensor
    dict(capability=(8, 0)),
    dict(capability=(10, 0)),
    dict(triton_version="3.7.0"),
    dict(triton_version="3.5.1"),
    dict(dtype="float32"),
    dict(dtype="torch.float32"),
    dict(dropout_p=0.1),
    dict(sparse_tile=(128, 64)),  # a block-sparse plan made for another forward tile
    dict(sparse_tile=(64, 64)),
    dict(tensors=_tensors((CONTIGUOUS_4K,) * 3 + ((4096 * 64, 64, 1, 4096),))),  # out's last dim not contiguous
    dict(tensors=_tensors(((4 * 4096 * 68, 4096 * 68, 68, 1),) + (CONTIGUOUS_4K,) * 3)),  # q's rows 136 bytes apart
    dict(tensors=_tensors((CONTIGUOUS_4K,) * 3 + ((4 * 4096 * 64, 4096 * 64 + 4, 64, 1),))),  # out's head stride
    dict(tensors=_tensors((CONTIGUOUS_4K,) + ((0, 4096 * 64, 64, 1),) * 2 + (CONTIGUOUS_4K,))),  # expanded k, v
    dict(tensors=_tensors((CONTIGUOUS_4K,) * 4, (0, 1 << 20, (2 << 20) + 2, 3 << 20))),  # v not 16-byte aligned
    dict(tensors=_tensors((CONTIGUOUS_4K,) * 4, (0, 1 << 20, 2 << 20, (3 << 20) + 8))),  # out not 16-byte aligned
])
def test_hopper_forward_needs_every_condition(changes):
    assert not takes_hopper_forward(**dict(TAKES, **changes))


class _Unread:
    """A tensor whose strides and address must not be read."""

    def stride(self):
        raise AssertionError("strides read although a cheaper condition already said no")

    data_ptr = stride


@pytest.mark.parametrize("changes", [dict(enabled=False), dict(capability=None), dict(dropout_p=0.1),
                                     dict(sparse_tile=(64, 64)), dict(n_k=1024), dict(head_dim=32),
                                     dict(capability=(8, 0)), dict(dtype="float32")])
def test_hopper_forward_decision_reads_strides_last(changes):
    """The tensors' strides and pointers are read only when the rest says yes."""
    assert not takes_hopper_forward(**dict(TAKES, tensors=(_Unread(),) * 4, **changes))


def test_decision_and_reasons_share_the_memoised_device_check():
    """supported() and takes_hopper_forward() ask device_supported, memoised per (release, capability,
    dtype, head dim): repeated calls of the eager forward compute it once."""
    device_supported.cache_clear()
    for _ in range(3):
        assert takes_hopper_forward(**TAKES)
        assert supported("3.9.0", [9, 0], "bfloat16", 64)[0]  # a list capability is taken as a tuple
    info = device_supported.cache_info()
    assert (info.misses, info.hits) == (1, 5)


def test_hopper_forward_checks_the_output_it_is_given():
    """hopper_forward's ``out`` must be like q (shape, dtype, device) and TMA-writable; checked before any launch."""
    import torch

    hopper = pytest.importorskip("kernels.hopper_attention", reason="this Triton has no Gluon")
    q = torch.zeros(1, 2, 16, 64, dtype=torch.bfloat16)
    for bad in (torch.empty(1, 2, 16, 64), torch.empty(1, 2, 17, 64, dtype=torch.bfloat16)):
        with pytest.raises(ValueError, match="out must be torch.bfloat16 \\(1, 2, 16, 64\\)"):
            hopper.hopper_forward(q, q, q, out=bad)
    # a well-formed out gets as far as the device check (no sm_90 device here)
    good = torch.empty(1, 16, 2, 64, dtype=torch.bfloat16).transpose(1, 2)
    with pytest.raises(ValueError, match="sm_90"):
        hopper.hopper_forward(q, q, q, out=good)


def test_the_pingpong_forward_has_two_consumers_and_no_option_for_more():
    """The ping-pong schedule runs two consumer warpgroups; a third did not pay (0.93-1.00x the two at
    d = 64; `git show 051804f:results/kernels/hopper_dispatch_h200.md`), so there is no option for it."""
    import inspect

    hopper = pytest.importorskip("kernels.hopper_attention", reason="this Triton has no Gluon")
    assert hopper.PP_CONSUMERS == 2
    assert "consumers" not in inspect.signature(hopper.hopper_forward).parameters
