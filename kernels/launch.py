"""A lean launch path for our Triton kernels: Triton's per-call argument binding skipped on repeat calls.

Why: the `paper` LRA model's small-batch step is bound by the host CPU (issue #8), and each eager
attention call launches three of our kernels. On the H200's host (session 13, scripts/h200/
launch_overhead.py, results/models/session13/) ``kernel[grid](*args, **kwargs)`` through Triton's
``JITFunction.run`` cost 32 / 24 / 48 us per launch of the forward / backward-preprocess / dK/dV
kernel (58 / 22 / 73 arguments): it binds and specialises every argument, builds a cache key, looks
the compiled kernel up and assembles launch metadata on each call, while the compiled kernel's own
launcher takes 6-12 us. This path brought them to 26 / 15 / 37 us (the rest is this module's own
signature, computed in Python over every argument).

What: :func:`launcher` wraps a JIT kernel so that ``launcher(kernel)[grid](*args, **kwargs)`` works
like the kernel's own. The first call with a given *launch signature* goes through Triton as usual
(compiling if needed) and remembers the compiled kernel; later calls with the same signature call
that compiled kernel's launcher (``CompiledKernel.run``) directly. The signature is a superset of
everything Triton specialises on: the keyword (constexpr and launch-option) arguments, and per
positional argument its exact value for ints and bools, dtype and 16-byte alignment for tensors,
and the type for floats. So a signature hit can only map to the kernel Triton itself would pick.
Calls with any other kind of positional argument (TMA tensor descriptors, None) and every call while
a launch hook is installed (profilers) take Triton's path.

On top of that, :class:`BoundLaunch` (made by :meth:`CachedLauncher.bind`) fixes every argument of a
launch but its leading tensors: ``kernels.ops`` keeps one per kernel launch in a *launch plan* per
input layout (shapes, strides, dtypes, flags) and replays it, which skips the ops' own argument
building (strides, flags, tiles, grid) and the signature too. A :class:`LaunchPlan` holds one
direction's bound launches and replays them with one flat tuple of tensors: by default natively, one
C call for all of them (:mod:`kernels.plan_launcher`; ``$LRA_TRITON_LAUNCH=native``), else bound
launch by bound launch through Triton's C launcher (``planned``, also the fallback where the native
launcher cannot be built); ``cached`` keeps the per-launch signature cache only.

Where it applies: compiled kernels (not Triton's interpreter, where ``launcher`` returns the kernel
itself) on a Triton release whose internals this was written against and checked on the GPU
(:data:`VERIFIED_TRITON`); anywhere else, or with ``$LRA_TRITON_LAUNCH=triton``, every call goes
through Triton. Results are identical either way (the same compiled kernel runs with the same
arguments); `tests/kernels/test_launch.py` and `test_launch_plans.py` check that bitwise on CUDA.
Session 14 (results/models/session14/): one eager attention call, fwd + bwd, 449 us of host time with
plans vs 709 us cached and 801 us through Triton (SDPA's: 318 us), same call on the H200. Session 15
(results/models/session15/): native replays 17-83 us less than the Python replay; with the packed fast
path (kernels.packed_fast_path) one packed call takes 295-342 us against SDPA's 371-575 us.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch

try:  # the pieces of Triton the cached path uses, imported once (launches are the hot path)
    from triton import knobs as _knobs
    from triton.runtime import driver as _driver
    from triton.runtime.jit import JITFunction as _JITFunction
except ImportError:  # a Triton without them: the cached path stays off (_available)
    _knobs = _driver = _JITFunction = None

ENV = "LRA_TRITON_LAUNCH"
# Triton (major, minor) releases whose JITFunction / CompiledKernel internals this module uses:
# JITFunction.params, CompiledKernel.run / function / packed_metadata, knobs.runtime.launch_*_hook, and
# (BoundLaunch) the CudaLauncher behind CompiledKernel.run: .launch, .global_scratch_size,
# .profile_scratch_size, .launch_cooperative_grid, .launch_pdl.
VERIFIED_TRITON = frozenset({(3, 6)})


MODES = ("native", "planned", "cached", "triton")


def _mode() -> str:
    value = os.environ.get(ENV, "").strip() or "native"
    if value not in MODES:
        raise ValueError(f"${ENV}={value!r}: expected 'native' (the default: the attention ops replay launch "
                         "plans per input layout, one C call per plan), 'planned' (the plans' launches replayed "
                         "one by one through Triton's C launcher), 'cached' (repeat launches skip Triton's argument "
                         "binding) or 'triton' (every launch through JITFunction.run)")
    return value


def _available() -> bool:
    import triton

    if os.environ.get("TRITON_INTERPRET") == "1":
        return False
    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    if (major, minor) not in VERIFIED_TRITON or _knobs is None:
        return False
    return hasattr(_knobs.runtime, "launch_enter_hook")


MODE = _mode()
ENABLED = MODE != "triton" and _available()  # the cached path (tests switch it off at run time)
PLANNED = MODE in ("native", "planned")  # launch plans in kernels.ops, on top of the cached path
NATIVE = MODE == "native"  # plans replayed by kernels.plan_launcher where it builds


def plans_enabled() -> bool:
    """Whether :mod:`kernels.ops` may bind and replay launch plans (:class:`LaunchPlan`): the
    cached path is on and ``$LRA_TRITON_LAUNCH`` is "native" (the default) or "planned"."""
    return ENABLED and PLANNED


def describe() -> str:
    """The eager launch path in force, in words (``lra info``, benchmark metadata)."""
    if not ENABLED:
        if os.environ.get("TRITON_INTERPRET") == "1":
            why = "Triton's interpreter"
        elif MODE == "triton":
            why = f"${ENV}=triton"
        else:
            import triton

            why = f"Triton {triton.__version__} is not a verified release ({sorted(VERIFIED_TRITON)})"
        return f"triton (every launch through JITFunction.run: {why})"
    if MODE == "native":
        from . import plan_launcher

        if plan_launcher.load() is None:
            return f"planned (the native plan launcher is unavailable: {plan_launcher.failure()})"
        return "native (launch plans replayed by kernels/plan_launcher; packed calls take kernels.packed_fast_path)"
    return MODE


def _hooks_installed() -> bool:
    for hook in (_knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook):
        if hook is None:
            continue
        if getattr(hook, "calls", True):  # a HookChain with hooks, or a plain callable
            return True
    return False


def current_stream() -> int:
    """The raw CUDA stream Triton would launch on (its driver's current device and stream)."""
    active = _driver.active
    return active.get_current_stream(active.get_current_device())


def signature(args: tuple, kwargs: dict) -> tuple | None:
    """The launch signature of a call (see the module docstring), or None if a positional argument
    is of a kind the cache does not handle."""
    key: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, a.data_ptr() % 16 == 0))
        elif isinstance(a, (bool, int)):  # bool before int: True == 1 must not alias
            key.append((type(a), a))
        elif isinstance(a, float):
            key.append(float)
        else:
            return None
    key.append(tuple(kwargs.items()))
    return tuple(key)


