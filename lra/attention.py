"""The attention registry: the one place that maps a name + typed options to an attention module.

    build(name, **options) -> nn.Module          forward(q, k, v, key_padding_mask=None) -> (B, H, N, d)
    available()            -> {name: {option: (type, default)}}
    describe(name)         -> one-line description;   option_help(name) -> {option: help}
    presets(name)          -> {preset: {option: value}} (e.g. the LRA-faithful settings)
    can_run(name, device, options=None) -> (bool, reason)
    kernel_limit_problem(name, options, dtype=None, batch_size=None, sequences_per_example=1)
                           -> why our kernels refuse these settings, or None
    max_supported_len(name, options) / min_supported_len(name, options) -> int | None

Options come in two kinds (docs/interfaces.md):
- context options, the same for every attention and passed by the model for every layer:
  num_heads, head_dim, max_len, dropout, layer_idx, seed (`AttentionContext`); an attention ignores
  what it does not need;
- attention options, one frozen dataclass per entry (`PerformerOptions`, ...).
Values may arrive from the CLI as strings; they are converted to the dataclass field's type by
`lra.coercion.coerce`, the rules of config fields. Unknown names, unknown options and bad values
raise ValueError naming the culprit and listing what is valid.

Entries `flash` and `flash_sparse` wrap `kernels`, which is imported only when they are built (or
checked by `can_run`), so this registry imports even while the kernels are missing or broken.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from baselines.bigbird import BigBirdAttention
from baselines.bigbird_pattern import min_blocks
from baselines.flash import SPARSE_LAYOUTS, BlockSparseFlashAttention, FlashAttention, SparseLayoutName
from baselines.flash import import_kernels, sparse_layout_arguments, triton_cpu_problem
from baselines.linformer import LinformerAttention, LinformerSharing, shared_layerwise_projection
from baselines.performer import FeatureType, PerformerAttention, PerformerKernel
from baselines.sdpa import SdpaAttention, SdpaBackendName, sdpa_backend_support
from baselines.seeding import derive_seed
from baselines.softmax import SoftmaxAttention
from lra.attention_names import ATTENTION_OPTIONS
from lra.coercion import coerce, type_name

__all__ = [
    "AttentionContext",
    "available",
    "build",
    "can_run",
    "context_options",
    "describe",
    "kernel_limit_problem",
    "max_supported_len",
    "min_supported_len",
    "names",
    "option_help",
    "presets",
    "resolve_options",
    "type_name",
]


def _option(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


def _require(condition: bool, owner: str, option: str, message: str) -> None:
    if not condition:
        raise ValueError(f"{owner}: option {option!r} {message}")


# ----------------------------------------------------------------------------------------------
# context options (the same for every attention)
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AttentionContext:
    """What the model tells every attention layer it builds."""

    num_heads: int | None = _option(None, "number of attention heads of the layer")
    head_dim: int | None = _option(None, "dimension per head (d)")
    max_len: int | None = _option(None, "longest sequence length N the layer will see")
    dropout: float = _option(0.0, "attention-probability dropout (training mode only)")
    layer_idx: int = _option(0, "index of the layer in the model (0-based); seeds per-layer randomness")
    seed: int = _option(0, "run seed; random features / patterns derive from (seed, layer_idx)")

    def __post_init__(self) -> None:
        owner = "attention context"
        for name in ("num_heads", "head_dim", "max_len"):
            value = getattr(self, name)
            _require(value is None or value >= 1, owner, name, f"must be >= 1, got {value}")
        _require(0.0 <= self.dropout < 1.0, owner, "dropout", f"must be in [0, 1), got {self.dropout}")
        _require(self.layer_idx >= 0, owner, "layer_idx", f"must be >= 0, got {self.layer_idx}")

    def need(self, attention: str, *names: str) -> None:
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            raise ValueError(
                f"attention {attention!r} needs the context option(s) {', '.join(missing)} "
                f"(the model passes them: build({attention!r}, num_heads=..., head_dim=..., max_len=...))"
            )


# ----------------------------------------------------------------------------------------------
# attention options, one dataclass per entry
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NoOptions:
    """This attention has no options of its own."""


@dataclass(frozen=True)
class SdpaOptions:
    backend: SdpaBackendName = _option(
        "auto", "SDPA back-end: auto, flash (CUDA: no key padding), cudnn, efficient (CUDA only), math"
    )


@dataclass(frozen=True)
class FlashSparseOptions:
    layout: SparseLayoutName = _option("bigbird", "block layout from kernels.layouts: " + ", ".join(SPARSE_LAYOUTS))
    block_size: int = _option(128, "block size of the layout and the kernel (128 on GPU; use 16-32 for CPU tests)")
    window: int | None = _option(None, "odd window in blocks (default: 3; butterfly: 1 = none)")
    num_random: int | None = _option(None, "random blocks per row (bigbird only; default 3)")
    num_global: int | None = _option(
        None,
        "global blocks (bigbird: first/last, default 2; longformer: first, default 1; butterfly: first, default 0)",
    )
    num_factors: int | None = _option(None, "butterfly factors (butterfly only; default log2 of the block count)")
    layout_seed: int | None = _option(
        None, "seed of bigbird's random blocks; default: derived from the context (seed, layer_idx)"
    )

    def __post_init__(self) -> None:
        owner = "attention 'flash_sparse'"
        _require(self.block_size >= 1, owner, "block_size", f"must be >= 1, got {self.block_size}")
        for name in ("window", "num_random", "num_global", "num_factors"):
            value = getattr(self, name)
            _require(value is None or value >= 0, owner, name, f"must be >= 0, got {value}")
        _require(self.window is None or self.window % 2 == 1, owner, "window", f"must be odd, got {self.window}")
        _require(
            self.layout_seed is None or self.layout == "bigbird",
            owner,
            "layout_seed",
            "applies only to layout='bigbird'",
        )
        sparse_layout_arguments(  # rejects options that do not apply to the layout
            self.layout,
            window=self.window,
            num_random=self.num_random,
            num_global=self.num_global,
            num_factors=self.num_factors,
        )


@dataclass(frozen=True)
class PerformerOptions:
    nb_features: int = _option(256, "number of random features m")
    kernel: PerformerKernel = _option("softmax", "softmax (positive random features) or relu (generalised attention)")
    feature_type: FeatureType = _option(
        "ortho", "ortho (block-orthogonal), iid, or deterministic (relu only: phi(x) = relu(x) + eps, as in LRA)"
    )
    redraw_interval: int = _option(1000, "redraw the features every this many training steps (0 = never)")
    eps: float | None = _option(None, "additive feature stabiliser (default 1e-6 softmax, 1e-3 relu)")

    def __post_init__(self) -> None:
        owner = "attention 'performer'"
        _require(self.nb_features >= 1, owner, "nb_features", f"must be >= 1, got {self.nb_features}")
        _require(self.redraw_interval >= 0, owner, "redraw_interval", f"must be >= 0, got {self.redraw_interval}")
        _require(self.eps is None or self.eps >= 0, owner, "eps", f"must be >= 0, got {self.eps}")
        _require(
            self.feature_type != "deterministic" or self.kernel == "relu",
            owner,
            "feature_type",
            "'deterministic' (no random projection) needs kernel='relu'",
        )


@dataclass(frozen=True)
class LinformerOptions:
    proj_k: int = _option(256, "projected length k (256 as in Nystromformer's LRA runs; the LRA code used 16)")
    sharing: LinformerSharing = _option(
        "headwise", "none (per head), headwise (E, F per layer), kv (E = F per layer), layerwise (one E for all layers)"
    )

    def __post_init__(self) -> None:
        _require(self.proj_k >= 1, "attention 'linformer'", "proj_k", f"must be >= 1, got {self.proj_k}")


@dataclass(frozen=True)
class BigBirdOptions:
    block_size: int = _option(64, "block size in tokens")
    window: int = _option(3, "sliding window in blocks (odd)")
    num_random: int = _option(3, "random blocks per query block")

    def __post_init__(self) -> None:
        owner = "attention 'bigbird'"
        _require(self.block_size >= 1, owner, "block_size", f"must be >= 1, got {self.block_size}")
        _require(self.window >= 1 and self.window % 2 == 1, owner, "window", f"must be odd and >= 1, got {self.window}")
        _require(self.num_random >= 0, owner, "num_random", f"must be >= 0, got {self.num_random}")


# ----------------------------------------------------------------------------------------------
# factories
# ----------------------------------------------------------------------------------------------
def _softmax(ctx: AttentionContext, opts: NoOptions) -> nn.Module:
    return SoftmaxAttention(dropout=ctx.dropout)


def _sdpa(ctx: AttentionContext, opts: SdpaOptions) -> nn.Module:
    return SdpaAttention(backend=opts.backend, dropout=ctx.dropout)


def _flash(ctx: AttentionContext, opts: NoOptions) -> nn.Module:
    return FlashAttention(dropout=ctx.dropout)


def _flash_sparse(ctx: AttentionContext, opts: FlashSparseOptions) -> nn.Module:
    ctx.need("flash_sparse", "max_len", "num_heads")
    seed = opts.layout_seed if opts.layout_seed is not None else derive_seed("flash_sparse", ctx.seed, ctx.layer_idx)
    return BlockSparseFlashAttention(
        max_len=ctx.max_len,
        num_heads=ctx.num_heads,
        layout=opts.layout,
        block_size=opts.block_size,
        dropout=ctx.dropout,
        window=opts.window,
        num_random=opts.num_random,
        num_global=opts.num_global,
        num_factors=opts.num_factors,
        seed=seed,
    )


def _performer(ctx: AttentionContext, opts: PerformerOptions) -> nn.Module:
    ctx.need("performer", "head_dim")
    return PerformerAttention(
        head_dim=ctx.head_dim,
        nb_features=opts.nb_features,
        kernel=opts.kernel,
        feature_type=opts.feature_type,
        redraw_interval=opts.redraw_interval,
        eps=opts.eps,
        seed=ctx.seed,
        layer_idx=ctx.layer_idx,
    )


def _linformer(ctx: AttentionContext, opts: LinformerOptions) -> nn.Module:
    ctx.need("linformer", "max_len", "num_heads")
    projection = None
    if opts.sharing == "layerwise":
        projection = shared_layerwise_projection(ctx.max_len, opts.proj_k, ctx.seed, ctx.layer_idx)
    return LinformerAttention(
        num_heads=ctx.num_heads,
        max_len=ctx.max_len,
        proj_k=opts.proj_k,
        sharing=opts.sharing,
        dropout=ctx.dropout,
        projection=projection,
    )


def _bigbird(ctx: AttentionContext, opts: BigBirdOptions) -> nn.Module:
    ctx.need("bigbird", "num_heads")
    return BigBirdAttention(
        num_heads=ctx.num_heads,
        block_size=opts.block_size,
        window=opts.window,
        num_random=opts.num_random,
        seed=ctx.seed,
        layer_idx=ctx.layer_idx,
        max_len=ctx.max_len,
        dropout=ctx.dropout,
    )


@dataclass(frozen=True)
class AttentionEntry:
    factory: Callable[[AttentionContext, Any], nn.Module]
    options: type
    description: str
    presets: dict[str, dict[str, Any]] = field(default_factory=dict)
    uses_kernels: bool = False


_REGISTRY: dict[str, AttentionEntry] = {
    "flash": AttentionEntry(
        _flash,
        NoOptions,
        "our Triton FlashAttention kernel: dense, exact, O(N) memory (key padding, dropout)",
        uses_kernels=True,
    ),
    "flash_sparse": AttentionEntry(
        _flash_sparse,
        FlashSparseOptions,
        "our block-sparse Triton FlashAttention kernel; layout (bigbird/local/longformer/butterfly) "
        "built once for max_len",
        uses_kernels=True,
    ),
    "softmax": AttentionEntry(
        _softmax,
        NoOptions,
        "standard Transformer attention: materialised N x N scores, float32 softmax (the speed-up anchor)",
    ),
    "sdpa": AttentionEntry(
        _sdpa,
        SdpaOptions,
        "torch scaled_dot_product_attention pinned to a back-end (auto/flash/cudnn/efficient/math)",
    ),
    "performer": AttentionEntry(
        _performer,
        PerformerOptions,
        "Performer FAVOR+ (Choromanski et al. 2021): m=256 positive orthogonal random features, fp32; "
        "preset 'lra': relu kernel without projection, as the LRA code ran it",
        presets={"lra": {"kernel": "relu", "feature_type": "deterministic"}},
    ),
    "linformer": AttentionEntry(
        _linformer,
        LinformerOptions,
        "Linformer (Wang et al. 2020): learned k x max_len sequence projections, k=256 (Nystromformer's LRA setting); "
        "preset 'lra': k=16 shared by K and V, as the LRA code ran it",
        presets={"lra": {"proj_k": 16, "sharing": "kv"}},
    ),
    "bigbird": AttentionEntry(
        _bigbird,
        BigBirdOptions,
        "BigBird-ITC (Zaheer et al. 2020) in plain PyTorch: block 64, window 3, first/last global, 3 random blocks",
    ),
}


def _check_names() -> None:
    """The registry and `lra.attention_names` (what the command line is built from) agree."""
    registered = {name: tuple(f.name for f in dataclasses.fields(e.options)) for name, e in _REGISTRY.items()}
    if registered != ATTENTION_OPTIONS:
        raise RuntimeError(f"lra.attention_names.ATTENTION_OPTIONS {ATTENTION_OPTIONS} differs from the registry's "
                           f"attentions and options {registered}; update it")


_check_names()


# ----------------------------------------------------------------------------------------------
# typed options (values converted by lra.coercion, as config fields are)
# ----------------------------------------------------------------------------------------------
def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _instantiate(cls: type, values: dict[str, Any], owner: str) -> Any:
    types_ = _field_types(cls)
    converted = {name: coerce(value, types_[name], f"{owner} option {name!r}") for name, value in values.items()}
    return cls(**converted)


def _entry(name: str) -> AttentionEntry:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown attention {name!r}; valid: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


_CONTEXT_FIELDS = tuple(f.name for f in dataclasses.fields(AttentionContext))


def _split(name: str, options: dict[str, Any]) -> tuple[AttentionContext, Any]:
    entry = _entry(name)
    option_names = [f.name for f in dataclasses.fields(entry.options)]
    unknown = [k for k in options if k not in _CONTEXT_FIELDS and k not in option_names]
    if unknown:
        valid = ", ".join(option_names) if option_names else "(none)"
        raise ValueError(
            f"attention {name!r}: unknown option(s) {', '.join(map(repr, unknown))}; "
            f"its options: {valid}; context options: {', '.join(_CONTEXT_FIELDS)}"
        )
    context = {k: v for k, v in options.items() if k in _CONTEXT_FIELDS}
    own = {k: v for k, v in options.items() if k not in _CONTEXT_FIELDS}
    ctx = _instantiate(AttentionContext, context, f"attention {name!r}")
    opts = _instantiate(entry.options, own, f"attention {name!r}")
    return ctx, opts


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------
def names() -> list[str]:
    """Registered attention names, in listing order."""
    return list(_REGISTRY)


def build(name: str, **options: Any) -> nn.Module:
    """A ready attention module: `build('performer', num_heads=4, head_dim=64, nb_features='128')`."""
    ctx, opts = _split(name, options)
    return _REGISTRY[name].factory(ctx, opts)


def resolve_options(name: str, **options: Any) -> dict[str, Any]:
    """The attention's own options, typed and with defaults filled in (context options dropped)."""
    _, opts = _split(name, options)
    return dataclasses.asdict(opts)


