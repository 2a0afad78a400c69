"""The attention registry: every registered attention honours the interface; typed options; clear errors."""
import pytest
import torch

from lra import attention as registry

# Small-N options for every registered attention (the test below fails if a name is missing here).
CASES = {
    "flash": {},
    # The interpreter is slow on the dense-ish bigbird layout at this size; test_flash_modules covers it.
    "flash_sparse": {"layout": "local", "block_size": 16},  # 5 blocks, the last one partial
    "softmax": {},
    "sdpa": {},
    "performer": {"nb_features": 32},
    "linformer": {"proj_k": 16},
    "bigbird": {"block_size": 8},  # 9 blocks, the last one padded internally
}
CONTEXT = {"num_heads": 2, "head_dim": 16, "max_len": 72, "seed": 0}
N, VALID = 72, 41  # batch rows: full, ragged (VALID tokens), all padding
# Attentions whose masked output equals running the unpadded prefix alone.
TRUNCATION_EXACT = ("flash", "softmax", "sdpa", "performer", "linformer")
# Attentions with attention probabilities, hence probability dropout.
WITH_DROPOUT = ("flash", "flash_sparse", "softmax", "sdpa", "linformer", "bigbird")
USES_KERNELS = ("flash", "flash_sparse")


def cpu_modules(names):
    """``names`` for a parametrize, those of our kernels marked cpu_machine: the tests build every
    module on CPU tensors, which our kernels run only through Triton's interpreter (on a CUDA
    machine tests/kernels covers them)."""
    return [pytest.param(n, marks=pytest.mark.cpu_machine("builds our kernels' modules on CPU tensors"))
            if n in USES_KERNELS else n for n in names]


def make(name, **extra):
    return registry.build(name, **{**CONTEXT, **CASES[name], **extra})


