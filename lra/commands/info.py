"""`lra info`: versions, the accelerator, and which attention back-ends can run here (and why not).

The first command to run when something looks wrong.
"""
from __future__ import annotations

import argparse
import os


def add_parser(sub) -> None:
    parser = sub.add_parser("info", help="versions, GPU, and which attentions can run here",
                            description="Print library versions, the CUDA device, the Triton "
                                        "interpreter state and, for every registered attention, "
                                        "whether it can run on this machine and why not.")
    parser.add_argument("--device", default=None,
                        help="device to check the attentions on (default: cuda if available, else cpu)")
    parser.set_defaults(func=run)


def _cuda_line(torch) -> str:
    if not torch.cuda.is_available():
        return "none (torch.cuda.is_available() is False)"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    props = torch.cuda.get_device_properties(0)
    cap = f"sm_{props.major}{props.minor}"
    return (f"{len(names)} x {names[0]} ({cap}, {props.total_memory / 2**30:.0f} GiB), "
            f"CUDA {torch.version.cuda}, bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}")


def collect(device: str | None = None) -> dict:
    """Everything `lra info` prints, as data."""
    import torch

    from lra import provenance

    out = {
        "versions": provenance.versions(),
        "cuda": _cuda_line(torch),
        "git_rev": provenance.git_revision(),
        "device": device or ("cuda" if torch.cuda.is_available() else "cpu"),
        "attentions": {},
    }
    try:
        from lra import attention
    except Exception as err:  # noqa: BLE001 - info must explain a broken registry, not crash on it
        out["registry_error"] = f"{type(err).__name__}: {err}"
        out["triton_interpret"] = os.environ.get("TRITON_INTERPRET", "unset")
        return out
    for name, options in attention.available().items():
        try:
            ok, reason = attention.can_run(name, out["device"])
        except Exception as err:  # noqa: BLE001
            ok, reason = False, f"{type(err).__name__}: {err}"
        describe = getattr(attention, "describe", lambda n: "")
        out["attentions"][name] = {
            "can_run": ok,
            "reason": reason,
            "options": {opt: (attention.type_name(tp) if hasattr(attention, "type_name") else str(tp), default)
                        for opt, (tp, default) in options.items()},
            "description": describe(name),
        }
    # Read after the kernels were imported: without CUDA, `import kernels` turns the interpreter on.
    out["triton_interpret"] = os.environ.get("TRITON_INTERPRET", "unset")
    try:
        import kernels

        out["kernel_settings"] = kernels.kernel_settings()
    except Exception as err:  # noqa: BLE001 - reported, like a broken registry
        out["kernel_settings"] = {"error": f"{type(err).__name__}: {err}"}
    return out


def run(args: argparse.Namespace) -> int:
    info = collect(args.device)
    v = info["versions"]
    print(f"python     {v.get('python')}")
    print(f"torch      {v.get('torch')}")
    print(f"triton     {v.get('triton')}")
    print(f"lightning  {v.get('lightning')}")
    print(f"CUDA       {info['cuda']}")
    interp = info["triton_interpret"]
    note = " (Triton kernels run on CPU through the interpreter: correct, slow)" if interp == "1" else ""
    print(f"TRITON_INTERPRET={interp}{note}")
    print(f"git        {info['git_rev']}")
    ks = info.get("kernel_settings", {})
    if "error" in ks:
        print(f"kernels    failed to import: {ks['error']}")
    elif ks:
        print(f"kernels    torch.compile sees them as {ks['compile_op']} ops; dropout backward "
              f"{ks['dropout_backward']}, {ks['dropout_philox_rounds']} Philox rounds")
        if "hopper_forward" in ks:
            verb = "may run" if ks["hopper_forward"] else "never run"
            print(f"hopper     eager dense and block-sparse forwards {verb} the Hopper ping-pong kernel "
                  "(kernels.use_hopper_forward)")
        if ks.get("compile_op") == "triton_op" and ks.get("inductor_static_launch") is not None:
            print(f"inductor   launches them {'statically' if ks['inductor_static_launch'] else 'through Triton'} "
                  "(TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS)")
    if "registry_error" in info:
        print(f"\nattention registry failed to import: {info['registry_error']}")
        return 1
    print(f"\nattentions on {info['device']}:")
    width = max((len(n) for n in info["attentions"]), default=8)
    for name, entry in info["attentions"].items():
        mark = "yes" if entry["can_run"] else "NO "
        print(f"  {name:<{width}}  {mark}  {entry['reason']}")
        if entry["options"]:
            opts = ", ".join(f"{k}={d!r}" for k, (_, d) in entry["options"].items())
            print(f"  {'':<{width}}       options: {opts}")
    return 0
