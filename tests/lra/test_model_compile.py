"""The LRA model with our kernels' attentions compiles into one graph (torch.compile(fullgraph=True)
fails on any graph break) and computes what eager mode computes, forward and backward."""
import pytest
import torch

from baselines.flash import BlockSparseFlashAttention
from lra.config import ModelConfig
from lra.model import DataSpec, build_model


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# on CUDA this also runs Inductor (with the default custom_op form of the kernels)
BACKENDS = ["aot_eager"] + (["inductor"] if DEVICE == "cuda" else [])


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def tiny_model(attention, options, max_len=32):
    # no nn.Dropout (its mask would be drawn differently under AOTAutograd); attention dropout stays on:
    # its seed is drawn from torch's generator in the same order in both modes
    cfg = ModelConfig(dim=32, depth=2, num_heads=2, head_dim=16, mlp_dim=32, dropout=0.0, attention_dropout=0.1,
                      positional="learned", grid_positions=False, pooling="mean")
    torch.manual_seed(0)
    return build_model(cfg, DataSpec(vocab_size=16, num_classes=3, max_len=max_len), attention=attention,
                       attention_options=options).to(DEVICE)


def loss_and_grads(model, forward, tokens, mask, labels):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    loss = torch.nn.functional.cross_entropy(forward(tokens, mask), labels)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attention, options", [
    ("flash", {}),
    # two layers, two layouts: each gets its own constant plan tensors in the one graph
    ("flash_sparse", {"layout": "bigbird", "block_size": 16, "window": 1, "num_random": 0, "num_global": 1}),
])
def test_lra_model_compiles_without_graph_break_and_matches_eager(attention, options, backend):
    model = tiny_model(attention, options)
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 16, (2, 32), generator=gen).to(DEVICE)
    mask = torch.zeros(2, 32, dtype=torch.bool, device=DEVICE)
    mask[1, 21:] = True
    labels = torch.tensor([0, 2], device=DEVICE)
    if backend == "inductor":
        # Inductor draws the dropout seed from its own RNG stream (different masks): compare without dropout
        for module in model.modules():
            if isinstance(getattr(module, "dropout", None), float):
                module.dropout = 0.0
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    loss_c, grads_c = loss_and_grads(model, compiled, tokens, mask, labels)
    loss_e, grads_e = loss_and_grads(model, model, tokens, mask, labels)
    assert torch.isfinite(loss_c) and rel_err(loss_c, loss_e) < 1e-5
    assert grads_c.keys() == grads_e.keys()
    for name, grad in grads_e.items():
        assert rel_err(grads_c[name], grad) < 1e-4, name


def test_sparse_module_compiles_for_shorter_and_changing_lengths():
    """N < max_len uses a corner of the layout, prepared at construction; a second N recompiles, also
    when torch.compile has made N symbolic (the plans need its value): never a graph break."""
    module = BlockSparseFlashAttention(max_len=64, num_heads=2, layout="local", block_size=16, window=1).to(DEVICE)
    static = torch.compile(module, fullgraph=True, backend="eager", dynamic=False)
    dynamic = torch.compile(module, fullgraph=True, backend="eager", dynamic=True)
    gen = torch.Generator().manual_seed(2)
    for n in (20, 64, 40):
        q, k, v = (torch.randn(1, 2, n, 16, generator=gen).to(DEVICE) for _ in range(3))
        expected = module(q, k, v)
        torch.testing.assert_close(static(q, k, v), expected, rtol=0, atol=0)
        torch.testing.assert_close(dynamic(q, k, v), expected, rtol=0, atol=0)


def test_sparse_module_rebuilds_its_compressed_layout_when_moved():
    module = BlockSparseFlashAttention(max_len=64, num_heads=2, layout="local", block_size=16)
    before = module._compressed
    assert len(before) == 4 and before[-1].layout.data_ptr() == module.layout.data_ptr()
    module.to(torch.float64)  # any move goes through Module._apply
    assert module._compressed is not before and module._compressed[-1].layout.data_ptr() == module.layout.data_ptr()
    # corners are views of the full layout sharing its plan cache
    assert module._compressed[1].layout.data_ptr() == module._compressed[-1].layout.data_ptr()
    assert module._compressed[1]._plans is module._compressed[-1]._plans


def test_copied_sparse_module_has_layouts_of_its_own():
    import copy

    from kernels.block_sparse import _LAYOUTS

    module = BlockSparseFlashAttention(max_len=64, num_heads=2, layout="local", block_size=16)
    clone = copy.deepcopy(module)
    keys = {layout.key for layout in module._compressed}
    clone_keys = {layout.key for layout in clone._compressed}
    assert not keys & clone_keys and all(_LAYOUTS[layout.key] is layout for layout in clone._compressed)
    assert clone._compressed[0]._plans is clone._compressed[-1]._plans  # corners still share one plan cache