class CachedLauncher:
    """``launcher[grid](*args, **kwargs)`` for one JIT kernel (see the module docstring)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.entries: dict[tuple, tuple] = {}  # signature -> (compiled kernel, constant tail of the arguments)
        self.hits = 0
        self.misses = 0

    def __getitem__(self, grid) -> Callable:
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid, args: tuple, kwargs: dict):
        return self._launch(signature(args, kwargs), grid, args, kwargs)

    def _launch(self, key: tuple | None, grid, args: tuple, kwargs: dict):
        """:meth:`launch` with the call's signature ``key`` already computed."""
        entry = self.entries.get(key) if key is not None else None
        if entry is None or _hooks_installed():
            compiled = self.kernel[grid](*args, **kwargs)
            if key is not None and entry is None and hasattr(compiled, "packed_metadata"):
                self.misses += 1
                self.entries[key] = (compiled, self._tail(len(args), kwargs))
            return compiled
        compiled, tail = entry
        self.hits += 1
        compiled.run(*grid3(grid), current_stream(), compiled.function, compiled.packed_metadata, None, None, None,
                     *args, *tail)
        return compiled

    def bind(self, grid, args: tuple, kwargs: dict) -> "BoundLaunch | None":
        """Launch ``kernel[grid](*args, **kwargs)`` now and return a :class:`BoundLaunch` that repeats
        it with new leading tensors; None (after launching) when the call has a positional argument
        the signature does not handle (e.g. a TMA descriptor), which a bound launch cannot replay."""
        key = signature(args, kwargs)
        self._launch(key, grid, args, kwargs)
        n_tensors = leading_tensors(args)
        entry = self.entries.get(key) if key is not None else None
        if n_tensors is None or entry is None:
            return None
        compiled, tail = entry
        fixed = args[n_tensors:]
        return BoundLaunch(self, compiled, grid, n_tensors, fixed, kwargs, fixed + tail)

    def _tail(self, n_positional: int, kwargs: dict) -> tuple:
        """The parameters after the positional ones, in declaration order: the call's keyword values
        (constexprs), else the declared defaults (as Triton's binder fills them)."""
        tail = []
        for p in self.kernel.params[n_positional:]:
            if p.name in kwargs:
                tail.append(kwargs[p.name])
            else:
                tail.append(p.default)
        return tuple(tail)


