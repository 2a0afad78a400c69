"""The native plan launcher: a launch plan's kernels replayed by one C call (``plan_launcher.c``).

Why: the small-batch eager step of the `paper` model is bound by the host CPU (issue #8). A launch
plan (:class:`kernels.launch.LaunchPlan`) already skips the ops' argument building, but each of its
launches still goes through Triton's C launcher from Python: every argument parsed again, a
``data_ptr()`` call and a ``cuPointerGetAttribute`` driver query per pointer, a context check and a
GIL release, plus the Python frames around it. This module turns a plan's bound launches into one
native object whose ``run(stream, tensors)`` reads each distinct tensor's data pointer once and
calls ``cuLaunchKernelEx`` per launch with a parameter block built at bind time.

How a launch becomes a spec (:func:`launch_spec`, Triton 3.6's compiled-kernel internals, the same
ones :mod:`kernels.launch` is verified against): the compiled kernel's ``src.signature`` lists one
type per kernel argument in declaration order; constexprs are not kernel parameters; pointers
(``*fp16`` ...) are the bound launch's leading tensors, refilled per replay; scalars are packed as
Triton's launcher packs them (ints two's-complement, fp16/bf16/fp32/fp64 bit patterns, bf16 by
truncation like ``pack_bf16``); two trailing null pointers are the global and profile scratch
buffers, which planned kernels never need (a kernel that does is not planned natively). Grid,
``num_warps``, ``num_ctas``, shared memory and the cooperative / PDL flags come from the compiled
kernel as Triton's launcher takes them. Anything else (TMA descriptors, tuple arguments, a
signature that does not line up with the arguments) makes the plan fall back to the Python replay.

Building: Triton's own C-extension helper (``triton.runtime.build.compile_module_from_src``, which
compiles Triton's launchers: the system C compiler, Python's headers, Triton's cache directory keyed
by the source) builds the module once per machine, with Triton's bundled ``cuda.h``. The driver is
opened with ``dlopen`` at the first launch, so the module also builds and dry-runs (``Plan.slots``)
on machines without CUDA: that is how CI tests the parameter packing. If it cannot be built,
:func:`load` says why once (a warning) and plans replay in Python (``$LRA_TRITON_LAUNCH=planned``
does that on purpose).
"""
from __future__ import annotations

import struct
import warnings
from pathlib import Path
from typing import Optional

SOURCE = Path(__file__).with_name("plan_launcher.c")
MODULE_NAME = "_plan_launcher"

_INT_TYPES = {  # Triton signature type -> (bits, signed)
    "i1": (8, True), "i8": (8, True), "i16": (16, True), "i32": (32, True), "i64": (64, True),
    "u1": (8, False), "u8": (8, False), "u16": (16, False), "u32": (32, False), "u64": (64, False),
}
_FLOAT_TYPES = ("fp16", "bf16", "fp32", "f32", "fp64")
_module = None
_failure: Optional[str] = None


class Unplannable(ValueError):
    """A bound launch that the native launcher cannot replay (it falls back to the Python replay)."""


def cuda_include_dir() -> Path:
    """The directory of ``cuda.h``: Triton's NVIDIA back-end ships it for its own launchers."""
    import triton

    path = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    if not (path / "cuda.h").is_file():
        raise FileNotFoundError(f"no cuda.h in {path} (Triton's NVIDIA back-end headers); the plan launcher needs it")
    return path


def compile_module():
    """The C module, built by Triton's C-extension helper (cached by Triton; raises if it cannot be built)."""
    from triton.runtime.build import compile_module_from_src

    return compile_module_from_src(SOURCE.read_text(), MODULE_NAME, include_dirs=[str(cuda_include_dir())],
                                   libraries=["dl"])


def load():
    """The built module, or None (after one warning saying why) where it cannot be built."""
    global _module, _failure
    if _module is not None or _failure is not None:
        return _module
    try:
        _module = compile_module()
    except Exception as exc:  # any failure: plans replay in Python instead, results are the same
        _failure = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"kernels: the native plan launcher is unavailable, launch plans replay in Python "
                      f"(slower on the host, same results): {_failure}", RuntimeWarning, stacklevel=2)
    return _module


def failure() -> Optional[str]:
    """Why :func:`load` gave None (None if it has not failed)."""
    return _failure


