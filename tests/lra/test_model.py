"""The LRA encoder classifier, dual encoder and positional embeddings."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lra import attention as registry
from lra.config import ModelConfig
from lra.model import DataSpec, DualEncoderClassifier, Encoder, SequenceClassifier, build_model
from lra.positional import (AxialPositionalEmbedding, GridPositionalEmbedding, LearnedPositionalEmbedding,
                            SinusoidalPositionalEmbedding, upsample_grid)

TINY = ModelConfig(dim=16, depth=2, num_heads=2, head_dim=8, mlp_dim=32, dropout=0.0, attention_dropout=0.0)


class DoubleAttention(nn.Module):
    """Test double for the registry: exact masked softmax attention in float64 that records what it sees."""

    def __init__(self, calls: list, **context):
        super().__init__()
        self.context = context
        self.calls = calls

    def forward(self, q, k, v, key_padding_mask=None):
        self.calls.append({"shape": tuple(q.shape), "contiguous": q.is_contiguous(),
                           "mask": None if key_padding_mask is None else key_padding_mask.clone()})
        scores = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        probs = torch.nan_to_num(scores.softmax(-1))
        return (probs @ v.double()).to(q.dtype)


def double_factory(built: list, calls: list):
    def factory(name, **options):
        module = DoubleAttention(calls, name=name, **options)
        built.append(module.context)
        return module
    return factory


def make(spec: DataSpec, cfg: ModelConfig = TINY, **kw):
    built, calls = [], []
    torch.manual_seed(0)
    model = build_model(cfg, spec, attention="double", attention_options=kw.pop("options", {}), seed=5,
                        attention_factory=double_factory(built, calls), **kw)
    return model.eval(), built, calls


def test_attention_gets_context_options_and_qkv_views():
    spec = DataSpec(vocab_size=11, num_classes=10, max_len=24)
    model, built, calls = make(spec, options={"nb_features": 4})
    assert [b["layer_idx"] for b in built] == [0, 1]
    for b in built:
        assert b == {"name": "double", "num_heads": 2, "head_dim": 8, "max_len": 24, "dropout": 0.0,
                     "layer_idx": b["layer_idx"], "seed": 5, "nb_features": 4}
    x = torch.randint(0, 11, (3, 24))
    mask = torch.zeros(3, 24, dtype=torch.bool)
    mask[1, 10:] = True
    assert model(x, mask).shape == (3, 10)
    assert calls[0]["shape"] == (3, 2, 24, 8)
    assert not calls[0]["contiguous"]  # views of the fused projection, no copies
    assert torch.equal(calls[0]["mask"], mask)


def test_cls_pooling_adds_one_position_and_unmasked_cls():
    spec = DataSpec(vocab_size=11, num_classes=3, max_len=20)
    cfg = ModelConfig(**{**TINY.__dict__, "pooling": "cls"})
    model, built, calls = make(spec, cfg)
    assert built[0]["max_len"] == 21
    mask = torch.zeros(2, 20, dtype=torch.bool)
    mask[0, 5:] = True
    model(torch.randint(0, 11, (2, 20)), mask)
    assert calls[0]["shape"] == (2, 2, 21, 8)
    assert not calls[0]["mask"][:, 0].any() and torch.equal(calls[0]["mask"][:, 1:], mask)


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padding_content_does_not_change_logits(pooling):
    spec = DataSpec(vocab_size=11, num_classes=10, max_len=16)
    model, _, _ = make(spec, ModelConfig(**{**TINY.__dict__, "pooling": pooling}))
    x = torch.randint(1, 11, (4, 16))
    mask = torch.zeros(4, 16, dtype=torch.bool)
    mask[0, 9:] = True
    mask[2, 3:] = True
    y = x.clone()
    y[mask] = torch.randint(1, 11, (int(mask.sum()),))
    torch.testing.assert_close(model(x, mask), model(y, mask))
    # ... while the same tokens unmasked do change them (the test can fail).
    assert not torch.allclose(model(x, mask), model(y, None))


def test_mean_pooling_averages_only_real_tokens():
    spec = DataSpec(vocab_size=7, num_classes=2, max_len=8)
    model, _, _ = make(spec)
    enc: Encoder = model.encoder
    x = torch.randint(0, 7, (1, 8))
    mask = torch.tensor([[False] * 5 + [True] * 3])
    captured = {}
    enc.norm.register_forward_hook(lambda m, i, o: captured.setdefault("h", o))
    pooled = enc(x, mask)
    torch.testing.assert_close(pooled, captured["h"][:, :5].mean(1))


def test_image_tasks_use_a_grid_and_pass_no_mask():
    spec = DataSpec(vocab_size=256, num_classes=2, max_len=12, image_shape=(3, 4))
    model, _, calls = make(spec)
    pos = model.encoder.positions
    assert isinstance(pos, GridPositionalEmbedding) and pos.weight.shape == (3, 4, 16)
    assert "encoder.positions.weight" in dict(model.named_parameters())
    x = torch.randint(0, 256, (2, 12))
    model(x, torch.zeros(2, 12, dtype=torch.bool))
    assert calls[0]["mask"] is None  # fixed-length pixel sequences: pixel 0 is a token, never padding
    # Row-major flattening: token i*W + j gets grid position (i, j).
    flat = pos(torch.zeros(1, 12, 16))[0]
    torch.testing.assert_close(flat[1 * 4 + 2], pos.weight[1, 2])
    with pytest.raises(ValueError, match="3x4 = 12 pixel tokens, got 10"):
        pos(torch.zeros(1, 10, 16))


def test_linear_pixel_embedding_is_affine_in_the_intensity():
    """model.pixel_embedding=linear: pixel value v enters as (v / 255) * w + b, one learned vector w
    and bias b instead of 256 independent vectors; token tasks refuse it."""
    import dataclasses

    spec = DataSpec(vocab_size=256, num_classes=2, max_len=12, image_shape=(3, 4))
    cfg = dataclasses.replace(TINY, pixel_embedding="linear")
    model, _, _ = make(spec, cfg)
    embed = model.encoder.embed
    assert isinstance(embed, nn.Linear) and embed.weight.shape == (16, 1)
    assert sum(p.numel() for p in embed.parameters()) == 32          # vs 256 * 16 for tokens
    with torch.no_grad():
        embed.bias.normal_()
        x = model.encoder.embed((torch.tensor([0, 100, 200, 255]).float() / 255).unsqueeze(-1))
    torch.testing.assert_close(x[2] - x[1], x[1] - x[0])
    torch.testing.assert_close(x[3] - x[0], embed.weight[:, 0])
    tokens = torch.randint(0, 256, (2, 12))
    assert model(tokens, torch.zeros(2, 12, dtype=torch.bool)).shape == (2, 2)
    with pytest.raises(ValueError, match="pixel_embedding=linear applies to pixel tasks"):
        make(DataSpec(vocab_size=16, num_classes=10, max_len=12), cfg)


def test_grid_positions_can_be_turned_off_and_bad_shapes_rejected():
    cfg = ModelConfig(**{**TINY.__dict__, "grid_positions": False})
    model, _, _ = make(DataSpec(vocab_size=5, num_classes=2, max_len=12, image_shape=(3, 4)), cfg)
    assert isinstance(model.encoder.positions, LearnedPositionalEmbedding)
    with pytest.raises(ValueError, match="image 3x4 has 12 pixels but sequences are 10 tokens"):
        make(DataSpec(vocab_size=5, num_classes=2, max_len=10, image_shape=(3, 4)))


def test_upsample_grid_is_exact_duplication():
    w = torch.arange(2 * 3 * 1, dtype=torch.float32).reshape(2, 3, 1)
    up = upsample_grid(w, 2)
    assert up.shape == (4, 6, 1)
    expected = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 2, 2],
                             [3, 3, 4, 4, 5, 5], [3, 3, 4, 4, 5, 5]], dtype=torch.float32)
    torch.testing.assert_close(up[..., 0], expected)
    with pytest.raises(ValueError):
        upsample_grid(w.reshape(6, 1), 2)


def test_axial_positions_sum_a_row_and_a_column_vector():
    cfg = ModelConfig(dim=8, depth=1, num_heads=2, head_dim=4, mlp_dim=8, positional="axial")
    spec = DataSpec(vocab_size=256, num_classes=2, max_len=12, image_shape=(3, 4))
    model = build_model(cfg, spec, attention="softmax")
    pos = model.encoder.positions
    assert isinstance(pos, AxialPositionalEmbedding)
    assert pos.rows.shape == (3, 8) and pos.cols.shape == (4, 8)
    table = pos(torch.zeros(1, 12, 8))[0]
    for token in range(12):  # row-major: token i*W + j is pixel (i, j)
        i, j = divmod(token, 4)
        assert torch.equal(table[token], pos.rows[i] + pos.cols[j])
    assert model(torch.randint(0, 256, (2, 12))).shape == (2, 2)
    with pytest.raises(ValueError, match="axial positions expect 3x4 = 12 pixel tokens, got 10"):
        pos(torch.zeros(1, 10, 8))
    with pytest.raises(ValueError, match="applies to pixel tasks"):
        build_model(cfg, DataSpec(vocab_size=20, num_classes=2, max_len=12), attention="softmax")


def test_sinusoidal_and_no_positions():
    cfg = ModelConfig(**{**TINY.__dict__, "positional": "sinusoidal"})
    model, _, _ = make(DataSpec(vocab_size=5, num_classes=2, max_len=10), cfg)
    pos = model.encoder.positions
    assert isinstance(pos, SinusoidalPositionalEmbedding)
    assert "encoder.positions.table" not in model.state_dict()  # fixed: not a checkpointed weight
    torch.testing.assert_close(pos.table[3, 0], torch.tensor(math.sin(3.0)))
    torch.testing.assert_close(pos.table[3, 1], torch.tensor(math.cos(3.0)))
    cfg = ModelConfig(**{**TINY.__dict__, "positional": "none"})
    model, _, _ = make(DataSpec(vocab_size=5, num_classes=2, max_len=10), cfg)
    assert model.encoder.positions is None


def test_dual_encoder_shares_weights_and_combines_u_v():
    spec = DataSpec(vocab_size=9, num_classes=2, max_len=10, dual=True)
    model, built, _ = make(spec)
    assert isinstance(model, DualEncoderClassifier) and len(built) == TINY.depth  # one encoder
    x = torch.randint(0, 9, (3, 2, 10))
    mask = torch.zeros(3, 2, 10, dtype=torch.bool)
    mask[:, 1, 6:] = True
    logits = model(x, mask)
    u = model.encoder(x[:, 0], mask[:, 0])
    v = model.encoder(x[:, 1], mask[:, 1])
    torch.testing.assert_close(logits, model.head(torch.cat([u, v, u * v, u - v], -1)))
    with pytest.raises(ValueError, match=r"\(B, 2, N\)"):
        model(x[:, 0], mask[:, 0])


def test_bad_inputs_and_option_clashes():
    model, _, _ = make(DataSpec(vocab_size=5, num_classes=2, max_len=10))
    assert isinstance(model, SequenceClassifier)
    with pytest.raises(ValueError, match=r"\(B, N\)"):
        model(torch.zeros(2, 2, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="use model.attention_dropout"):
        make(DataSpec(vocab_size=5, num_classes=2, max_len=10), options={"dropout": 0.2})
    pos = LearnedPositionalEmbedding(4, 2)
    with pytest.raises(ValueError, match="exceeds the positional table"):
        pos(torch.zeros(1, 5, 2))


def test_data_spec_round_trip():
    spec = DataSpec(vocab_size=3, num_classes=2, max_len=16, dual=False, image_shape=(4, 4))
    assert DataSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.cpu_machine("builds the model on CPU tensors")) if n in ("flash", "flash_sparse")
    else n for n in registry.available()])
def test_every_registered_attention_trains_in_the_model(name):
    """Forward + backward through the real registry at a small N, with padding."""
    options = {"bigbird": {"block_size": 4}, "flash_sparse": {"block_size": 16},
               "performer": {"nb_features": 8}, "linformer": {"proj_k": 8}}.get(name, {})
    ok, why = registry.can_run(name, "cpu")
    assert ok, f"{name} cannot run on CPU: {why}"
    # flash_sparse needs >= 8 blocks of >= 16 tokens; one layer keeps the interpreter quick.
    n, depth = (128, 1) if name == "flash_sparse" else (32, 2)
    spec = DataSpec(vocab_size=11, num_classes=10, max_len=n)
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY.__dict__, "depth": depth})
    model = build_model(cfg, spec, attention=name, attention_options=options, seed=0).train()
    batch = 1 if name == "flash_sparse" else 2
    x = torch.randint(0, 11, (batch, n))
    mask = torch.zeros(batch, n, dtype=torch.bool)
    mask[-1, 20:] = True
    loss = nn.functional.cross_entropy(model(x, mask), torch.tensor([1, 2][:batch]))
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.encoder.embed.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name, options, n", [("flash", {}, 40), ("flash_sparse", {"block_size": 16}, 128)])
def test_packed_qkv_cores_match_their_view_form_in_the_model(name, options, n):
    """Our kernels take the fused projection whole (forward_packed); with ``packed`` off they get q/k/v
    views like every other core. Same weights, same dropout draws: same logits and gradients."""
    device = "cuda" if torch.cuda.is_available() else "cpu"  # our kernels take CUDA tensors where CUDA is
    spec = DataSpec(vocab_size=11, num_classes=10, max_len=n)
    cfg = ModelConfig(**{**TINY.__dict__, "depth": 1, "attention_dropout": 0.2})
    x = torch.randint(0, 11, (2, n), generator=torch.Generator().manual_seed(1)).to(device)
    mask = torch.zeros(2, n, dtype=torch.bool, device=device)
    mask[1, n - 13:] = True
    results = []
    for packed in (True, False):
        torch.manual_seed(0)
        model = build_model(cfg, spec, attention=name, attention_options=options, seed=0).to(device).train()
        assert model.encoder.blocks[0].attention.packed  # the default for a core with a packed form
        model.encoder.blocks[0].attention.packed = packed
        torch.manual_seed(3)
        logits = model(x, mask)
        logits.square().sum().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (packed, packed_grads), (views, view_grads) = results
    torch.testing.assert_close(packed, views, rtol=1e-6, atol=1e-6)
    for a, b in zip(packed_grads, view_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

