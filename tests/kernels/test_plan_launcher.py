"""kernels.plan_launcher: a launch plan's launches replayed by one C call.

On CPU the C module is built (Triton's C-extension helper, the machine's compiler) and dry-run (``Plan.slots`` gives the
parameter block each launch would get): the packing of every parameter type, the skipped
constexprs, the per-replay data pointers, the scratch slots and the plan's error messages are
checked against values computed here. On CUDA the last test replays the real attention plans
natively and compares bitwise with the Python replay and with built launches.
"""
from __future__ import annotations

import struct
import warnings

import pytest
import torch

from kernels import launch, plan_launcher


@pytest.fixture(scope="module")
def native():
    return plan_launcher.compile_module()


class _Runner:
    """Triton 3.6's CudaLauncher attributes the spec reads."""

    def __init__(self, scratch=0, cooperative=False, pdl=False):
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.launch_cooperative_grid, self.launch_pdl = cooperative, pdl


class _Src:
    def __init__(self, types):
        self.signature = {f"a{i}": t for i, t in enumerate(types)}


class _Compiled:
    def __init__(self, types, *, function=0xABC, metadata=(4, 1, 2048), **runner):
        self.src, self.function, self.packed_metadata = _Src(types), function, metadata
        self.run = _Runner(**runner)


