"""kernels.launch: the cached launch path (repeat launches skip Triton's per-call argument binding).

On CPU (Triton's interpreter) the launcher hands back the kernel itself; the cache logic is tested
with a stand-in JIT kernel. On CUDA the last test runs the real kernels both ways and compares.
"""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from kernels import launch


class _Param:
    def __init__(self, name, default=None):
        self.name, self.default = name, default


class _Compiled:
    """Stands in for a CompiledKernel: records the direct launches."""

    function = "fn-handle"
    packed_metadata = ("meta",)

    def __init__(self):
        self.runs = []

    def run(self, *args):
        self.runs.append(args)


class _Jit:
    """Stands in for a JITFunction with parameters (X, n, scale, BLOCK=16, FLAG=False)."""

    def __init__(self):
        self.params = [_Param("X"), _Param("n"), _Param("scale"), _Param("BLOCK", 16), _Param("FLAG", False)]
        self.slow_calls = []
        self.compiled = {}

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.slow_calls.append((grid, args, kwargs))
            return self.compiled.setdefault(launch.signature(args, kwargs), _Compiled())
        return run


@pytest.fixture
def cached(monkeypatch):
    monkeypatch.setattr(launch, "current_stream", lambda: 7)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)
    jit = _Jit()
    return jit, launch.CachedLauncher(jit)


def test_signature_separates_what_triton_specialises_on():
    x = torch.zeros(8, dtype=torch.float32)
    base = launch.signature((x, 4, 0.5), {"BLOCK": 16})
    assert launch.signature((torch.ones(8), 4, 0.25), {"BLOCK": 16}) == base  # float values and data do not matter
    assert launch.signature((x.half(), 4, 0.5), {"BLOCK": 16}) != base  # dtype
    assert launch.signature((x[1:], 4, 0.5), {"BLOCK": 16}) != base  # 16-byte alignment of the pointer
    assert launch.signature((x, 5, 0.5), {"BLOCK": 16}) != base  # int values (== 1, divisibility, range)
    assert launch.signature((x, 4, 0.5), {"BLOCK": 32}) != base  # constexprs and launch options
    assert launch.signature((x, True, 0.5), {}) != launch.signature((x, 1, 0.5), {})  # bool is not int
    assert launch.signature((x, None, 0.5), {}) is None  # kinds it does not handle: Triton's path


def test_repeat_launch_skips_triton_and_passes_every_parameter_in_order(cached):
    jit, cl = cached
    x = torch.zeros(8)
    first = cl[(3,)](x, 4, 0.5, BLOCK=32, num_warps=4)
    assert len(jit.slow_calls) == 1 and cl.misses == 1
    second = cl[(5, 2)](torch.ones(8), 4, 0.75, BLOCK=32, num_warps=4)
    assert second is first and len(jit.slow_calls) == 1 and cl.hits == 1
    (args,) = first.runs
    # grid padded to 3-D, stream, function, metadata, no launch metadata or hooks, then X, n, scale,
    # BLOCK from the call and FLAG from its declared default
    assert args[:9] == (5, 2, 1, 7, "fn-handle", ("meta",), None, None, None)
    assert args[10:] == (4, 0.75, 32, False)
    assert torch.equal(args[9], torch.ones(8))


def test_a_new_signature_goes_through_triton_again(cached):
    jit, cl = cached
    cl[(1,)](torch.zeros(8), 4, 0.5)
    cl[(1,)](torch.zeros(8), 16, 0.5)  # another int value
    cl[(1,)](torch.zeros(8, dtype=torch.float16), 4, 0.5)  # another dtype
    assert len(jit.slow_calls) == 3 and cl.hits == 0 and cl.misses == 3


def test_unhandled_arguments_and_launch_hooks_take_tritons_path(cached, monkeypatch):
    jit, cl = cached
    cl[(1,)](torch.zeros(8), None, 0.5)
    cl[(1,)](torch.zeros(8), None, 0.5)
    assert len(jit.slow_calls) == 2 and cl.hits == 0
    cl[(1,)](torch.zeros(8), 4, 0.5)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: True)  # e.g. a profiler's launch hook
    cl[(1,)](torch.zeros(8), 4, 0.5)
    assert len(jit.slow_calls) == 4 and cl.hits == 0


def test_interpreter_and_non_jit_objects_get_the_kernel_itself():
    from kernels import triton_attention as kern

    if not torch.cuda.is_available():
        assert launch.launcher(kern.flash_fwd_kernel) is kern.flash_fwd_kernel
    stand_in = types.SimpleNamespace()
    assert launch.launcher(stand_in) is stand_in


def test_bad_setting_is_one_clear_error():
    code = "import kernels.launch"
    env = {"LRA_TRITON_LAUNCH": "fast", "TRITON_INTERPRET": "1", "PATH": ""}
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert proc.returncode != 0
    assert "LRA_TRITON_LAUNCH" in proc.stderr and "cached" in proc.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the cached path runs compiled kernels only")
def test_cached_launches_give_bitwise_the_same_results_on_cuda(monkeypatch):
    from kernels import flash_attention_qkvpacked, layer_norm

    if not launch.ENABLED:
        pytest.skip(f"cached launches are off here (Triton {__import__('triton').__version__} not in "
                    f"VERIFIED_TRITON, or {launch.ENV}=triton)")
    qkv = torch.randn(2, 300, 3, 2, 32, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    x = torch.randn(4096, 64, device="cuda", requires_grad=True)
    weight = torch.randn(64, device="cuda", requires_grad=True)

    def run():
        for t in (qkv, x, weight):
            t.grad = None
        out = flash_attention_qkvpacked(qkv)  # no dropout: deterministic both ways
        out.float().square().sum().backward()
        y = layer_norm.layer_norm(x, weight, None, 1e-5)
        y.square().sum().backward()
        return [out, qkv.grad, y, x.grad, weight.grad]

    for _ in range(2):  # the second round is served from the cache
        cached_results = run()
    hits = sum(cl.hits for cl in launch._launchers.values())
    assert hits > 0
    monkeypatch.setattr(launch, "ENABLED", False)
    plain = run()
    for a, b in zip(cached_results, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