def inputs(requires_grad=False, seed=0):
    """q, k, v as the model makes them: non-contiguous (B, H, N, d) views of one fused QKV tensor."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(3, N, 3, 2, 16, generator=gen).requires_grad_(requires_grad)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    if requires_grad:
        for t in (q, k, v):
            t.retain_grad()
    mask = torch.zeros(3, N, dtype=torch.bool)
    mask[1, VALID:] = True
    mask[2] = True
    return q, k, v, mask


def test_every_registered_attention_has_a_test_case():
    assert set(CASES) == set(registry.names())
    assert {"flash", "flash_sparse", "softmax", "sdpa", "performer", "linformer", "bigbird"} <= set(registry.names())


@pytest.mark.parametrize("name", cpu_modules(CASES))
def test_forward_backward_with_and_without_padding(name):
    attention = make(name)
    q, k, v, mask = inputs(requires_grad=True)
    out = attention(q, k, v)
    assert out.shape == q.shape and out.dtype == q.dtype and torch.isfinite(out).all()
    out.square().mean().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v))

    q, k, v, mask = inputs(requires_grad=True)
    out = attention(q, k, v, mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[2], torch.zeros_like(out[2])), "a fully padded row must give 0"
    out.square().mean().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
        assert torch.equal(t.grad[2], torch.zeros_like(t.grad[2]))
    # Padded keys get no gradient: they take no part in the attention.
    assert torch.equal(k.grad[1, :, VALID:], torch.zeros_like(k.grad[1, :, VALID:]))
    assert torch.equal(v.grad[1, :, VALID:], torch.zeros_like(v.grad[1, :, VALID:]))


@pytest.mark.parametrize("name", cpu_modules(CASES))
def test_padded_key_and_value_content_changes_no_output(name):
    attention = make(name).eval()
    q, k, v, mask = inputs()
    with torch.no_grad():
        out = attention(q, k, v, mask)
        k2, v2 = k.clone(), v.clone()
        k2[mask[:, None, :].expand_as(k2[..., 0])] = 30.0
        v2[mask[:, None, :].expand_as(v2[..., 0])] = -1e3
        changed = attention(q, k2, v2, mask)
    torch.testing.assert_close(changed, out, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", cpu_modules(TRUNCATION_EXACT))
def test_padded_row_equals_its_unpadded_prefix(name):
    attention = make(name).eval()
    q, k, v, mask = inputs()
    with torch.no_grad():
        padded = attention(q, k, v, mask)[1, :, :]
        alone = attention(q[1:2], k[1:2, :, :VALID], v[1:2, :, :VALID])[0]
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", cpu_modules(WITH_DROPOUT))
def test_probability_dropout_applies_in_training_only(name):
    extra = {"backend": "math"} if name == "sdpa" else {}
    torch.manual_seed(0)
    plain = make(name, dropout=0.0, **extra).eval()
    torch.manual_seed(0)  # same initial weights (linformer's projections)
    dropped = make(name, dropout=0.5, **extra)
    q, k, v, mask = inputs()
    with torch.no_grad():
        reference = plain(q, k, v, mask)
        torch.testing.assert_close(dropped.eval()(q, k, v, mask), reference, rtol=1e-6, atol=1e-6)
        torch.manual_seed(1)
        training = dropped.train()(q, k, v, mask)
    assert torch.isfinite(training).all()
    assert not torch.allclose(training[:2], reference[:2], atol=1e-3)


@pytest.mark.parametrize("name", [n for n in CASES if n not in USES_KERNELS])
def test_runs_under_bf16_autocast(name):
    attention = make(name)
    q, k, v, mask = inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


# ------------------------------------------------------------------------------------------------
# registry API
# ------------------------------------------------------------------------------------------------
def test_available_lists_typed_options_with_defaults_and_descriptions():
    options = registry.available()
    assert options["performer"]["nb_features"] == (int, 256)
    assert options["linformer"]["proj_k"] == (int, 256)
    assert options["bigbird"] == {"block_size": (int, 64), "window": (int, 3), "num_random": (int, 3)}
    assert options["sdpa"]["backend"][1] == "auto"
    assert "{'auto', 'flash', 'cudnn', 'efficient', 'math'}" == registry.type_name(options["sdpa"]["backend"][0])
    assert options["softmax"] == {} and options["flash"] == {}
    for name in registry.names():
        assert registry.describe(name)
        assert set(registry.option_help(name)) == set(options[name])
    assert set(registry.context_options()) == {"num_heads", "head_dim", "max_len", "dropout", "layer_idx", "seed"}
    assert "k=16" in registry.describe("linformer")


def test_cli_strings_are_converted_to_the_option_types():
    attention = registry.build(
        "performer", head_dim="16", nb_features="64", redraw_interval="10", kernel="relu", eps="0.01", dropout="0.1"
    )
    assert (attention.nb_features, attention.redraw_interval, attention.kernel, attention.eps) == (64, 10, "relu", 0.01)
    assert registry.resolve_options("performer", eps="none", nb_features="32")["eps"] is None
    assert registry.resolve_options("flash_sparse", layout="local", window="5")["window"] == 5
    assert registry.build("sdpa", backend="math").backend == "math"


def test_presets_hold_the_lra_settings():
    linformer = registry.build("linformer", num_heads=2, max_len=64, **registry.presets("linformer")["lra"])
    assert linformer.proj_k == 16 and linformer.key_projection is linformer.value_projection
    performer = registry.build("performer", head_dim=8, **registry.presets("performer")["lra"])
    assert performer.kernel == "relu" and performer.projection is None


@pytest.mark.parametrize(
    "name,options,message",
    [
        ("favor", {}, r"unknown attention 'favor'; valid: flash, flash_sparse, softmax, sdpa, performer"),
        ("performer", {"head_dim": 8, "features": 3}, r"unknown option\(s\) 'features'.*nb_features, kernel"),
        ("performer", {"head_dim": 8, "nb_features": "many"}, r"option 'nb_features': expected an integer, got 'many'"),
        ("performer", {"head_dim": 8, "nb_features": 2.5}, r"option 'nb_features': expected an integer, got 2.5"),
        ("performer", {"head_dim": 8, "nb_features": 0}, r"option 'nb_features' must be >= 1"),
        ("performer", {"head_dim": 8, "kernel": "cosine"}, r"option 'kernel': expected one of 'softmax', 'relu'"),
        ("performer", {"head_dim": 8, "feature_type": "deterministic"}, r"'feature_type'.*needs kernel='relu'"),
        ("performer", {}, r"needs the context option\(s\) head_dim"),
        ("sdpa", {"backend": "fastest"}, r"option 'backend': expected one of 'auto', 'flash', 'cudnn'"),
        ("softmax", {"dropout": 1.5}, r"option 'dropout' must be in \[0, 1\)"),
        ("softmax", {"dropout": "lots"}, r"option 'dropout': expected a number, got 'lots'"),
        ("softmax", {"block_size": 8}, r"unknown option\(s\) 'block_size'; its options: \(none\)"),
        ("linformer", {"num_heads": 2}, r"needs the context option\(s\) max_len"),
        ("linformer", {"num_heads": 2, "max_len": 8, "sharing": "all"}, r"option 'sharing': expected one of"),
        ("bigbird", {"num_heads": 2, "window": 4}, r"option 'window' must be odd"),
        ("bigbird", {"num_heads": 2, "max_len": 300}, r"at least 8 blocks of 64 tokens"),
        ("flash_sparse", {"layout": "local", "num_random": 2}, r"num_random do not apply to layout='local'"),
        ("flash_sparse", {"layout": "diagonal"}, r"option 'layout': expected one of 'bigbird', 'local'"),
    ],
)
def test_bad_names_options_and_values_raise_value_errors_naming_them(name, options, message):
    with pytest.raises(ValueError, match=message):
        registry.build(name, **options)


def test_can_run_reports_per_device():
    for name in registry.names():
        ok, reason = registry.can_run(name, "cpu")
        assert isinstance(ok, bool) and reason
    assert registry.can_run("bigbird", "cpu") == (True, "plain PyTorch: runs on any device")
    ok, reason = registry.can_run("sdpa", "cpu", {"backend": "cudnn"})
    assert not ok and "CUDA" in reason
    assert registry.can_run("sdpa", "cpu", {"backend": "flash"})[0]
    if not torch.cuda.is_available():
        ok, reason = registry.can_run("softmax", "cuda")
        assert not ok and "CUDA" in reason
    ok, reason = registry.can_run("flash", "cpu")
    if ok:
        assert "interpreter" in reason
    with pytest.raises(ValueError, match="unknown attention"):
        registry.can_run("nope", "cpu")


def test_supported_lengths():
    assert registry.max_supported_len("linformer", {"max_len": 4096}) == 4096
    assert registry.max_supported_len("flash_sparse", {"max_len": "2048"}) == 2048
    assert registry.max_supported_len("bigbird", {"max_len": 4096}) is None
    assert registry.max_supported_len("softmax") is None
    assert registry.min_supported_len("bigbird") == 7 * 64 + 1
    assert registry.min_supported_len("bigbird", {"block_size": 16, "num_random": 1}) == 5 * 16 + 1
    assert registry.min_supported_len("performer") is None
    assert registry.min_supported_len("flash_sparse") == 7 * 128 + 1
    assert registry.min_supported_len("flash_sparse", {"layout": "local"}) is None
    with pytest.raises(ValueError, match="needs the context option"):
        registry.max_supported_len("linformer")


def test_kernel_limits_are_known_before_a_kernel_runs():
    assert registry.kernel_limit_problem("flash", {"head_dim": 128}, torch.bfloat16) is None
    assert "head_dim 256" in registry.kernel_limit_problem("flash", {"head_dim": 256})
    assert "head_dim 256" in registry.kernel_limit_problem("flash_sparse", {"head_dim": 256})
    assert "not float64" in registry.kernel_limit_problem("flash", {"head_dim": 64}, torch.float64)
    assert "block_size 48" in registry.kernel_limit_problem("flash_sparse", {"block_size": 48})
    assert registry.kernel_limit_problem("flash_sparse", {"block_size": 32}) is None
    assert registry.kernel_limit_problem("softmax", {"head_dim": 256}, torch.float64) is None  # plain PyTorch


def test_batch_times_heads_beyond_the_kernels_grid_is_known_before_a_kernel_runs():
    from kernels.validation import MAX_BATCH_HEADS

    assert registry.kernel_limit_problem("flash", {"num_heads": 8}, batch_size=MAX_BATCH_HEADS // 8) is None
    problem = registry.kernel_limit_problem("flash", {"num_heads": 8}, batch_size=8192)
    assert problem.startswith("batch size 8192 (train.batch_size) x 8 heads (model.num_heads) = 65,536 (batch, head) "
                              "pairs, more than the 65,535 the kernels take in one call")
    assert "train.batch_size=8191 or less" in problem and "gradient accumulation" in problem
    assert "train.batch_size=4096 and train.accumulate_grad_batches 2 times as large" in problem
    # the dual encoder (retrieval) sends both documents of each example through the kernels as one batch
    dual = registry.kernel_limit_problem("flash_sparse", {"num_heads": 8}, batch_size=4096, sequences_per_example=2)
    assert "x 2 sequences per example = 65,536" in dual and "train.batch_size=4095 or less" in dual
    assert registry.kernel_limit_problem("flash_sparse", {"num_heads": 8}, batch_size=4096) is None
    assert registry.kernel_limit_problem("softmax", {"num_heads": 8}, batch_size=10**6) is None  # plain PyTorch


def test_per_layer_randomness_differs_by_layer_and_repeats_by_seed():
    def projection(layer_idx, seed):
        return registry.build("performer", head_dim=8, nb_features=16, layer_idx=layer_idx, seed=seed).projection

    assert torch.equal(projection(1, 3), projection(1, 3))
    assert not torch.equal(projection(1, 3), projection(2, 3))
    assert not torch.equal(projection(1, 3), projection(1, 4))

    def pattern(layer_idx):
        return registry.build("bigbird", num_heads=2, max_len=1024, layer_idx=layer_idx).index

    assert torch.equal(pattern(0), pattern(0)) and not torch.equal(pattern(0), pattern(1))