def available() -> dict[str, dict[str, tuple[Any, Any]]]:
    """{name: {option: (type, default)}} for every registered attention (context options excluded)."""
    out = {}
    for name, entry in _REGISTRY.items():
        types_ = _field_types(entry.options)
        out[name] = {f.name: (types_[f.name], f.default) for f in dataclasses.fields(entry.options)}
    return out


def context_options() -> dict[str, tuple[Any, Any]]:
    """{option: (type, default)} of the context options every attention accepts."""
    types_ = _field_types(AttentionContext)
    return {f.name: (types_[f.name], f.default) for f in dataclasses.fields(AttentionContext)}


def describe(name: str) -> str:
    """One line saying what the attention is."""
    return _entry(name).description


def option_help(name: str) -> dict[str, str]:
    """{option: help text} of one attention's own options."""
    return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(_entry(name).options)}


def uses_kernels(name: str) -> bool:
    """Whether the attention runs our Triton kernels (on CPU: through Triton's interpreter); False for
    a name the registry does not hold."""
    return name in _REGISTRY and _REGISTRY[name].uses_kernels


def presets(name: str) -> dict[str, dict[str, Any]]:
    """Named option sets of one attention, e.g. presets('linformer')['lra'] == {'proj_k': 16, 'sharing': 'kv'}."""
    return {k: dict(v) for k, v in _entry(name).presets.items()}