def grid3(grid) -> tuple[int, int, int]:
    """A launch grid of 1-3 axes as the three the compiled kernel's launcher takes."""
    return grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1


def leading_tensors(args: tuple) -> int | None:
    """How many of ``args`` lead as tensors, or None if a tensor follows a non-tensor (a layout a
    :class:`BoundLaunch` cannot replay)."""
    n = 0
    while n < len(args) and isinstance(args[n], torch.Tensor):
        n += 1
    if any(isinstance(a, torch.Tensor) for a in args[n:]):
        return None
    return n


class BoundLaunch:
    """One launch with everything but its leading tensors fixed: ``bound(*tensors)`` runs the compiled
    kernel with the grid, scalars and constexprs of the launch it was bound from.

    For callers that cache launch plans per input layout (``kernels.ops``): the caller guarantees
    that the new tensors match the bound ones in number, dtype and 16-byte alignment (its plan key
    covers them), so the compiled kernel is the one Triton would pick. This skips even the
    signature computation of :meth:`CachedLauncher.launch`. With a launch hook installed, or
    without a compiled kernel (``compiled=None``: tests replaying through Triton's interpreter), it
    launches through the kernel itself (profilers see the launch)."""

    __slots__ = ("launcher", "compiled", "grid", "g0", "g1", "g2", "n_tensors", "fixed", "kwargs", "tail", "direct",
                 "head")

    def __init__(self, launcher: CachedLauncher, compiled, grid, n_tensors: int, fixed: tuple, kwargs: dict,
                 tail: tuple):
        """``fixed``: the positional arguments after the ``n_tensors`` leading tensors; ``tail``: the
        compiled kernel's arguments after the tensors (``fixed``, then the constexprs in declaration
        order, as :meth:`CachedLauncher._tail` gives them)."""
        self.launcher, self.compiled, self.grid = launcher, compiled, tuple(grid)
        self.g0, self.g1, self.g2 = grid3(grid)
        self.n_tensors, self.fixed, self.kwargs, self.tail = n_tensors, fixed, dict(kwargs), tail
        # Triton 3.6's CompiledKernel.run is a CudaLauncher whose __call__ (Python) allocates the kernel's
        # global / profile scratch buffers and then calls its C launcher (.launch). Kernels that need no
        # scratch (ours) get that C launcher called directly: one Python frame less per launch.
        self.direct = self.head = None
        runner = compiled.run if compiled is not None else None
        if (runner is not None and callable(getattr(runner, "launch", None))
                and getattr(runner, "global_scratch_size", None) == 0
                and getattr(runner, "profile_scratch_size", None) == 0):
            self.direct = runner.launch
            # after (grid, stream): function, cooperative grid, PDL, the two scratch buffers (none),
            # packed metadata, launch metadata and the enter / exit hooks (none: checked per call)
            self.head = (compiled.function, runner.launch_cooperative_grid, runner.launch_pdl, None, None,
                         compiled.packed_metadata, None, None, None)

    def __call__(self, *tensors):
        if len(tensors) != self.n_tensors:
            raise TypeError(f"bound launch of {self.launcher.kernel} takes {self.n_tensors} tensors, "
                            f"got {len(tensors)}")
        self.launcher.hits += 1
        if self.compiled is None or _hooks_installed():
            return self.launcher.kernel[self.grid](*tensors, *self.fixed, **self.kwargs)
        if self.direct is not None:
            self.direct(self.g0, self.g1, self.g2, current_stream(), *self.head, *tensors, *self.tail)
            return self.compiled
        c = self.compiled
        c.run(self.g0, self.g1, self.g2, current_stream(), c.function, c.packed_metadata, None, None, None,
              *tensors, *self.tail)
        return c