def _words(block: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(block) // 8}Q", block))


@pytest.mark.parametrize("ty, value, expected", [
    ("i32", -5, struct.pack("<i", -5)),
    ("i32", 2**31 - 1, struct.pack("<i", 2**31 - 1)),
    ("i64", -(2**40), struct.pack("<q", -(2**40))),
    ("u64", 2**64 - 1, struct.pack("<Q", 2**64 - 1)),
    ("i1", True, b"\x01"),
    ("fp32", 0.1, struct.pack("<f", 0.1)),
    ("fp32", 3, struct.pack("<f", 3.0)),
    ("fp64", 0.1, struct.pack("<d", 0.1)),
    ("fp16", 1.5, struct.pack("<e", 1.5)),
    ("bf16", 1.0 + 2**-9, struct.pack("<H", 0x3F80)),  # truncated like Triton's pack_bf16
])
def test_scalars_are_packed_as_tritons_launcher_packs_them(ty, value, expected):
    slot = plan_launcher.pack_scalar(ty, value)
    assert len(slot) == 8
    assert slot == expected.ljust(8, b"\0") or (ty in ("i32", "i64") and slot[:len(expected)] == expected)


@pytest.mark.parametrize("ty, value", [("i32", 2**31), ("u32", -1), ("i1", 2), ("i32", 0.5), ("fp32", "x"),
                                       ("nvTmaDesc", 0), ("tensordesc<fp16[64, 64]>", 0)])
def test_values_or_types_the_native_launcher_cannot_pass_are_refused(ty, value):
    with pytest.raises(plan_launcher.Unplannable):
        plan_launcher.pack_scalar(ty, value)


def test_a_spec_skips_constexprs_and_ends_with_the_two_scratch_slots(native):
    # kernel(X, Y, n, scale, BLOCK: constexpr, one: constexpr (an int specialised as 1), m)
    compiled = _Compiled(["*bf16", "*fp32", "i32", "fp32", "constexpr", "constexpr", "i64"], pdl=True)
    spec = plan_launcher.launch_spec(compiled, (3, 2, 1), 2, (-7, 0.25, 64, 1, 2**40), first_tensor=0)
    function, gx, gy, gz, warps, ctas, shared, coop, pdl, slots, pointers = spec
    assert (function, gx, gy, gz, warps, ctas, shared, coop, pdl) == (0xABC, 3, 2, 1, 4, 1, 2048, False, True)
    assert pointers == ((0, 0, 0), (1, 1, 0))
    x, y = torch.zeros(4), torch.ones(8)
    (block,) = native.Plan(2, (spec,)).slots((x, y))
    words = _words(block)
    assert len(words) == 7  # X, Y, n, scale, m, global scratch, profile scratch
    assert words[:2] == [x.data_ptr(), y.data_ptr()]
    assert words[2] == 2**64 - 7  # -7 as an i32 in its slot's low 4 bytes (upper bytes not read)
    assert block[24:28] == struct.pack("<f", 0.25)
    assert words[4] == 2**40 and words[5:] == [0, 0]


def test_each_replay_reads_its_own_tensors_and_launches_take_theirs_in_turn(native):
    first = _Compiled(["*fp32", "*fp32", "i32"])
    second = _Compiled(["*fp32", "i32", "*fp32"])  # a tensor after a scalar: not a leading tensor
    with pytest.raises(plan_launcher.Unplannable, match="not one of the leading tensors"):
        plan_launcher.plan_specs([(first, (1, 1, 1), 2, (5,)), (second, (1, 1, 1), 1, (6, torch.zeros(1)))])
    second = _Compiled(["*fp32", "*fp32", "constexpr", "i32"])
    plan = native.Plan(*plan_launcher.plan_specs([(first, (1, 1, 1), 2, (5,)), (second, (2, 1, 1), 2, (True, 6))]))
    assert (plan.n_tensors, plan.n_launches) == (4, 2)
    a, b, c = torch.zeros(2), torch.zeros(3), torch.zeros(5)
    blocks = plan.slots((a, b, c, a))  # the same tensor twice in one replay: read once, used twice
    assert _words(blocks[0])[:3] == [a.data_ptr(), b.data_ptr(), 5]
    assert _words(blocks[1])[:3] == [c.data_ptr(), a.data_ptr(), 6]
    blocks = plan.slots((c, c, b, b))  # a later replay: new pointers, same constants
    assert _words(blocks[0])[:3] == [c.data_ptr(), c.data_ptr(), 5]
    assert _words(blocks[1])[:3] == [b.data_ptr(), b.data_ptr(), 6]


def test_a_plan_over_views_replays_with_the_tensors_they_are_views_of(native):
    """LaunchPlan.rebased's pieces: views of a packed tensor, a transposed output and a placeholder
    map to (base, byte offset); the rebased plan puts base pointer + offset in the same slots."""
    qkv = torch.zeros(2, 5, 3, 4, 8, dtype=torch.bfloat16)
    out = torch.zeros(2, 5, 4, 8, dtype=torch.bfloat16)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    views = (q, k, v, out.transpose(1, 2), q)  # the last: a placeholder (an unused pointer argument)
    mapping = plan_launcher.base_mapping(views, (qkv, out))
    assert mapping == [(0, 0), (0, 4 * 8 * 2), (0, 2 * 4 * 8 * 2), (1, 0), (0, 0)]
    compiled = _Compiled(["*bf16"] * 5 + ["i32"])
    n, specs = plan_launcher.plan_specs([(compiled, (1, 1, 1), 5, (9,))])
    rebased = native.Plan(2, plan_launcher.rebased_specs(specs, mapping))
    qkv2, out2 = torch.ones_like(qkv), torch.ones_like(out)  # a later call's tensors
    (block,) = rebased.slots((qkv2, out2))
    want = [t.data_ptr() for t in (qkv2, qkv2[:, :, 1], qkv2[:, :, 2], out2, qkv2)]
    assert _words(block)[:6] == want + [9]
    q2, k2, v2 = qkv2.permute(2, 0, 3, 1, 4).unbind(0)
    (direct,) = native.Plan(n, specs).slots((q2, k2, v2, out2.transpose(1, 2), q2))  # the views themselves
    assert direct == block


def test_views_outside_the_bases_or_bases_sharing_a_storage_are_not_mapped():
    a, b = torch.zeros(8), torch.zeros(8)
    assert plan_launcher.base_mapping((a[2:],), (b,)) is None  # not a view of any base
    assert plan_launcher.base_mapping((a[2:],), (a[:4], a[4:])) is None  # two bases, one storage: ambiguous
    assert plan_launcher.base_mapping((a[2:], a), (a, a)) == [(0, 8), (0, 0)]  # one base object twice: fine


@pytest.mark.parametrize("compiled, n_tensors, tail, message", [
    (_Compiled(["*fp32", "i32"], scratch=128), 1, (3,), "scratch"),
    (_Compiled(["*fp32", "i32"]), 1, (3, 4), "signature entries"),
    (_Compiled(["*fp32", ("i32", "i32")]), 1, ((1, 2),), "tuple type"),
    (_Compiled(["i32", "i32"]), 1, (3,), "is a tensor but"),
])
def test_launches_the_native_launcher_cannot_express_are_refused(compiled, n_tensors, tail, message):
    with pytest.raises(plan_launcher.Unplannable, match=message):
        plan_launcher.launch_spec(compiled, (1, 1, 1), n_tensors, tail, 0)


def test_bad_plans_and_replays_raise_one_clear_error(native):
    spec = (1, 1, 1, 1, 4, 1, 0, False, False, bytes(16), ((0, 0, 0),))
    with pytest.raises(ValueError, match="out of range"):
        native.Plan(1, ((*spec[:10], ((2, 0, 0),)),))
    with pytest.raises(ValueError, match="out of range"):
        native.Plan(1, ((*spec[:10], ((0, 1, 0),)),))
    with pytest.raises(TypeError, match="byte offset"):
        native.Plan(1, ((*spec[:10], ((0, 0),)),))
    with pytest.raises(ValueError, match="8 bytes per parameter"):
        native.Plan(1, ((*spec[:9], bytes(12), ()),))
    with pytest.raises(TypeError, match="launch spec"):
        native.Plan(1, ((1, 2),))
    plan = native.Plan(1, (spec,))
    with pytest.raises(TypeError, match="tuple of 1 tensors, got tuple of 2"):
        plan.slots((torch.zeros(1), torch.zeros(1)))
    with pytest.raises(AttributeError):
        plan.slots((object(),))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without the CUDA driver")
def test_running_without_the_cuda_driver_names_it(native):
    plan = native.Plan(1, ((1, 1, 1, 1, 4, 1, 0, False, False, bytes(8), ((0, 0, 0),)),))
    with pytest.raises(RuntimeError, match="libcuda.so.1"):
        plan.run(0, (torch.zeros(1),))


def test_a_machine_that_cannot_build_it_warns_once_and_replays_in_python(monkeypatch):
    monkeypatch.setattr(plan_launcher, "_module", None)
    monkeypatch.setattr(plan_launcher, "_failure", None)

    def no_compiler():
        raise FileNotFoundError("no C compiler found")

    monkeypatch.setattr(plan_launcher, "compile_module", no_compiler)
    with pytest.warns(RuntimeWarning, match="no C compiler found"):
        assert plan_launcher.load() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan_launcher.load() is None  # said once
    assert "no C compiler found" in plan_launcher.failure()


class _Bound:
    def __init__(self, n):
        self.n_tensors, self.calls = n, []

    def __call__(self, *tensors):
        self.calls.append(tensors)


class _NativeStandIn:
    def __init__(self):
        self.calls = []

    def run(self, stream, tensors):
        self.calls.append((stream, tensors))


def test_a_launch_plan_replays_natively_in_one_call_else_launch_by_launch(monkeypatch):
    monkeypatch.setattr(launch, "current_stream", lambda: 7)
    monkeypatch.setattr(launch, "_hooks_installed", lambda: False)
    monkeypatch.setattr(launch, "NATIVE", False)
    bound = (_Bound(2), _Bound(1))
    plan = launch.LaunchPlan(bound)
    assert plan.native is None and plan.n_tensors == 3
    plan("a", "b", "c")
    assert bound[0].calls == [("a", "b")] and bound[1].calls == [("c",)]
    with pytest.raises(TypeError, match="takes 3 tensors"):
        plan("a", "b")
    plan.native = _NativeStandIn()
    monkeypatch.setattr(launch, "NATIVE", True)
    plan("x", "y", "z")
    assert plan.native.calls == [(7, ("x", "y", "z"))] and len(bound[0].calls) == 1
    monkeypatch.setattr(launch, "_hooks_installed", lambda: True)  # a profiler: through the bound launches
    plan("x", "y", "z")
    assert len(plan.native.calls) == 1 and bound[1].calls[-1] == ("z",)
    assert plan.replays == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="replays compiled kernels")
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bwd_form", ["split", "fused"])
def test_native_replays_on_cuda_give_the_results_of_python_replays_and_built_launches(monkeypatch, sparse, bwd_form):
    """Dense and block-sparse packed calls with dropout, padding (a fully padded batch row) and ragged
    N (through kernels.packed_fast_path after the first call), plus a causal q/k/v call with an
    lse gradient: bitwise equal, except the fused backward's dQ, summed with atomics (order-dependent
    last bits)."""
    from kernel_helpers import cuda_packed_case, packed_call

    from kernels import flash_attention, ops, packed_fast_path

    if not (launch.plans_enabled() and launch.NATIVE):
        pytest.skip(f"native launch plans are off here (${launch.ENV} or the Triton version)")
    assert plan_launcher.load() is not None, plan_launcher.failure()
    monkeypatch.setattr(ops, "_LAUNCH_PLANS", {})
    monkeypatch.setattr(packed_fast_path, "_ENTRIES", {})
    monkeypatch.setattr(ops, "DROPOUT_BWD", bwd_form)
    case = cuda_packed_case()
    q, k, v = (torch.randn(2, 2, 200, 64, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
    grad_qkv = torch.randn(2, 2, 200, 64, device="cuda", dtype=torch.float16)

    def run():
        q.grad = k.grad = v.grad = None
        out, dqkv = packed_call(*case, sparse=sparse)
        out2, lse = flash_attention(q, k, v, causal=True, return_lse=True)  # the split backward, an lse gradient
        (out2.float() * grad_qkv.float()).sum().add(lse.sum()).backward()
        return out, dqkv, out2.detach().clone(), q.grad.clone(), k.grad.clone()

    run()  # binds the plans (and records the packed call's fast-path entry)
    plans = [p for p in ops._LAUNCH_PLANS.values() if p]
    assert len(plans) == 4 and all(p.native is not None for p in plans)
    native_out = run()
    (entry,) = packed_fast_path._ENTRIES.values()  # the packed call: kernels.packed_fast_path
    assert entry.forwards == 1 and entry.backwards == 1
    assert sorted(p.replays for p in plans) == [0, 0, 1, 1]  # the q/k/v call's plans replayed
    monkeypatch.setattr(launch, "NATIVE", False)
    python_out = run()
    monkeypatch.setattr(launch, "PLANNED", False)
    built_out = run()
    for i, (a, b, c) in enumerate(zip(native_out, python_out, built_out)):
        exact = {} if bwd_form == "fused" and i == 1 else dict(rtol=0, atol=0)
        torch.testing.assert_close(a, b, **exact)
        torch.testing.assert_close(a, c, **exact)
    assert not torch.isnan(native_out[1]).any()


def test_the_launch_path_in_force_is_described_with_the_reason(monkeypatch):
    """kernels.launch.describe(): what `lra info` and benchmark metadata record."""
    monkeypatch.setattr(launch, "ENABLED", False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert launch.describe() == "triton (every launch through JITFunction.run: Triton's interpreter)"
    monkeypatch.setattr(launch, "ENABLED", True)
    monkeypatch.setattr(launch, "MODE", "native")
    monkeypatch.setattr(plan_launcher, "_module", None)
    monkeypatch.setattr(plan_launcher, "_failure", "FileNotFoundError: no C compiler found")
    assert launch.describe() == ("planned (the native plan launcher is unavailable: FileNotFoundError: "
                                 "no C compiler found)")
    monkeypatch.setattr(plan_launcher, "_module", object())
    assert launch.describe().startswith("native (")
    monkeypatch.setattr(launch, "MODE", "cached")
    assert launch.describe() == "cached"