def can_run(name: str, device: str | torch.device = "cpu", options: dict[str, Any] | None = None) -> tuple[bool, str]:
    """(True, how) if `name` (with `options`) can run on `device` here, else (False, why)."""
    entry = _entry(name)
    ctx, opts = _split(name, dict(options or {}))
    try:
        device_type = torch.device(device).type
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"can_run: bad device {device!r}: {err}") from None
    if device_type == "cuda" and not torch.cuda.is_available():
        return False, "CUDA requested but torch.cuda.is_available() is False"
    if name == "sdpa":
        return sdpa_backend_support(opts.backend, device_type, ctx.dropout)
    if not entry.uses_kernels:
        return True, "plain PyTorch: runs on any device"
    try:
        kernels = import_kernels()
    except ImportError as err:
        return False, str(err)
    wanted = "flash_attention" if name == "flash" else "block_sparse_flash_attention"
    if not hasattr(kernels, wanted) or (name == "flash_sparse" and not hasattr(kernels, "layouts")):
        return False, f"`kernels` imported but lacks `{wanted}`{' or `layouts`' if name == 'flash_sparse' else ''}"
    if device_type == "cuda":
        return True, "Triton kernel on CUDA"
    if device_type == "cpu":
        problem = triton_cpu_problem()
        if problem is None:
            return True, "runs through the Triton interpreter on CPU (TRITON_INTERPRET=1): correct but slow"
        return False, problem
    return False, f"Triton kernels run on CUDA (or CPU through the interpreter), not on {device_type}"


