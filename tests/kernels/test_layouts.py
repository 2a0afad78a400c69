"""Pattern properties, conversions and argument errors of kernels.layouts (pure PyTorch, CPU)."""
import math
import warnings

import pytest
import torch

import kernels.layouts as layouts


def brute_block_reduce(allowed: torch.Tensor, block_size: int):
    """(n_q, n_k) element mask -> (any, all) per block by explicit loops over blocks."""
    n_q, n_k = allowed.shape
    nqb, nkb = math.ceil(n_q / block_size), math.ceil(n_k / block_size)
    keep = torch.zeros(nqb, nkb, dtype=torch.bool)
    full = torch.zeros(nqb, nkb, dtype=torch.bool)
    for i in range(nqb):
        for j in range(nkb):
            tile = allowed[i * block_size:(i + 1) * block_size, j * block_size:(j + 1) * block_size]
            keep[i, j] = bool(tile.any())
            full[i, j] = bool(tile.all())
    return keep, full


def band_reference(n, window):
    return torch.tensor([[abs(i - j) <= window // 2 for j in range(n)] for i in range(n)])


# ----------------------------------------------------------------------------------------------
# num_blocks, density
# ----------------------------------------------------------------------------------------------
def test_num_blocks():
    assert layouts.num_blocks(1024, 128) == 8
    assert layouts.num_blocks(1025, 128) == 9
    assert layouts.num_blocks(1, 64) == 1
    assert layouts.num_blocks(65536, 32) == 2048
    with pytest.raises(ValueError, match="seq_len"):
        layouts.num_blocks(0, 64)
    with pytest.raises(ValueError, match="block_size"):
        layouts.num_blocks(128, 0)
    with pytest.raises(TypeError, match="block_size"):
        layouts.num_blocks(128, 64.0)


def test_density_values():
    assert layouts.density(torch.ones(3, 5, dtype=torch.bool)) == 1.0
    assert layouts.density(torch.zeros(4, 4, dtype=torch.bool)) == 0.0
    assert layouts.density(layouts.local(4, 1)) == pytest.approx(0.25)
    assert layouts.density(layouts.local(4, 3)) == pytest.approx(10 / 16)
    per_head = torch.stack([layouts.local(4, 1), torch.ones(4, 4, dtype=torch.bool)])
    assert layouts.density(per_head) == pytest.approx((0.25 + 1.0) / 2)
    torch.testing.assert_close(
        layouts.density(per_head, per_head=True), torch.tensor([0.25, 1.0], dtype=torch.float64)
    )


def test_density_errors():
    with pytest.raises(TypeError, match="bool"):
        layouts.density(torch.ones(4, 4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        layouts.density([[True]])
    with pytest.raises(ValueError, match="shape"):
        layouts.density(torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="per_head"):
        layouts.density(torch.ones(4, 4, dtype=torch.bool), per_head=True)


# ----------------------------------------------------------------------------------------------
# local / longformer
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, window", [(1, 1), (10, 1), (10, 3), (10, 5), (7, 13), (5, 99)])
def test_local_band(n, window):
    layout = layouts.local(n, window)
    assert layout.dtype == torch.bool and layout.shape == (n, n)
    assert torch.equal(layout, band_reference(n, window))
    assert torch.equal(layout, layout.T)
    assert bool(layout.diagonal().all())
    half = window // 2
    for i in range(n):  # row widths: window, clipped at the ends
        assert int(layout[i].sum()) == min(n - 1, i + half) - max(0, i - half) + 1
    if window >= 2 * n - 1:
        assert bool(layout.all())


def test_local_heads_and_device():
    layout = layouts.local(6, 3, num_heads=4, device="cpu")
    assert layout.shape == (4, 6, 6)
    assert all(torch.equal(layout[h], layouts.local(6, 3)) for h in range(4))


def test_longformer_globals():
    n, window = 12, 3
    layout = layouts.longformer(n, window, [0, 5, -1])
    band = band_reference(n, window)
    globals_ = [0, 5, 11]
    for g in globals_:
        assert bool(layout[g].all()) and bool(layout[:, g].all())
    rest = [i for i in range(n) if i not in globals_]
    sub = layout[rest][:, rest]
    assert torch.equal(sub, band[rest][:, rest])
    assert torch.equal(layout, layout.T)
    assert torch.equal(layouts.longformer(n, window, []), layouts.local(n, window))
    assert torch.equal(layouts.longformer(n, window, torch.tensor([11, 0, 5, 5])), layout)
    assert layouts.longformer(n, window, [3], num_heads=2).shape == (2, n, n)


def test_local_longformer_errors():
    with pytest.raises(ValueError, match="n_blocks"):
        layouts.local(0, 3)
    with pytest.raises(ValueError, match="window must be odd"):
        layouts.local(8, 4)
    with pytest.raises(ValueError, match="window"):
        layouts.local(8, 0)
    with pytest.raises(TypeError, match="n_blocks"):
        layouts.local(True, 3)
    with pytest.raises(TypeError, match="window"):
        layouts.local(8, 3.0)
    with pytest.raises(ValueError, match="num_heads"):
        layouts.local(8, 3, num_heads=0)
    with pytest.raises(ValueError, match="out of range"):
        layouts.longformer(8, 3, [8])
    with pytest.raises(ValueError, match="out of range"):
        layouts.longformer(8, 3, [-9])
    with pytest.raises(TypeError, match="global block index"):
        layouts.longformer(8, 3, [1.5])
    with pytest.raises(TypeError, match="global_blocks"):
        layouts.longformer(8, 3, 2)
    with pytest.raises(TypeError, match="global_blocks"):
        layouts.longformer(8, 3, torch.tensor([True, False]))


# ----------------------------------------------------------------------------------------------
# bigbird
# ----------------------------------------------------------------------------------------------
def bigbird_parts(n, num_global, window):
    front, back = (num_global + 1) // 2, num_global // 2
    global_idx = list(range(front)) + list(range(n - back, n))
    return global_idx, band_reference(n, window)


@pytest.mark.parametrize(
    "n, num_global, window, num_random",
    [(16, 2, 3, 3), (32, 2, 3, 3), (20, 3, 3, 2), (24, 0, 5, 4), (16, 4, 1, 0), (9, 2, 3, 4), (64, 1, 7, 6)],
)
def test_bigbird_pattern(n, num_global, window, num_random):
    layout = layouts.bigbird(n, num_global=num_global, window=window, num_random=num_random, seed=3)
    assert layout.shape == (n, n) and layout.dtype == torch.bool
    global_idx, band = bigbird_parts(n, num_global, window)
    half = window // 2
    for g in global_idx:
        assert bool(layout[g].all()) and bool(layout[:, g].all()), f"global block {g} not full"
    middle = [
        i for i in range(n)
        if i not in global_idx and all(0 <= j < n and j not in global_idx for j in range(i - half, i + half + 1))
    ]
    assert middle, "configuration has no middle row to check"
    for i in range(n):
        if i in global_idx:
            continue
        assert bool(layout[i][band[i]].all()), f"row {i} misses part of its window"
        covered = band[i].clone()
        covered[global_idx] = True
        assert int((layout[i] & ~covered).sum()) == num_random, f"row {i}: wrong random count"
        if i in middle:
            assert int(layout[i].sum()) == window + num_global + num_random


def test_bigbird_defaults_follow_the_paper():
    layout = layouts.bigbird(64)  # g=2 (first and last block), window 3, 3 random
    assert bool(layout[0].all()) and bool(layout[-1].all())
    assert bool(layout[:, 0].all()) and bool(layout[:, -1].all())
    assert all(int(layout[i].sum()) == 3 + 2 + 3 for i in range(2, 62))


def test_bigbird_seed_determinism_and_heads():
    a = layouts.bigbird(32, seed=7)
    assert torch.equal(a, layouts.bigbird(32, seed=7))
    assert not torch.equal(a, layouts.bigbird(32, seed=8))
    heads = layouts.bigbird(32, seed=7, num_heads=6)
    assert heads.shape == (6, 32, 32)
    assert torch.equal(heads[0], a)  # head 0 is the single-layout draw
    assert torch.equal(heads, layouts.bigbird(32, seed=7, num_heads=6))
    distinct = {tuple(heads[h].flatten().tolist()) for h in range(6)}
    assert len(distinct) == 6, "heads should get different random blocks"
    # Only the random part differs between heads.
    assert torch.equal(heads.all(0) | ~heads.any(0), ~(heads.any(0) ^ heads.all(0)))
    assert layouts.bigbird(32, device="cpu", num_heads=2).device.type == "cpu"


def test_bigbird_random_blocks_are_uniform_over_candidates():
    n, heads = 32, 2000
    layout = layouts.bigbird(n, seed=0, num_heads=heads)
    row = 10  # candidates: all but globals {0, 31} and window {9, 10, 11}
    candidates = [j for j in range(n) if j not in (0, 31, 9, 10, 11)]
    counts = layout[:, row, candidates].sum(0).double()
    expected = heads * 3 / len(candidates)
    assert float(counts.min()) > 0.7 * expected and float(counts.max()) < 1.3 * expected


def test_bigbird_errors():
    assert layouts.bigbird(8, num_global=2, window=3, num_random=3).shape == (8, 8)  # smallest allowed
    with pytest.raises(ValueError, match="n_blocks >= num_global \\+ window \\+ num_random"):
        layouts.bigbird(7, num_global=2, window=3, num_random=3)
    with pytest.raises(ValueError, match="n_blocks"):
        layouts.bigbird(0)
    with pytest.raises(ValueError, match="window must be odd"):
        layouts.bigbird(32, window=4)
    with pytest.raises(ValueError, match="num_random"):
        layouts.bigbird(32, num_random=-1)
    with pytest.raises(ValueError, match="num_global"):
        layouts.bigbird(32, num_global=-1)
    with pytest.raises(ValueError, match="num_heads"):
        layouts.bigbird(32, num_heads=0)
    with pytest.raises(TypeError, match="seed"):
        layouts.bigbird(32, seed="0")


# ----------------------------------------------------------------------------------------------
# butterfly
# ----------------------------------------------------------------------------------------------
def butterfly_reference(n, num_factors):
    return torch.tensor([
        [(i ^ j) == 0 or (bin(i ^ j).count("1") == 1 and (i ^ j) < 2 ** num_factors) for j in range(n)]
        for i in range(n)
    ])


@pytest.mark.parametrize("n", [1, 2, 8, 16, 64])
def test_butterfly_power_of_two(n):
    layout = layouts.butterfly(n)
    log_n = int(math.log2(n))
    assert torch.equal(layout, butterfly_reference(n, log_n))
    assert torch.equal(layout, layout.T)
    assert bool(layout.diagonal().all())
    assert bool((layout.sum(1) == 1 + log_n).all())
    assert layouts.density(layout) == pytest.approx((1 + log_n) / n)


def test_butterfly_density_is_log_n_over_n():
    for n in (16, 64, 256, 1024):
        assert layouts.density(layouts.butterfly(n)) == pytest.approx((1 + math.log2(n)) / n)


@pytest.mark.parametrize("n", [3, 6, 13, 100])
def test_butterfly_non_power_of_two_is_a_crop(n):
    padded = 2 ** math.ceil(math.log2(n))
    layout = layouts.butterfly(n)
    assert torch.equal(layout, layouts.butterfly(padded)[:n, :n])
    assert torch.equal(layout, layout.T) and bool(layout.diagonal().all())


def test_butterfly_factors_window_globals():
    assert torch.equal(layouts.butterfly(16, 0), torch.eye(16, dtype=torch.bool))
    assert torch.equal(layouts.butterfly(16, 2), butterfly_reference(16, 2))
    with_band = layouts.butterfly(16, 2, window=5)
    assert torch.equal(with_band, butterfly_reference(16, 2) | band_reference(16, 5))
    with_globals = layouts.butterfly(16, 2, num_global=2)
    expected = butterfly_reference(16, 2)
    expected[:2] = True
    expected[:, :2] = True
    assert torch.equal(with_globals, expected)
    assert layouts.butterfly(16, num_heads=3).shape == (3, 16, 16)


def test_butterfly_errors():
    with pytest.raises(ValueError, match="num_factors"):
        layouts.butterfly(16, 5)
    with pytest.raises(ValueError, match="num_factors"):
        layouts.butterfly(16, -1)
    with pytest.raises(ValueError, match="n_blocks"):
        layouts.butterfly(0)
    with pytest.raises(ValueError, match="window must be odd"):
        layouts.butterfly(16, window=2)
    with pytest.raises(ValueError, match="num_global"):
        layouts.butterfly(16, num_global=17)


# ----------------------------------------------------------------------------------------------
# from_mask
# ----------------------------------------------------------------------------------------------
PREDICATES = {
    "causal": lambda q, k: q >= k,
    "sliding": lambda q, k: (q - k).abs() <= 40,
    "causal_sliding": lambda q, k: (q >= k) & (q - k < 70),
    "strided": lambda q, k: (k % 50) == 0,
}


@pytest.mark.parametrize("name", sorted(PREDICATES))
@pytest.mark.parametrize("n_q, n_k, block_size", [(256, 256, 32), (300, 300, 64), (200, 333, 32), (70, 33, 16)])
def test_from_mask_matches_brute_force(name, n_q, n_k, block_size):
    fn = PREDICATES[name]
    allowed = torch.broadcast_to(fn(torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]), (n_q, n_k))
    keep, full = brute_block_reduce(allowed, block_size)
    layout, partial = layouts.from_mask(fn, n_q, n_k, block_size, return_partial=True)
    assert layout.shape == (math.ceil(n_q / block_size), math.ceil(n_k / block_size))
    assert torch.equal(layout, keep)
    assert torch.equal(partial, keep & ~full)
    assert torch.equal(layouts.from_mask(fn, n_q, n_k, block_size), layout)


def test_from_mask_partial_detection():
    layout, partial = layouts.from_mask(PREDICATES["causal"], 256, 256, 64, return_partial=True)
    assert torch.equal(layout, torch.ones(4, 4, dtype=torch.bool).tril())
    assert torch.equal(partial, torch.eye(4, dtype=torch.bool))  # only the diagonal blocks
    # A block-aligned band is exact: nothing partial.
    exact = lambda q, k: (q // 64 - k // 64).abs() <= 1  # noqa: E731
    layout, partial = layouts.from_mask(exact, 512, 512, 64, return_partial=True)
    assert torch.equal(layout, layouts.local(8, 3)) and not bool(partial.any())


def test_from_mask_chunked_evaluation(monkeypatch):
    fn = PREDICATES["causal_sliding"]
    expected = layouts.from_mask(fn, 1000, 900, 32, return_partial=True)
    monkeypatch.setattr(layouts, "_FROM_MASK_CHUNK_ELEMENTS", 5000)  # one block row per chunk
    got = layouts.from_mask(fn, 1000, 900, 32, return_partial=True)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_from_mask_index_lookup_and_constants():
    doc = torch.repeat_interleave(torch.arange(4), torch.tensor([100, 28, 200, 72]))  # 400 tokens
    same_doc = lambda q, k: doc[q] == doc[k]  # noqa: E731
    layout, partial = layouts.from_mask(same_doc, 400, 400, 64, return_partial=True)
    keep, full = brute_block_reduce(doc[:, None] == doc[None, :], 64)
    assert torch.equal(layout, keep) and torch.equal(partial, keep & ~full)
    assert bool(layouts.from_mask(lambda q, k: True, 100, 50, 32).all())
    assert not bool(layouts.from_mask(lambda q, k: torch.tensor(False), 100, 50, 32).any())


def test_from_mask_errors():
    with pytest.raises(TypeError, match="callable"):
        layouts.from_mask("causal", 64, 64, 32)
    with pytest.raises(TypeError, match="bool tensor"):
        layouts.from_mask(lambda q, k: q - k, 64, 64, 32)
    with pytest.raises(TypeError, match="bool tensor"):
        layouts.from_mask(lambda q, k: 1, 64, 64, 32)
    with pytest.raises(ValueError, match="broadcast"):
        layouts.from_mask(lambda q, k: torch.ones(3, 5, dtype=torch.bool), 64, 64, 32)
    with pytest.raises(ValueError, match="n_q"):
        layouts.from_mask(PREDICATES["causal"], 0, 64, 32)
    with pytest.raises(ValueError, match="n_k"):
        layouts.from_mask(PREDICATES["causal"], 64, 0, 32)
    with pytest.raises(ValueError, match="block_size"):
        layouts.from_mask(PREDICATES["causal"], 64, 64, 0)


# ----------------------------------------------------------------------------------------------
# check_layout
# ----------------------------------------------------------------------------------------------
def test_check_layout_accepts_and_expands():
    shared = layouts.local(5, 3)
    out = layouts.check_layout(shared, 5, 5, 4, "cpu")
    assert out.shape == (4, 5, 5) and torch.equal(out[2], shared)
    per_head = layouts.bigbird(16, num_heads=2)
    assert layouts.check_layout(per_head, 16, 16, 2, torch.device("cpu")) is per_head
    assert layouts.check_layout(torch.ones(3, 7, dtype=torch.bool), 3, 7, 1, "cpu").shape == (1, 3, 7)


def test_check_layout_errors():
    good = layouts.local(4, 3)
    with pytest.raises(TypeError, match="torch.bool"):
        layouts.check_layout(good.int(), 4, 4, 2, "cpu")
    with pytest.raises(TypeError, match="torch.Tensor"):
        layouts.check_layout(good.tolist(), 4, 4, 2, "cpu")
    with pytest.raises(ValueError, match="2 dims .* got 1 dims"):
        layouts.check_layout(torch.ones(4, dtype=torch.bool), 4, 4, 2, "cpu")
    with pytest.raises(ValueError, match="got 4 dims"):
        layouts.check_layout(torch.ones(1, 2, 4, 4, dtype=torch.bool), 4, 4, 2, "cpu")
    with pytest.raises(ValueError, match=r"\(5, 4\) blocks .*block_size=64"):
        layouts.check_layout(good, 5, 4, 2, "cpu", block_size=64)
    with pytest.raises(ValueError, match=r"ceil\(N / block_size\)"):
        layouts.check_layout(good, 4, 3, 2, "cpu")
    with pytest.raises(ValueError, match="3 heads .* 2 heads"):
        layouts.check_layout(layouts.local(4, 3, num_heads=3), 4, 4, 2, "cpu")
    with pytest.raises(ValueError, match="layout is on cpu but q/k/v are on meta"):
        layouts.check_layout(good, 4, 4, 2, "meta")
    with pytest.raises(TypeError, match="dense"):
        layouts.check_layout(good.to_sparse(), 4, 4, 2, "cpu")


# ----------------------------------------------------------------------------------------------
# FlexAttention BlockMask conversion
# ----------------------------------------------------------------------------------------------
try:
    from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
except ImportError as error:  # pragma: no cover - torch < 2.5
    flex_import_error = error
else:
    flex_import_error = None
needs_flex = pytest.mark.skipif(flex_import_error is not None, reason=f"FlexAttention import failed: {flex_import_error}")


def expand_to_elements(layout, n_q, n_k, block_size):
    return layout.repeat_interleave(block_size, -2).repeat_interleave(block_size, -1)[..., :n_q, :n_k]


def flex_eager(q, k, v, block_mask):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "called without torch.compile" — eager is what we test
        return flex_attention(q, k, v, block_mask=block_mask)


@needs_flex
@pytest.mark.parametrize(
    "layout, seq_q, seq_k, block_size, batch",
    [
        (layouts.bigbird(16, seed=1), 1024, 1024, 64, None),
        (layouts.bigbird(10, seed=2, num_heads=3), 600, 600, 64, None),  # ragged, per head
        (layouts.butterfly(8, num_heads=2), 256, 256, 32, 3),
        (torch.rand(2, 5, 7, generator=torch.Generator().manual_seed(0)) < 0.4, 300, 400, 64, 2),  # empty rows too
    ],
)
def test_block_mask_round_trip(layout, seq_q, seq_k, block_size, batch):
    block_mask = layouts.to_block_mask(layout, seq_q, seq_k, block_size, batch=batch)
    assert isinstance(block_mask, BlockMask)
    assert tuple(block_mask.BLOCK_SIZE) == (block_size, block_size)
    heads = layout.shape[0] if layout.dim() == 3 else 1
    assert block_mask.kv_num_blocks.shape == (batch or 1, heads, layout.shape[-2])
    assert int(block_mask.kv_num_blocks.sum()) == 0  # every kept block is a full block
    assert tuple(block_mask.shape[-2:]) == (seq_q, seq_k)
    assert torch.equal(block_mask.to_dense()[0, ..., : layout.shape[-1]].reshape(layout.shape), layout)
    back, partial = layouts.from_block_mask(block_mask, return_partial=True)
    assert torch.equal(back, layout) and not bool(partial.any())


@needs_flex
def test_block_mask_indexed_entry():
    layout = layouts.bigbird(12, seed=5, num_heads=2)
    block_mask = layouts.to_block_mask(layout, 768, 768, 64, batch=2)
    assert torch.equal(layouts.from_block_mask(block_mask[1]), layout)
    assert torch.equal(layouts.from_block_mask(block_mask[1, 0]), layout[0])


@needs_flex
def test_flex_attention_with_converted_layout_equals_masked_attention():
    torch.manual_seed(0)
    layout = layouts.bigbird(9, num_global=2, window=3, num_random=2, seed=4, num_heads=2)
    n, block_size = 9 * 32 - 10, 32
    q, k, v = (torch.randn(2, 2, n, 16, dtype=torch.float64) for _ in range(3))
    out = flex_eager(q, k, v, layouts.to_block_mask(layout, n, n, block_size))
    allowed = expand_to_elements(layout, n, n, block_size)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed[None])
    torch.testing.assert_close(out, ref)


@needs_flex
def test_block_mask_exact_partial_blocks_from_mask():
    fn = PREDICATES["causal_sliding"]
    n, block_size = 250, 32
    layout, partial = layouts.from_mask(fn, n, n, block_size, return_partial=True)
    block_mask = layouts.to_block_mask(layout, n, n, block_size, partial=partial, mask_fn=fn)
    assert torch.equal(layouts.from_block_mask(block_mask, return_partial=True)[1], partial)
    assert torch.equal(layouts.from_block_mask(block_mask), layout)
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 16, dtype=torch.float64) for _ in range(3))
    allowed = fn(torch.arange(n)[:, None], torch.arange(n)[None, :])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(flex_eager(q, k, v, block_mask), ref)


@needs_flex
def test_from_block_mask_of_torch_create_block_mask():
    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    for n in (256, 300):
        block_mask = create_block_mask(causal, None, None, n, n, device="cpu", BLOCK_SIZE=64)
        layout, partial = layouts.from_block_mask(block_mask, return_partial=True)
        expected, expected_partial = layouts.from_mask(PREDICATES["causal"], n, n, 64, return_partial=True)
        assert torch.equal(layout, expected)
        # torch counts the padding past N in a ragged last block as masked, so it may call the
        # last row/column of blocks partial where from_mask (which ignores padding) calls them full.
        assert bool((partial | ~expected_partial).all())
        extra = partial & ~expected_partial
        extra[-1, :] = False
        extra[:, -1] = False
        assert not bool(extra.any())


@needs_flex
def test_block_mask_errors():
    layout = layouts.local(4, 3)
    with pytest.raises(ValueError, match=r"\(4, 4\) .* \(5, 4\) blocks"):
        layouts.to_block_mask(layout, 300, 256, 64)
    with pytest.raises(TypeError, match="torch.bool"):
        layouts.to_block_mask(layout.float(), 256, 256, 64)
    with pytest.raises(ValueError, match="batch"):
        layouts.to_block_mask(layout, 256, 256, 64, batch=0)
    with pytest.raises(ValueError, match="partial and mask_fn go together"):
        layouts.to_block_mask(layout, 256, 256, 64, partial=torch.zeros_like(layout))
    with pytest.raises(ValueError, match="subset"):
        layouts.to_block_mask(layout, 256, 256, 64, partial=~layout, mask_fn=lambda q, k: q >= k)
    with pytest.raises(TypeError, match="BlockMask"):
        layouts.from_block_mask(layout)
    uneven = create_block_mask(lambda b, h, q, k: q >= k, None, None, 256, 256, device="cpu", BLOCK_SIZE=(64, 32))
    with pytest.raises(ValueError, match="BLOCK_SIZE"):
        layouts.from_block_mask(uneven)
    per_batch = BlockMask.from_kv_blocks(
        torch.tensor([[[1, 1]], [[2, 2]]], dtype=torch.int32).view(2, 1, 2),
        torch.tensor([[0, 1], [1, 0], [0, 1], [0, 1]], dtype=torch.int32).view(2, 1, 2, 2),
        BLOCK_SIZE=64,
    )
    with pytest.raises(ValueError, match="batch entries"):
        layouts.from_block_mask(per_batch)


def test_benchmark_layouts_are_the_documented_builders():
    for name in layouts.BENCHMARK_LAYOUTS:
        got = layouts.benchmark_layout(name, 12)
        want = {"bigbird": lambda: layouts.bigbird(12, seed=0), "local": lambda: layouts.local(12, 3),
                "butterfly": lambda: layouts.butterfly(12)}[name]()
        assert torch.equal(got, want), name
    with pytest.raises(ValueError, match="unknown benchmark layout 'dense'"):
        layouts.benchmark_layout("dense", 12)
