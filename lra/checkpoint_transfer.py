"""Initial weights from another run's checkpoint: reading an `lra train` checkpoint, checking that it
fits a model, and copying it in with the learned 2-D positional grid upsampled by duplication (each
position of a 64 x 64 image becomes a 2 x 2 block for 128 x 128, a 4 x 4 block for 256 x 256), as
the FlashAttention paper's Path-64 -> Path-X / Path-256 transfer does (Dao et al. 2022, Appendix E.4).

`load_initial_weights(model, ckpt)` reads the checkpoint's `state_dict` and the resolved run config +
data spec that `LraModule` stores as hyper-parameters, checks that it fits the model (same sizes,
vocabulary, classes, pooling; a grid positional embedding and an integer upsampling factor when the
image grows) and copies it in. Anything that does not fit is one `IncompatibleCheckpoint` (a
`ValueError`) naming every mismatch. `InitialWeights` does the same as a Lightning callback when a
fresh fit starts (`lra train --init-from`, the fine-tune stages of `lra.transfer_chain`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn

from lra.checkpoints import UnsafeCheckpoint, load_checkpoint
from lra.config import ModelConfig, RunConfig
from lra.model import DataSpec, MultiHeadSelfAttention
from lra.positional import AxialPositionalEmbedding, GridPositionalEmbedding, upsample_axial, upsample_grid

# Lightning checkpoints of `LraModule` prefix every weight with the attribute holding the network.
STATE_PREFIX = "model."

# Model-config fields that must agree between a checkpoint and the model it initialises, with the
# words an error uses for them.
ARCHITECTURE_FIELDS = {
    "dim": "width (model.dim)",
    "depth": "depth (model.depth)",
    "num_heads": "heads (model.num_heads)",
    "head_dim": "head dim (model.head_dim)",
    "mlp_dim": "MLP width (model.mlp_dim)",
    "pooling": "pooling (model.pooling)",
    "activation": "activation (model.activation)",
    "positional": "positional embedding (model.positional)",
    "pixel_embedding": "pixel embedding (model.pixel_embedding)",
}


class IncompatibleCheckpoint(ValueError):
    """The checkpoint cannot initialise the model; the message names the file and every mismatch."""


# ================================================================================================
# reading a checkpoint
# ================================================================================================
@dataclass(frozen=True)
class SourceCheckpoint:
    """What a checkpoint of an `lra train` run holds that a transfer needs."""

    path: Path
    state_dict: dict            # network weights, without the "model." prefix
    config: RunConfig           # the run that wrote it
    data_spec: DataSpec

    @property
    def model_config(self) -> ModelConfig:
        return self.config.model

    def describe(self) -> str:
        shape = self.data_spec.image_shape
        size = f"{shape[0]}x{shape[1]}" if shape else f"{self.data_spec.max_len} tokens"
        return f"{self.config.task}/{self.config.attention} {self.config.run_id()} ({size})"


def read_checkpoint(path: str | Path) -> SourceCheckpoint:
    """Load `path` (a `.ckpt` written by `lra train`) on the CPU; IncompatibleCheckpoint if it is not one."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p.name for p in path.glob("**/*.ckpt"))
        hint = (f"; it holds {', '.join(found[:4])}{' ...' if len(found) > 4 else ''}" if found else
                "; pass a .ckpt file such as <run>/checkpoints/last.ckpt")
        raise IncompatibleCheckpoint(f"checkpoint {path} is a folder, not a checkpoint file{hint}")
    if not path.is_file():
        raise IncompatibleCheckpoint(f"checkpoint {path}: no such file")
    try:
        raw = load_checkpoint(path)
    except UnsafeCheckpoint as err:
        raise IncompatibleCheckpoint(str(err)) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("state_dict"), dict):
        what = "a bare state_dict" if isinstance(raw, dict) and raw and all(
            isinstance(v, torch.Tensor) for v in raw.values()) else f"a {type(raw).__name__}"
        raise IncompatibleCheckpoint(f"{path} is not a Lightning checkpoint of an lra run (it holds {what} "
                                     f"without 'state_dict'); use a checkpoint that `lra train` wrote")
    hparams = raw.get("hyper_parameters") or {}
    if not isinstance(hparams, dict) or "config" not in hparams or "data_spec" not in hparams:
        raise IncompatibleCheckpoint(f"{path} is a Lightning checkpoint but not of an lra run: its "
                                     f"hyper-parameters lack the run config and data spec that `lra train` stores")
    try:
        config = RunConfig.from_dict(hparams["config"])
        spec = DataSpec.from_dict(hparams["data_spec"])
    except (TypeError, ValueError) as err:
        raise IncompatibleCheckpoint(f"{path}: the run config stored in it cannot be read ({err})") from None
    state = {}
    for key, value in raw["state_dict"].items():
        if not key.startswith(STATE_PREFIX):
            continue  # metric states and the like belong to the LightningModule, not the network
        state[key[len(STATE_PREFIX):].replace("_orig_mod.", "")] = value
    if not state:
        raise IncompatibleCheckpoint(f"{path}: its state_dict holds no network weights (no '{STATE_PREFIX}*' keys)")
    return SourceCheckpoint(path=path, state_dict=state, config=config, data_spec=spec)


# ================================================================================================
# compatibility and the upsampling factor
# ================================================================================================
def _size(shape) -> str:
    return f"{shape[0]}x{shape[1]}"


def grid_factor(source_shape: tuple[int, int], target_shape: tuple[int, int]) -> int:
    """The integer k >= 1 with target = k * source on both image sides; ValueError otherwise."""
    (sh, sw), (th, tw) = source_shape, target_shape
    if th < sh or tw < sw:
        raise IncompatibleCheckpoint(f"the target image {_size(target_shape)} is smaller than the checkpoint's "
                                     f"{_size(source_shape)}: grid duplication only enlarges")
    if th % sh or tw % sw:
        raise IncompatibleCheckpoint(f"the target image {_size(target_shape)} is not an integer multiple of the "
                                     f"checkpoint's {_size(source_shape)} (factor {th / sh:g} x {tw / sw:g}); "
                                     f"grid duplication needs an integer factor")
    if th // sh != tw // sw:
        raise IncompatibleCheckpoint(f"the target image {_size(target_shape)} scales the checkpoint's "
                                     f"{_size(source_shape)} by {th // sh} x {tw // sw}: grid duplication "
                                     f"needs the same factor on both sides")
    return th // sh


def check_compatible(source: SourceCheckpoint, model_config: ModelConfig, data_spec: DataSpec) -> int:
    """Raise IncompatibleCheckpoint unless `source` can initialise a model of `model_config` for data
    `data_spec`; returns the grid-duplication factor (1 = same positions, copied as they are)."""
    src_cfg, src_spec = source.model_config, source.data_spec
    problems = []
    for name, words in ARCHITECTURE_FIELDS.items():
        a, b = getattr(src_cfg, name), getattr(model_config, name)
        if a != b:
            problems.append(f"{words} {a} in the checkpoint vs {b} here")
    if src_spec.vocab_size != data_spec.vocab_size:
        problems.append(f"vocabulary {src_spec.vocab_size} tokens in the checkpoint vs {data_spec.vocab_size} here")
    if src_spec.num_classes != data_spec.num_classes:
        problems.append(f"{src_spec.num_classes} classes in the checkpoint vs {data_spec.num_classes} here")
    if src_spec.dual != data_spec.dual:
        problems.append(f"{'dual' if src_spec.dual else 'single'}-sequence model in the checkpoint vs "
                        f"{'dual' if data_spec.dual else 'single'}-sequence here")
    if problems:
        raise IncompatibleCheckpoint(f"checkpoint {source.path} ({source.describe()}) does not fit this model: "
                                     + "; ".join(problems))

    same_positions = (src_spec.max_len == data_spec.max_len and src_spec.image_shape == data_spec.image_shape
                      and src_cfg.grid_positions == model_config.grid_positions)
    if same_positions:
        return 1  # nothing to upsample: every positional kind copies as it is
    where = f"checkpoint {source.path} ({source.describe()})"
    target = (_size(data_spec.image_shape) if data_spec.image_shape else f"{data_spec.max_len} tokens")
    if src_cfg.positional not in ("learned", "axial"):
        raise IncompatibleCheckpoint(f"{where} uses {src_cfg.positional} positions, which have no learned 2-D grid "
                                     f"to upsample to {target}; transfer needs model.positional=learned with "
                                     f"model.grid_positions=true (or model.positional=axial)")
    for side, cfg, spec in (("checkpoint", src_cfg, src_spec), ("target model", model_config, data_spec)):
        if spec.image_shape is None:
            raise IncompatibleCheckpoint(f"{where}: the {side} is not of an image task ({spec.max_len} tokens, "
                                         f"no image shape), so its positions cannot be upsampled by grid duplication")
        if cfg.positional == "learned" and not cfg.grid_positions:
            raise IncompatibleCheckpoint(f"{where}: the {side} has flat learned positions (model.grid_positions="
                                         f"false), not a 2-D grid; grid duplication needs model.grid_positions=true")
    try:
        return grid_factor(src_spec.image_shape, data_spec.image_shape)
    except IncompatibleCheckpoint as err:
        raise IncompatibleCheckpoint(f"{where}: {err}") from None


# ================================================================================================
# copying the weights
# ================================================================================================
@dataclass
class TransferReport:
    """What `load_initial_weights` did (also written to a stage's init.json)."""

    source: str
    source_run: str
    factor: int
    copied: int = 0                                     # tensors copied (upsampled ones included)
    upsampled: list = field(default_factory=list)       # grid positional tables, duplicated factor x factor
    kept: list = field(default_factory=list)            # attention-core state absent from the checkpoint
    ignored: list = field(default_factory=list)         # attention-core state of the checkpoint not used here

    def describe(self) -> str:
        text = f"initial weights from {self.source} ({self.source_run}): {self.copied} tensors copied"
        if self.upsampled:
            text += f", positional grid duplicated {self.factor}x{self.factor}"
        if self.kept:
            text += f"; kept this attention's own {', '.join(self.kept)}"
        if self.ignored:
            text += f"; ignored the checkpoint's attention state {', '.join(self.ignored)}"
        return text

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _core_prefixes(net: nn.Module) -> tuple[str, ...]:
    """Key prefixes of the attention mechanisms' own state (random features, Linformer projections)."""
    return tuple(f"{name}.core." for name, module in net.named_modules()
                 if isinstance(module, MultiHeadSelfAttention))


def transferred_state_dict(source: SourceCheckpoint, net: nn.Module, factor: int) -> tuple[dict, TransferReport]:
    """The checkpoint's weights, grid tables duplicated `factor` x `factor`, checked key by key
    against `net`'s own state. State owned by an attention mechanism (`<block>.attention.core.*`)
    may be absent on one side — e.g. Performer's random features when the checkpoint was trained
    with FlashAttention — and is then left as the model built it; everything else must match."""
    target = net.state_dict()
    # key -> (rank, what it is, its grid duplication): the (H, W, dim) grid tables, and the rows and
    # columns of axial positions, each duplicated factor times (= grid duplication of their sum)
    upsample = {f"{name}.weight": (3, "an (H, W, dim) grid", upsample_grid) for name, module in net.named_modules()
                if isinstance(module, GridPositionalEmbedding)}
    upsample.update({f"{name}.{axis}": (2, "an (L, dim) axis table", upsample_axial)
                     for name, module in net.named_modules() if isinstance(module, AxialPositionalEmbedding)
                     for axis in ("rows", "cols")})
    cores = _core_prefixes(net)
    report = TransferReport(source=str(source.path), source_run=source.describe(), factor=factor)
    missing = [k for k in target if k not in source.state_dict]
    unexpected = [k for k in source.state_dict if k not in target]
    report.kept = [k for k in missing if k.startswith(cores)]
    report.ignored = [k for k in unexpected if k.startswith(cores)]
    missing = [k for k in missing if k not in report.kept]
    unexpected = [k for k in unexpected if k not in report.ignored]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"the model has {len(missing)} weight(s) the checkpoint lacks ({', '.join(missing[:4])}"
                         f"{' ...' if len(missing) > 4 else ''})")
        if unexpected:
            parts.append(f"the checkpoint has {len(unexpected)} weight(s) the model lacks ({', '.join(unexpected[:4])}"
                         f"{' ...' if len(unexpected) > 4 else ''})")
        raise IncompatibleCheckpoint(f"checkpoint {source.path} ({source.describe()}) does not fit this model: "
                                     + "; ".join(parts))
    state: dict = {}
    for key, ref in target.items():
        if key in report.kept:
            continue
        value = source.state_dict[key]
        if not isinstance(ref, torch.Tensor) or not isinstance(value, torch.Tensor):
            if isinstance(ref, torch.Tensor) != isinstance(value, torch.Tensor):
                raise IncompatibleCheckpoint(f"checkpoint {source.path}: {key} is a {type(value).__name__} "
                                             f"but the model needs a {type(ref).__name__}")
            state[key] = value  # a module's extra state (e.g. Performer's feature-redraw counters)
            continue
        if key in upsample and factor != 1:
            rank, what, duplicate = upsample[key]
            if value.dim() != rank:
                raise IncompatibleCheckpoint(f"checkpoint {source.path}: {key} has shape {tuple(value.shape)}, "
                                             f"not {what}")
            value = duplicate(value, factor)
            report.upsampled.append(key)
        if value.shape != ref.shape:
            after = f" after {factor}x{factor} grid duplication" if key in report.upsampled else ""
            owner = (f" (state of the attention mechanism: {source.config.attention} in the checkpoint; it depends "
                     f"on the sequence length and cannot be transferred)" if key.startswith(cores) else "")
            raise IncompatibleCheckpoint(f"checkpoint {source.path}: {key} has shape {tuple(value.shape)}{after} "
                                         f"but the model needs {tuple(ref.shape)}{owner}")
        state[key] = value.to(dtype=ref.dtype) if value.is_floating_point() else value
        report.copied += 1
    if upsample and factor != 1 and not report.upsampled:
        raise IncompatibleCheckpoint(f"checkpoint {source.path}: no grid positional table to upsample")
    return state, report


def _unwrap(model: nn.Module, model_config: ModelConfig | None, data_spec: DataSpec | None):
    """(network, model config, data spec) of an `LraModule` or of a bare network plus its configs."""
    run_config = getattr(model, "run_config", None)
    if isinstance(run_config, RunConfig) and isinstance(getattr(model, "model", None), nn.Module):
        return model.model, model_config or run_config.model, data_spec or model.spec
    if model_config is None or data_spec is None:
        raise TypeError("load_initial_weights: pass model_config= and data_spec= with a bare network "
                        "(an LraModule carries both)")
    return model, model_config, data_spec


def load_initial_weights(model: nn.Module, ckpt_path: str | Path, *, model_config: ModelConfig | None = None,
                         data_spec: DataSpec | None = None) -> TransferReport:
    """Initialise `model` (an `LraModule`, or the network of `lra.model.build_model` together with its
    `model_config` and `data_spec`) from the checkpoint `ckpt_path` of an `lra train` run.

    Every weight is copied; the grid positional table is upsampled by duplication with factor
    target side / source side (64 -> 128: 2, 64 -> 256: 4). Raises `IncompatibleCheckpoint` (a
    ValueError) naming the mismatch for a missing or unreadable file, a checkpoint of another
    architecture (width, depth, heads, head dim, MLP, pooling, activation), vocabulary, number of
    classes, for a non-grid positional embedding when the length changes, and for a non-integer
    factor. Nothing is modified unless everything fits.
    """
    net, model_config, data_spec = _unwrap(model, model_config, data_spec)
    source = read_checkpoint(ckpt_path)
    factor = check_compatible(source, model_config, data_spec)
    state, report = transferred_state_dict(source, net, factor)
    with torch.no_grad():
        net.load_state_dict(state, strict=False)  # strictness was checked above, key by key
    return report


class InitialWeights(pl.Callback):
    """Load initial weights into the LightningModule when a fresh `fit` starts.

    A run resumed from its own checkpoint restores its weights from there instead: the callback's
    state (saved in every checkpoint of the run) marks the run as initialised, and Lightning restores
    it before `on_fit_start`.
    """

    def __init__(self, ckpt_path: str | Path, *, verbose: bool = True, on_load=None):
        super().__init__()
        self.ckpt_path = Path(ckpt_path)
        self.verbose = verbose
        self.on_load = on_load          # called with the TransferReport on global rank 0
        self.restored = False
        self.report: TransferReport | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.restored:
            return
        self.report = load_initial_weights(pl_module, self.ckpt_path)
        if trainer.is_global_zero:
            if self.verbose:
                print(self.report.describe(), flush=True)
            if self.on_load is not None:
                self.on_load(self.report)

    def state_dict(self) -> dict:
        return {"init_from": str(self.ckpt_path)}

    def load_state_dict(self, state_dict: dict) -> None:
        self.restored = True