def kernel_limit_problem(name: str, options: dict[str, Any] | None = None, dtype: torch.dtype | None = None,
                         batch_size: int | None = None, sequences_per_example: int = 1) -> str | None:
    """Why our Triton kernels would refuse `name` built with `options` (context options head_dim and
    num_heads, flash_sparse's block_size) on inputs of `dtype` in batches of `batch_size` examples of
    `sequences_per_example` sequences each (two for a dual encoder), or None: the limits
    `kernels.validation` and `kernels.block_sparse` enforce at the first call, checked before a run
    starts. None too for an attention without our kernels, and when the kernels cannot be imported
    (`can_run` says why)."""
    entry = _entry(name)
    ctx, opts = _split(name, dict(options or {}))
    if not entry.uses_kernels:
        return None
    try:
        import_kernels()
        from kernels.block_sparse import SUPPORTED_BLOCK_SIZES
        from kernels.validation import MAX_BATCH_HEADS, MAX_HEAD_DIM, SUPPORTED_DTYPES
    except ImportError:
        return None
    if ctx.head_dim is not None and not 1 <= ctx.head_dim <= MAX_HEAD_DIM:
        return (f"head_dim {ctx.head_dim} (model.head_dim) is not supported: the kernels take 1 <= head_dim <= "
                f"{MAX_HEAD_DIM}")
    if dtype is not None and dtype not in SUPPORTED_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
        return f"the kernels take {names} inputs, not {str(dtype).removeprefix('torch.')} (train.precision)"
    if name == "flash_sparse" and opts.block_size not in SUPPORTED_BLOCK_SIZES:
        return (f"block_size {opts.block_size} (attention.block_size) is not supported: the block-sparse kernel "
                f"takes one of {', '.join(map(str, SUPPORTED_BLOCK_SIZES))}")
    if batch_size is not None and ctx.num_heads is not None:
        per_example = ctx.num_heads * sequences_per_example
        if batch_size * per_example > MAX_BATCH_HEADS:
            most = MAX_BATCH_HEADS // per_example
            documents = f" x {sequences_per_example} sequences per example" if sequences_per_example > 1 else ""
            split = next((k for k in range(2, batch_size + 1) if batch_size % k == 0 and batch_size // k <= most), None)
            example = (f", e.g. train.batch_size={batch_size // split} and train.accumulate_grad_batches {split} times "
                       f"as large" if split else "")
            fix = (f"use train.batch_size={most} or less, with gradient accumulation (train.accumulate_grad_batches) "
                   f"for the same effective batch{example}" if most else "use fewer heads")
            return (f"batch size {batch_size} (train.batch_size) x {ctx.num_heads} heads (model.num_heads){documents} "
                    f"= {batch_size * per_example:,} (batch, head) pairs, more than the {MAX_BATCH_HEADS:,} the kernels "
                    f"take in one call (CUDA's launch grid); {fix}")
    return None


def max_supported_len(name: str, options: dict[str, Any] | None = None) -> int | None:
    """Longest N the attention built with `options` accepts (None = no limit)."""
    ctx, _ = _split(name, dict(options or {}))
    if name in ("linformer", "flash_sparse"):
        ctx.need(name, "max_len")
        return ctx.max_len
    return None


def min_supported_len(name: str, options: dict[str, Any] | None = None) -> int | None:
    """Shortest N the attention built with `options` accepts (None = no limit).

    For flash_sparse this bounds max_len (its layout is built once for max_len, then sliced)."""
    _, opts = _split(name, dict(options or {}))
    if name == "bigbird":
        return (min_blocks(opts.window, opts.num_random) - 1) * opts.block_size + 1
    if name == "flash_sparse" and opts.layout == "bigbird":
        # The layout is built for max_len, which needs num_global + window + num_random blocks.
        layout = sparse_layout_arguments(
            "bigbird", window=opts.window, num_random=opts.num_random, num_global=opts.num_global
        )
        blocks = layout["num_global"] + layout["window"] + layout["num_random"]
        return (blocks - 1) * opts.block_size + 1
    return None