class LaunchPlan:
    """The bound launches of one direction for one input layout (``kernels.ops`` keeps one per
    layout), replayed in order by ``plan(*tensors)``: the launches' leading tensors concatenated,
    each launch taking its ``n_tensors`` in turn.

    Natively where :mod:`kernels.plan_launcher` builds and can express every launch (one C call
    reads the data pointers and launches them all; ``$LRA_TRITON_LAUNCH=native``, the default),
    else launch by launch (:class:`BoundLaunch`). With a launch hook installed (profilers) the
    launches go through Triton, as everywhere in this module."""

    __slots__ = ("bound", "native", "specs", "n_tensors", "replays")

    def __init__(self, bound: tuple):
        self.bound = tuple(bound)
        self.n_tensors = sum(b.n_tensors for b in self.bound)
        self.specs = _native_specs(self.bound) if NATIVE else None
        self.native = None
        if self.specs is not None:
            self.native = _native_module().Plan(self.n_tensors, self.specs)
        self.replays = 0

    def rebased(self, views: tuple, bases: tuple):
        """A native plan that replays this one with ``bases`` instead of ``views`` (this plan's tensors
        as at one replay; each a view into the storage of one of ``bases``, at an offset that is the
        same at every call of the caller's layout): the caller's fast path then skips making the
        views. None where this plan has no native form or a view lies in none of ``bases``."""
        if self.specs is None or len(views) != self.n_tensors:
            return None
        from . import plan_launcher

        mapping = plan_launcher.base_mapping(views, bases)
        if mapping is None:
            return None
        return _native_module().Plan(len(bases), plan_launcher.rebased_specs(self.specs, mapping))

    def __call__(self, *tensors):
        if self.native is not None and NATIVE and not _hooks_installed():
            self.native.run(current_stream(), tensors)
        else:
            if len(tensors) != self.n_tensors:
                raise TypeError(f"launch plan takes {self.n_tensors} tensors, got {len(tensors)}")
            start = 0
            for b in self.bound:
                end = start + b.n_tensors
                b(*tensors[start:end])
                start = end
        self.replays += 1


def _native_module():
    from . import plan_launcher

    return plan_launcher.load()


def _native_specs(bound: tuple):
    """The launch specs of ``bound``'s native form (``kernels.plan_launcher``), or None where it does
    not apply: a launch without a compiled kernel or through the Python-level CudaLauncher (scratch
    memory), a launch the native launcher cannot express, or no native launcher on this machine."""
    if not bound or any(b.compiled is None or b.direct is None for b in bound):
        return None
    from . import plan_launcher

    if plan_launcher.load() is None:
        return None
    try:
        _, specs = plan_launcher.plan_specs([(b.compiled, (b.g0, b.g1, b.g2), b.n_tensors, b.tail) for b in bound])
    except plan_launcher.Unplannable:
        return None
    return specs


_launchers: dict[int, CachedLauncher] = {}


def launcher(kernel):
    """``kernel`` wrapped in its :class:`CachedLauncher` where the cached path is enabled, else
    ``kernel`` itself (also for anything that is not a JIT kernel, e.g. a test's stand-in)."""
    if not ENABLED:
        return kernel
    wrapped = _launchers.get(id(kernel))
    if wrapped is not None and wrapped.kernel is kernel:
        return wrapped
    if not isinstance(kernel, _JITFunction):
        return kernel
    wrapped = _launchers[id(kernel)] = CachedLauncher(kernel)
    return wrapped