def pack_scalar(ty: str, value) -> bytes:
    """One kernel parameter's 8-byte slot, as Triton 3.6's launcher would pass ``value`` of type ``ty``."""
    if ty in _INT_TYPES:
        bits, signed = _INT_TYPES[ty]
        if isinstance(value, float) or not isinstance(value, int):
            raise Unplannable(f"a {ty} parameter got {value!r}")
        if ty in ("i1", "u1"):
            low, high = 0, 1  # a boolean, passed in one byte
        else:
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not low <= value <= high:
            raise Unplannable(f"{value} does not fit a {ty} parameter")
        return (value & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "little")
    if ty in _FLOAT_TYPES:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Unplannable(f"a {ty} parameter got {value!r}")
        if ty == "fp16":
            raw = struct.pack("<e", value)
        elif ty == "bf16":  # Triton's pack_bf16: the float32's upper half (truncation)
            raw = (struct.unpack("<I", struct.pack("<f", value))[0] >> 16).to_bytes(2, "little")
        elif ty in ("fp32", "f32"):
            raw = struct.pack("<f", value)
        else:
            raw = struct.pack("<d", value)
        return raw.ljust(8, b"\0")
    raise Unplannable(f"parameter type {ty!r} is not replayed natively")


def launch_spec(compiled, grid3: tuple, n_tensors: int, tail: tuple, first_tensor: int) -> tuple:
    """The spec of one bound launch (see the module docstring): ``compiled`` the Triton 3.6 compiled
    kernel, ``grid3`` its (x, y, z) grid, ``n_tensors`` leading tensor arguments taken from the
    replay's tensors starting at ``first_tensor``, then ``tail`` (the remaining arguments and
    constexprs in declaration order). Raises :class:`Unplannable` for what it cannot replay."""
    runner = compiled.run
    if getattr(runner, "global_scratch_size", 1) or getattr(runner, "profile_scratch_size", 1):
        raise Unplannable("the kernel needs scratch memory")
    types = list(compiled.src.signature.values())
    if len(types) != n_tensors + len(tail):
        raise Unplannable(f"{len(types)} signature entries for {n_tensors + len(tail)} arguments")
    slots, pointers = [], []
    for i, ty in enumerate(types):
        if not isinstance(ty, str):
            raise Unplannable(f"argument {i} has a tuple type {ty!r}")
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            if i < n_tensors:
                pointers.append((len(slots), first_tensor + i, 0))
                slots.append(bytes(8))
            elif tail[i - n_tensors] is None:
                slots.append(bytes(8))
            else:
                raise Unplannable(f"pointer argument {i} is not one of the leading tensors")
            continue
        if i < n_tensors:
            raise Unplannable(f"argument {i} is a tensor but the kernel takes {ty}")
        slots.append(pack_scalar(ty, tail[i - n_tensors]))
    slots += [bytes(8), bytes(8)]  # global and profile scratch: none
    num_warps, num_ctas, shared = compiled.packed_metadata
    return (int(compiled.function), *grid3, num_warps, num_ctas, shared, bool(runner.launch_cooperative_grid),
            bool(runner.launch_pdl), b"".join(slots), tuple(pointers))


def plan_specs(launches: list[tuple]) -> tuple[int, tuple]:
    """(tensors per replay, launch specs) of ``launches``: (compiled, grid3, n_tensors, tail) per launch,
    their tensors consecutive in the replay's tuple. Raises :class:`Unplannable`."""
    specs, first = [], 0
    for compiled, grid3, n_tensors, tail in launches:
        specs.append(launch_spec(compiled, grid3, n_tensors, tail, first))
        first += n_tensors
    return first, tuple(specs)


def rebased_specs(specs: tuple, mapping: list[tuple[int, int]]) -> tuple:
    """``specs`` with tensor ``i`` of their replay tuple read as tensor ``mapping[i][0]`` of another
    tuple plus ``mapping[i][1]`` bytes: a plan over views (q, k, v of a packed QKV tensor, a
    transposed output) replayed with the tensors they are views of."""
    out = []
    for spec in specs:
        pointers = tuple((slot, mapping[t][0], offset + mapping[t][1]) for slot, t, offset in spec[-1])
        out.append((*spec[:-1], pointers))
    return tuple(out)


def base_mapping(views: tuple, bases: tuple) -> Optional[list[tuple[int, int]]]:
    """For each tensor of ``views``, (index into ``bases``, byte offset of its data pointer) of the base
    tensor whose storage it lies in; None where one lies in none of them, or where two distinct
    ``bases`` share a storage (the mapping would be ambiguous)."""
    storages = {}
    for i, b in enumerate(bases):
        key = b.untyped_storage().data_ptr()
        if key in storages and bases[storages[key]] is not b:
            return None
        storages.setdefault(key, i)
    mapping = []
    for v in views:
        i = storages.get(v.untyped_storage().data_ptr())
        if i is None:
            return None
        mapping.append((i, v.data_ptr() - bases[i].data_ptr()))
    return mapping
