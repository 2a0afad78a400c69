"""Resolution transfer: grid duplication, the exact upsampling property and checkpoint compatibility
errors (lra.checkpoint_transfer), recipes (lra.transfer_recipe), cost arithmetic (lra.transfer_cost)
and the `lra transfer` chain at smoke scale (lra.transfer_chain)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch

from lra import checkpoint_transfer, transfer_chain, transfer_cost, transfer_recipe
from lra.config import ModelConfig, RunConfig
from lra.model import DataSpec, build_model

DIM = 8
TINY = ModelConfig(dim=DIM, depth=2, num_heads=2, head_dim=4, mlp_dim=16, dropout=0.0, attention_dropout=0.0)


def spec_for(side: int | tuple, *, vocab: int = 256, classes: int = 2) -> DataSpec:
    h, w = (side, side) if isinstance(side, int) else side
    return DataSpec(vocab_size=vocab, num_classes=classes, max_len=h * w, image_shape=(h, w))


def network(cfg: ModelConfig, spec: DataSpec, *, attention: str = "softmax", seed: int = 0,
            dtype=torch.float64) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(cfg, spec, attention=attention, seed=seed).to(dtype).eval()
    with torch.no_grad():  # no zero-initialised tensors: every weight must matter in the comparisons
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def save_checkpoint(path: Path, model: torch.nn.Module, cfg: ModelConfig, spec: DataSpec, *,
                    task: str = "pathfinder32", attention: str = "softmax") -> Path:
    """The layout `lra train` writes: Lightning's state_dict ("model." prefix) + hyper-parameters."""
    config = RunConfig(task=task, attention=attention, model=cfg)
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                "hyper_parameters": {"config": config.to_dict(), "data_spec": spec.to_dict()},
                "pytorch-lightning_version": "2.6.6"}, path)
    return path


def nearest_upsample(tokens: torch.Tensor, side: int, factor: int) -> torch.Tensor:
    """(B, side*side) pixel tokens -> (B, (side*factor)**2): every pixel becomes a factor x factor block."""
    image = tokens.view(-1, side, side)
    return image.repeat_interleave(factor, 1).repeat_interleave(factor, 2).reshape(tokens.shape[0], -1)


# ------------------------------------------------------------------------------------ grid duplication
def test_grid_duplication_is_the_expected_repeated_grid(tmp_path):
    source = network(TINY, spec_for(3))
    grid = torch.arange(3 * 3 * DIM, dtype=torch.float64).view(3, 3, DIM)
    source.encoder.positions.weight.data.copy_(grid)
    ckpt = save_checkpoint(tmp_path / "s.ckpt", source, TINY, spec_for(3))
    for factor in (1, 2, 4):
        target = network(TINY, spec_for(3 * factor), seed=1)
        report = checkpoint_transfer.load_initial_weights(target, ckpt, model_config=TINY, data_spec=spec_for(3 * factor))
        got = target.encoder.positions.weight.detach()
        expected = torch.empty(3 * factor, 3 * factor, DIM, dtype=torch.float64)
        for i in range(3 * factor):
            for j in range(3 * factor):
                expected[i, j] = grid[i // factor, j // factor]
        assert torch.equal(got, expected)
        assert report.factor == factor
        assert report.upsampled == (["encoder.positions.weight"] if factor > 1 else [])
        # every other weight is copied bit for bit
        for key, value in source.state_dict().items():
            if key != "encoder.positions.weight":
                assert torch.equal(target.state_dict()[key], value), key
        assert report.copied == len(source.state_dict())


def test_grid_factor_rules():
    assert checkpoint_transfer.grid_factor((64, 64), (128, 128)) == 2
    assert checkpoint_transfer.grid_factor((64, 64), (256, 256)) == 4
    assert checkpoint_transfer.grid_factor((64, 64), (64, 64)) == 1
    with pytest.raises(ValueError, match="not an integer multiple"):
        checkpoint_transfer.grid_factor((64, 64), (96, 96))
    with pytest.raises(ValueError, match="smaller"):
        checkpoint_transfer.grid_factor((64, 64), (32, 32))
    with pytest.raises(ValueError, match="same factor on both sides"):
        checkpoint_transfer.grid_factor((64, 64), (128, 256))


# ------------------------------------------------------------------------- the exact transfer property
@pytest.mark.parametrize("factor", [2, 4])
def test_upsampled_model_on_upsampled_image_gives_identical_logits(tmp_path, factor):
    """Duplicating every pixel into a factor x factor block, with the positions duplicated the same
    way, turns each token of the small image into factor**2 identical tokens. Softmax attention then
    gives every copy the same output as the original token (each key appears factor**2 times, in
    the numerator and in the normaliser alike), LayerNorm / MLP act per token, and the mean over
    tokens is unchanged: the logits are equal up to float64 rounding."""
    side = 6
    small_spec, big_spec = spec_for(side), spec_for(side * factor)
    small = network(TINY, small_spec)
    ckpt = save_checkpoint(tmp_path / "small.ckpt", small, TINY, small_spec)
    big = network(TINY, big_spec, seed=3)
    tokens = torch.randint(0, 256, (4, side * side), generator=torch.Generator().manual_seed(0))
    upsampled = nearest_upsample(tokens, side, factor)
    with torch.no_grad():
        before = big(upsampled)
        checkpoint_transfer.load_initial_weights(big, ckpt, model_config=TINY, data_spec=big_spec)
        expected, got = small(tokens), big(upsampled)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-11, atol=1e-12)
    assert not torch.allclose(before, expected, atol=1e-3)  # the untrained big model was different

    # The property is specific to duplication: tiling the grid (another "upsampling") breaks it.
    with torch.no_grad():
        big.encoder.positions.weight.copy_(small.encoder.positions.weight.tile(factor, factor, 1))
        assert not torch.allclose(big(upsampled), expected, atol=1e-4)


@pytest.mark.parametrize("factor", [2, 4])
def test_axial_positions_transfer_by_duplicating_rows_and_columns(tmp_path, factor):
    """model.positional=axial: rows and columns are each duplicated factor times, which is grid
    duplication of their summed table; the exact logits property holds as for the full grid."""
    axial = dataclasses.replace(TINY, positional="axial")
    side = 5
    small_spec, big_spec = spec_for(side), spec_for(side * factor)
    small = network(axial, small_spec)
    ckpt = save_checkpoint(tmp_path / "axial.ckpt", small, axial, small_spec)
    big = network(axial, big_spec, seed=4)
    report = checkpoint_transfer.load_initial_weights(big, ckpt, model_config=axial, data_spec=big_spec)
    assert sorted(report.upsampled) == ["encoder.positions.cols", "encoder.positions.rows"]
    grid_small, grid_big = small.encoder.positions.grid(), big.encoder.positions.grid()
    for i in range(side * factor):
        for j in range(side * factor):
            assert torch.equal(grid_big[i, j], grid_small[i // factor, j // factor])
    tokens = torch.randint(0, 256, (3, side * side), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(big(nearest_upsample(tokens, side, factor)), small(tokens),
                                   rtol=1e-11, atol=1e-12)
    # a grid-position model does not take an axial checkpoint (and vice versa)
    refuse(ckpt, TINY, big_spec, r"positional embedding \(model.positional\) axial in the checkpoint vs learned here")


@pytest.mark.cpu_machine("builds our kernels' modules on CPU tensors, which only Triton's interpreter runs")
def test_exact_property_holds_through_our_flash_kernel(tmp_path):
    """The same property with the Triton FlashAttention kernel (interpreter on CPU, float32)."""
    side, factor = 4, 2
    small_spec, big_spec = spec_for(side), spec_for(side * factor)
    small = network(TINY, small_spec, attention="flash", dtype=torch.float32)
    ckpt = save_checkpoint(tmp_path / "small.ckpt", small, TINY, small_spec, attention="flash")
    big = network(TINY, big_spec, attention="flash", seed=3, dtype=torch.float32)
    checkpoint_transfer.load_initial_weights(big, ckpt, model_config=TINY, data_spec=big_spec)
    tokens = torch.randint(0, 256, (2, side * side), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(big(nearest_upsample(tokens, side, factor)), small(tokens),
                                   rtol=2e-5, atol=2e-6)


# ---------------------------------------------------------------------------- compatibility errors
@pytest.fixture()
def source_ckpt(tmp_path):
    spec = spec_for(4)
    return save_checkpoint(tmp_path / "source.ckpt", network(TINY, spec), TINY, spec)


def refuse(ckpt, cfg: ModelConfig, spec: DataSpec, match: str, attention: str = "softmax"):
    """Loading must raise one ValueError matching `match` and leave the model untouched."""
    model = network(cfg, spec, attention=attention, seed=7)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=match) as info:
        checkpoint_transfer.load_initial_weights(model, ckpt, model_config=cfg, data_spec=spec)
    assert isinstance(info.value, checkpoint_transfer.IncompatibleCheckpoint)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    return str(info.value)


@pytest.mark.parametrize("field_name, value, words", [
    ("dim", 16, r"width \(model.dim\) 8 in the checkpoint vs 16 here"),
    ("depth", 3, r"depth \(model.depth\) 2 in the checkpoint vs 3 here"),
    ("num_heads", 4, r"heads \(model.num_heads\) 2 in the checkpoint vs 4 here"),
    ("head_dim", 8, r"head dim \(model.head_dim\) 4 in the checkpoint vs 8 here"),
    ("mlp_dim", 32, r"MLP width \(model.mlp_dim\) 16 in the checkpoint vs 32 here"),
    ("pooling", "cls", r"pooling \(model.pooling\) mean in the checkpoint vs cls here"),
    ("pixel_embedding", "linear", r"pixel embedding \(model.pixel_embedding\) token in the checkpoint vs linear here"),
])
def test_refuses_other_architecture(source_ckpt, field_name, value, words):
    cfg = dataclasses.replace(TINY, **{field_name: value})
    message = refuse(source_ckpt, cfg, spec_for(8), words)
    assert str(source_ckpt) in message


def test_refuses_other_vocabulary_and_classes(source_ckpt):
    refuse(source_ckpt, TINY, spec_for(8, vocab=300), "vocabulary 256 tokens in the checkpoint vs 300 here")
    refuse(source_ckpt, TINY, spec_for(8, classes=10), "2 classes in the checkpoint vs 10 here")
    both = refuse(source_ckpt, dataclasses.replace(TINY, depth=1), spec_for(8, vocab=300), "depth")
    assert "vocabulary" in both  # every mismatch in one message


def test_refuses_non_grid_positions(tmp_path):
    flat = dataclasses.replace(TINY, grid_positions=False)
    flat_ckpt = save_checkpoint(tmp_path / "flat.ckpt", network(flat, spec_for(4)), flat, spec_for(4))
    refuse(flat_ckpt, TINY, spec_for(8), r"checkpoint has flat learned positions \(model.grid_positions=false\)")
    sin = dataclasses.replace(TINY, positional="sinusoidal")
    sin_ckpt = save_checkpoint(tmp_path / "sin.ckpt", network(sin, spec_for(4)), sin, spec_for(4))
    refuse(sin_ckpt, sin, spec_for(8), "uses sinusoidal positions, which have no learned 2-D grid")
    grid_ckpt = save_checkpoint(tmp_path / "grid.ckpt", network(TINY, spec_for(4)), TINY, spec_for(4))
    refuse(grid_ckpt, flat, spec_for(8), "target model has flat learned positions")
    # At the same length nothing is upsampled: a flat table copies as it is.
    same = network(flat, spec_for(4), seed=9)
    assert checkpoint_transfer.load_initial_weights(same, flat_ckpt, model_config=flat, data_spec=spec_for(4)).factor == 1


def test_refuses_non_integer_or_shrinking_factor(source_ckpt):
    refuse(source_ckpt, TINY, spec_for(6), r"6x6 is not an integer multiple of the checkpoint's 4x4 \(factor 1.5")
    refuse(source_ckpt, TINY, spec_for(2), "smaller than the checkpoint's 4x4")
    refuse(source_ckpt, TINY, spec_for((8, 16)), "by 2 x 4")


def test_refuses_missing_or_foreign_files(tmp_path):
    spec = spec_for(8)
    refuse(tmp_path / "nope.ckpt", TINY, spec, "nope.ckpt: no such file")
    refuse(tmp_path, TINY, spec, "is a folder, not a checkpoint file")
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"this is not a checkpoint\n" * 10)
    refuse(junk, TINY, spec, "junk.ckpt is not a readable checkpoint")
    bare = tmp_path / "bare.pt"
    torch.save(network(TINY, spec).state_dict(), bare)
    refuse(bare, TINY, spec, "not a Lightning checkpoint of an lra run \\(it holds a bare state_dict")
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"model.x": torch.zeros(1)}, "hyper_parameters": {"lr": 0.1}}, foreign)
    refuse(foreign, TINY, spec, "not of an lra run")


def test_attention_state_kept_or_refused(tmp_path):
    """Attention-owned state: Performer's random features are the target's own when the checkpoint
    (FlashAttention / softmax) has none; Linformer's length-dependent projections cannot transfer."""
    spec4, spec8 = spec_for(4), spec_for(8)
    ckpt = save_checkpoint(tmp_path / "softmax.ckpt", network(TINY, spec4), TINY, spec4)
    performer = network(TINY, spec8, attention="performer", seed=2)
    features = {k: v.clone() for k, v in performer.state_dict().items() if k.endswith("core.projection")}
    assert len(features) == TINY.depth
    report = checkpoint_transfer.load_initial_weights(performer, ckpt, model_config=TINY, data_spec=spec8)
    assert set(features) <= set(report.kept)
    assert all(torch.equal(performer.state_dict()[k], v) for k, v in features.items())
    # Performer -> Performer: its features and counters (extra state) come from the checkpoint.
    perf_ckpt = save_checkpoint(tmp_path / "perf.ckpt", performer, TINY, spec8, attention="performer")
    again = network(TINY, spec_for(16), attention="performer", seed=5)
    report = checkpoint_transfer.load_initial_weights(again, perf_ckpt, model_config=TINY, data_spec=spec_for(16))
    assert report.kept == [] and report.factor == 2
    assert all(torch.equal(again.state_dict()[k], v) for k, v in features.items())
    lin_ckpt = save_checkpoint(tmp_path / "lin.ckpt", network(TINY, spec4, attention="linformer"), TINY, spec4,
                               attention="linformer")
    message = refuse(lin_ckpt, TINY, spec8, "cannot be transferred", attention="linformer")
    assert "linformer" in message and "grid duplication" not in message
    # Linformer weights are the checkpoint attention's own: a softmax target ignores them.
    report = checkpoint_transfer.load_initial_weights(network(TINY, spec8), lin_ckpt, model_config=TINY, data_spec=spec8)
    assert report.ignored and all(".core." in k for k in report.ignored)


def test_initial_weights_from_an_lra_module(tmp_path):
    """An LraModule carries its own configs: the integration in `lra train` is one call."""
    from lra.module import LraModule

    spec4, spec8 = spec_for(4), spec_for(8)
    ckpt = save_checkpoint(tmp_path / "s.ckpt", network(TINY, spec4, dtype=torch.float32), TINY, spec4)
    config = RunConfig(task="pathfinder64", attention="softmax", model=TINY)
    module = LraModule(config.to_dict(), spec8.to_dict())
    report = checkpoint_transfer.load_initial_weights(module, ckpt)
    assert report.factor == 2 and report.copied == len(module.model.state_dict())
    source = torch.load(ckpt, weights_only=True)["state_dict"]
    assert torch.equal(module.model.encoder.embed.weight, source["model.encoder.embed.weight"])


# ------------------------------------------------------------------------------------- recipes, cost
@pytest.mark.parametrize("target", transfer_recipe.TARGETS)
def test_shipped_recipes_resolve_and_chain_compatible_models(target):
    """Every recipe's stages resolve against the task presets, and each stage's model fits the one
    it starts from (a mismatch would surface only after days of pretraining)."""
    for name in transfer_recipe.recipe_names(target):
        recipe = transfer_recipe.load_recipe(target, name)
        stages = {s.name: s for s in transfer_chain.plan_chain(recipe, transfer_chain.ChainOptions())}
        scratch = transfer_chain.plan_chain(recipe, transfer_chain.ChainOptions(), from_scratch=True)[0]
        assert scratch.config.model == stages["finetune"].config.model
        for stage in stages.values():
            if stage.spec.init_stage:
                source = stages[stage.spec.init_stage].config
                assert source.model == stage.config.model, (name, stage.name)
                side = lambda n: int(round(n ** 0.5))  # noqa: E731 - square images
                assert side(stage.config.data.seq_len) % side(source.data.seq_len) == 0
        if name not in ("smoke", "mini", "curriculum"):  # these start below Path-64
            assert stages["finetune"].config.task == target
            assert stages["pretrain"].config.task == "pathfinder64"
        if name == f"{target}-transfer":
            assert stages["pretrain"].config.preset == "path64-pretrain"  # shared between the targets


def test_mini_recipe_transfers_pathfinder32_to_64_with_the_paper_model():
    mini = transfer_recipe.load_recipe("pathx", "mini")
    pretrain, finetune = transfer_chain.plan_chain(mini, transfer_chain.ChainOptions())
    scratch = transfer_chain.plan_chain(mini, transfer_chain.ChainOptions(), from_scratch=True)[0]
    assert (pretrain.config.task, finetune.config.task, scratch.config.task) == ("pathfinder32", "pathfinder64",
                                                                                  "pathfinder64")
    assert pretrain.config.model == finetune.config.model == scratch.config.model
    assert finetune.config.model.dim == 64 and finetune.config.train.batch_size == 256  # the paper's
    assert finetune.spec.init_stage == "pretrain" and scratch.spec.init_stage is None
    assert finetune.config.optim.schedule == scratch.config.optim.schedule == "cosine"


def test_curriculum_recipe_chains_pathfinder32_64_pathx_with_augmentation():
    """The chain that left chance in our runs: PF32 -> PF64 -> Path-X from best checkpoints,
    easy images and dihedral augmentation in every stage (the scratch baseline too), the paper model
    throughout, and the stages' batch sizes as measured."""
    recipe = transfer_recipe.load_recipe("pathx", "curriculum")
    stages = transfer_chain.plan_chain(recipe, transfer_chain.ChainOptions())
    scratch = transfer_chain.plan_chain(recipe, transfer_chain.ChainOptions(), from_scratch=True)[0]
    assert [(s.name, s.config.task) for s in stages] == [("pretrain", "pathfinder32"), ("path64", "pathfinder64"),
                                                         ("finetune", "pathx")]
    assert [s.spec.init_stage for s in stages] == [None, "pretrain", "path64"]
    assert all(s.spec.init_checkpoint == "best" for s in stages[1:])
    for stage in (*stages, scratch):
        assert (stage.config.data.difficulty, stage.config.data.augment) == ("easy", "dihedral"), stage.name
        assert stage.config.model == stages[0].config.model
    assert [s.config.train.batch_size for s in stages] == [256, 128, 32]
    assert scratch.config.task == "pathx" and scratch.config.train.batch_size == 32
    assert scratch.config.preset != stages[-1].config.preset  # its own rows and curves


def test_path256_recipe_is_block_sparse_butterfly_and_overridable():
    paper = transfer_recipe.load_recipe("path256", "path256-transfer")
    pretrain, finetune = (s.config for s in transfer_chain.plan_chain(paper, transfer_chain.ChainOptions()))
    assert (pretrain.attention, finetune.attention) == ("flash", "flash_sparse")
    assert finetune.attention_options["layout"] == "butterfly" and finetune.attention_options["block_size"] == 128
    # One Path-64 pretraining serves both targets: the same run id, so the second chain skips it.
    shared = [transfer_chain.plan_chain(transfer_recipe.load_recipe(t, f"{t}-transfer"), transfer_chain.ChainOptions())[0]
              for t in transfer_recipe.TARGETS]
    for stage in shared:
        transfer_chain.fix_length(stage, 160_000)
    assert shared[0].config.run_id() == shared[1].config.run_id()
    options = transfer_chain.ChainOptions(overrides=["finetune:attention.layout=local", "finetune:attention.window=5"])
    finetune = transfer_chain.plan_chain(paper, options)[1].config  # the command line wins over the recipe
    assert (finetune.attention_options["layout"], finetune.attention_options["window"]) == ("local", 5)
    assert finetune.attention_options["block_size"] == 128


def test_epochs_become_steps_and_overrides_reach_their_stage():
    recipe = transfer_recipe.load_recipe("pathx", "pathx-transfer")
    options = transfer_chain.ChainOptions(overrides=["epochs=3", "finetune:optim.lr=5e-5", "pretrain:epochs=10",
                                               "train.accumulate_grad_batches=2"], devices="1")
    pretrain, finetune, finetune2 = transfer_chain.plan_chain(recipe, options)
    transfer_chain.fix_length(pretrain, 1000)  # batch 256, accumulate 2: ceil(ceil(1000/256)/2) = 2 steps
    transfer_chain.fix_length(finetune, 1000)
    assert (pretrain.steps_per_epoch, pretrain.config.train.max_steps) == (2, 20)
    assert pretrain.config.optim.warmup_steps == 1 and pretrain.config.optim.schedule == "linear"
    assert (finetune.config.train.max_steps, finetune.config.optim.warmup_steps) == (6, 2)
    assert finetune.config.train.val_check_interval == 2 and finetune.config.optim.schedule == "cosine"
    assert finetune.config.optim.lr == 5e-5 and finetune2.config.optim.lr == 1e-4
    assert finetune.config.preset == "pathx-transfer" and finetune2.config.preset == "pathx-transfer-ft2"
    # Later wins: recipe-wide < the stage's own < command line for all < command line for the stage.
    smoke = transfer_recipe.load_recipe("pathx", "smoke")
    batch = lambda opts: [s.config.train.batch_size for s in transfer_chain.plan_chain(smoke, opts)]  # noqa: E731
    assert batch(transfer_chain.ChainOptions()) == [4, 2, 2]
    assert batch(transfer_chain.ChainOptions(overrides=["train.batch_size=3"])) == [3, 3, 3]
    assert batch(transfer_chain.ChainOptions(overrides=["finetune:train.batch_size=5", "train.batch_size=3"])) == [3, 5, 3]
    with pytest.raises(ValueError, match="no stage 'bogus'"):
        transfer_chain.plan_chain(recipe, transfer_chain.ChainOptions(overrides=["bogus:epochs=1"]))
    with pytest.raises(ValueError, match="model.dim"):
        transfer_chain.plan_chain(recipe, transfer_chain.ChainOptions(overrides=["model.dimm=3"]))
    with pytest.raises(ValueError, match="no transfer recipe 'nope'"):
        transfer_recipe.load_recipe("pathx", "nope")
    with pytest.raises(ValueError, match="unknown transfer target"):
        transfer_recipe.load_recipe("image", "smoke")


def test_stage_preset_override_renames_one_stage_and_keeps_its_run_apart():
    """`pretrain:preset=NAME` records a pretraining variant under its own name (its own run id and
    table rows); the stage that starts from it follows, and a nameless `preset=` is refused."""
    mini = transfer_recipe.load_recipe("pathx", "mini")
    plain = transfer_chain.plan_chain(mini, transfer_chain.ChainOptions(overrides=["pretrain:optim.lr=5e-4"]))
    renamed = transfer_chain.plan_chain(mini, transfer_chain.ChainOptions(
        overrides=["pretrain:optim.lr=5e-4", "pretrain:preset=mini-pretrain-lr5e-4"]))
    for stages in (plain, renamed):
        for stage in stages:
            transfer_chain.fix_length(stage, 1000)
    assert [s.config.preset for s in plain] == ["mini-pretrain", "mini-finetune"]
    assert [s.config.preset for s in renamed] == ["mini-pretrain-lr5e-4", "mini-finetune"]
    assert renamed[0].config.optim.lr == 5e-4 and renamed[0].config.train.max_steps == plain[0].config.train.max_steps
    assert renamed[0].run_dir != plain[0].run_dir and renamed[0].run_dir.name.startswith("mini-pretrain-lr5e-4-")
    assert renamed[1].config.run_id() == plain[1].config.run_id()  # the fine-tune itself is unchanged
    with pytest.raises(ValueError, match="name the stage"):
        transfer_chain.plan_chain(mini, transfer_chain.ChainOptions(overrides=["preset=x"]))
    with pytest.raises(ValueError, match="preset name"):
        transfer_chain.plan_chain(mini, transfer_chain.ChainOptions(overrides=["pretrain:preset=../x"]))


def test_cost_formula():
    stages = [transfer_cost.StageCost(stage="pretrain", task="pathfinder64", attention="flash", batch_size=256,
                                 devices=1, steps_per_epoch=625, epochs=200, evals=200, val_batches=79,
                                 step_ms=36.0),
              transfer_cost.StageCost(stage="finetune", task="pathx", attention="flash", batch_size=256, devices=2,
                                 steps_per_epoch=313, epochs=200, evals=200, val_batches=40, step_ms=90.0,
                                 val_ms=20.0)]
    df = transfer_cost.estimate_cost(stages)
    pre = 625 * 200 * 36.0 / 3.6e6 + 200 * 79 * 12.0 / 3.6e6
    fine = 2 * (313 * 200 * 90.0 / 3.6e6 + 200 * 40 * 20.0 / 3.6e6)
    assert df.loc[0, "gpu_h"] == pytest.approx(pre)
    assert df.loc[1, "gpu_h"] == pytest.approx(fine)
    assert df.iloc[-1]["stage"] == "total" and df.iloc[-1]["gpu_h"] == pytest.approx(pre + fine)
    # Path-256: 4 accumulated micro-batches per optimizer step; a validation batch is one micro-batch
    accumulated = transfer_cost.estimate_cost([dataclasses.replace(stages[0], accumulate=4)])
    assert accumulated.loc[0, "val_h"] == pytest.approx(200 * 79 * (36.0 / 4 / 3) / 3.6e6)
    unknown = transfer_cost.estimate_cost([dataclasses.replace(stages[0], step_ms=None), stages[1]])
    assert unknown.iloc[-1]["gpu_h"] is None or unknown.iloc[-1]["gpu_h"] != unknown.iloc[-1]["gpu_h"]


# ------------------------------------------------------------------------------ the chain, smoke scale
class CrashAtStep(pl.Callback):
    """Stands in for a killed job: fails after `step` optimizer steps (last.ckpt is saved on the way out)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("simulated crash")


def test_chain_smoke_pretrain_finetune_twice_resume_and_skip(tmp_path):
    """`lra transfer --target pathx --preset smoke` at CPU scale: Pathfinder-32 -> Pathfinder-64 ->
    Pathfinder-64 again, interrupted in the first fine-tune, resumed, then skipped entirely."""
    from lra.train import RunFailed
    from lra.train import train as real_train

    runs = tmp_path / "runs"
    recipe = transfer_recipe.load_recipe("pathx", "smoke")
    options = transfer_chain.ChainOptions(runs_dir=str(runs), data_dir=str(tmp_path / "data"))
    calls = []

    def crash_in_finetune(config, **kwargs):
        calls.append(config.preset)
        if config.preset == "smoke-finetune":
            kwargs["callbacks"] = [*kwargs["callbacks"], CrashAtStep(1)]
        return real_train(config, **kwargs)

    def train_and_count(config, **kwargs):
        calls.append(config.preset)
        return real_train(config, **kwargs)

    with pytest.raises(RunFailed, match="simulated crash"):
        transfer_chain.run_chain(transfer_chain.plan_chain(recipe, options), train_fn=crash_in_finetune, progress_bar=False)
    stages = transfer_chain.plan_chain(recipe, options)
    pretrain, finetune, finetune2 = stages
    for stage in stages:  # the run ids depend on the step counts, fixed once the data is counted
        transfer_chain.fix_length(stage, 16 if stage.config.task == "pathfinder32" else 4)
    assert [s.state() for s in stages] == ["done", "resume", "new"]
    init = json.loads((finetune.run_dir / "init.json").read_text())
    assert init["init_from_stage"] == "pretrain" and init["checkpoint"] == "last"
    assert init["transfer"]["factor"] == 2 and init["transfer"]["upsampled"] == ["encoder.positions.weight"]

    calls.clear()
    records = transfer_chain.run_chain(transfer_chain.plan_chain(recipe, options), train_fn=train_and_count, progress_bar=False)
    assert calls == ["smoke-finetune", "smoke-finetune2"]
    assert [r["status"] for r in records] == ["completed"] * 3
    assert records[1]["steps"] == finetune.config.train.max_steps == 2  # resumed, not restarted
    assert records[0]["task"] == "pathfinder32" and records[1]["task"] == records[2]["task"] == "pathfinder64"
    assert [r["preset"] for r in records] == ["smoke-pretrain", "smoke-finetune", "smoke-finetune2"]
    init2 = json.loads((finetune2.run_dir / "init.json").read_text())
    assert init2["init_from_stage"] == "finetune" and init2["checkpoint"] == "best"
    assert init2["source_path"].endswith(".ckpt") and "best-" in init2["source_path"]
    assert init2["transfer"]["factor"] == 1 and init2["transfer"]["copied"] > 0

    def no_training(config, **kwargs):
        raise AssertionError(f"{config.preset} should have been skipped")

    again = transfer_chain.run_chain(transfer_chain.plan_chain(recipe, options), train_fn=no_training, progress_bar=False)
    assert [r["run_id"] for r in again] == [r["run_id"] for r in records]

    summary = transfer_chain.chain_summary(stages)
    assert list(summary["status"]) == ["completed"] * 3
    assert list(summary["init"]) == ["-", "pretrain (last)", "finetune (best)"]

    # A finished stage that started from another checkpoint than the chain now asks for is refused.
    init["source_run"] = "pathfinder32/sdpa/another-run"
    (finetune.run_dir / "init.json").write_text(json.dumps(init))
    with pytest.raises(ValueError, match="started from pathfinder32/sdpa/another-run"):
        transfer_chain.run_chain(transfer_chain.plan_chain(recipe, options), train_fn=no_training, progress_bar=False)


def test_cli_plan_cost_and_bad_input(tmp_path, capsys):
    from lra.cli import main

    runs = str(tmp_path / "runs")
    assert main(["transfer", "--target", "pathx", "--preset", "nope", "--runs-dir", runs]) == 2
    expected = "no transfer recipe 'nope' for target pathx; available: pathx-transfer, mini, curriculum, smoke, cpu"
    assert expected in capsys.readouterr().err
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--dry-run", "bogus:epochs=1"]) == 2
    assert "no stage 'bogus'" in capsys.readouterr().err
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--estimate-cost", "--step-ms", "nope=3"]) == 2
    capsys.readouterr()
    # Sizes that cannot be a training split, or name a task the recipe never trains on, were taken
    # silently (a negative size planned "x 1 = 200 steps"; a misspelt task was ignored).
    for bad, message in ((["--train-examples", "pathfinder64=-5"], "pathfinder64=-5: the training split needs"),
                         (["--train-examples", "pathfinder46=1000"], "no stage of this recipe trains on 'pathfinder46'"),
                         (["--step-ms", "pretrain=0"], "--step-ms pretrain=0: a step time must be > 0")):
        assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--dry-run", *bad]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err

    sizes = ["--train-examples", "pathfinder64=160000", "--train-examples", "pathx=160000"]
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--dry-run", *sizes]) == 0
    out = capsys.readouterr().out
    assert "[1/3] pretrain   new     pathfinder64/flash preset path64-pretrain, 200 epochs x 625 = 125,000" in out
    assert "[3/3] finetune2  new     pathx/flash preset pathx-transfer-ft2" in out and "from finetune (best)" in out
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--dry-run", "--until", "finetune", *sizes]) == 0
    out = capsys.readouterr().out
    assert "[2/2] finetune" in out and "finetune2" not in out
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--dry-run", "--until", "finetune3", *sizes]) == 2
    assert "--until 'finetune3': no such stage in this chain; stages: pretrain, finetune, finetune2" in capsys.readouterr().err

    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--estimate-cost", *sizes,
                 "--step-ms", "pretrain=36", "--step-ms", "finetune=90", "--step-ms", "finetune2=90"]) == 0
    out = capsys.readouterr().out
    total = [line for line in out.splitlines() if line.startswith("| total")][0]
    # 125,000 steps x (36 + 90 + 90) ms, plus 200 validations x 79 batches x ms/3 per stage
    expected = (125_000 * (36 + 90 + 90) + 200 * 79 * (36 + 90 + 90) / 3) / 3.6e6
    assert f"{expected:.3g}" in total
    # a stage without a step time gets the command that measures it, on the same data folder
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--estimate-cost", *sizes,
                 "--data-dir", str(tmp_path / "my data")]) == 0
    out = capsys.readouterr().out
    assert out.count(f"--data-dir '{tmp_path / 'my data'}'") == 3 and "runs-measure" in out


def test_the_cost_of_generated_data_is_estimated_from_its_counts_without_making_it(tmp_path, capsys):
    """Generated data's split sizes are the generator's counts: --estimate-cost and --dry-run use them and
    write no image (they generated 819 MB of Pathfinder-64 images to count them)."""
    from lra.cli import main

    data, runs = tmp_path / "data", str(tmp_path / "runs")
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--data-dir", str(data), "--estimate-cost",
                 "--step-ms", "pretrain=36", "--step-ms", "finetune=90", "--step-ms", "finetune2=90"]) == 0
    captured = capsys.readouterr()
    assert "counting the training splits" not in captured.err
    total = [line for line in captured.out.splitlines() if line.startswith("| total")][0]
    # the same figures as with --train-examples pathfinder64=160000 pathx=160000 (the paper's 80/10/10 split)
    expected = (125_000 * (36 + 90 + 90) + 200 * 79 * (36 + 90 + 90) / 3) / 3.6e6
    assert f"{expected:.3g}" in total
    assert main(["transfer", "--target", "pathx", "--runs-dir", runs, "--data-dir", str(data), "--dry-run"]) == 0
    assert "200 epochs x 625 = 125,000 steps" in capsys.readouterr().out
    assert not data.exists()


def test_lra_train_init_from_upsamples_and_refuses_mismatch(tmp_path, capsys):
    """`lra train --init-from CKPT`: a 16x16 checkpoint of the smoke model starts a 32x32 run (grid
    factor 2, recorded in the run config); a checkpoint of another vocabulary is one clear error."""
    from lra.cli import main
    from lra.config import resolve
    from lra.records import read_record

    cfg = resolve("pathfinder32", "softmax", preset="smoke").model
    good = save_checkpoint(tmp_path / "p16.ckpt", network(cfg, spec_for(16), dtype=torch.float32), cfg,
                           spec_for(16))
    bad = save_checkpoint(tmp_path / "v300.ckpt", network(cfg, spec_for(16, vocab=300), dtype=torch.float32),
                          cfg, spec_for(16, vocab=300))
    common = ["train", "--task", "pathfinder32", "--attention", "softmax", "--preset", "smoke",
              "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--no-progress"]

    assert main(common + ["--init-from", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "lra train: error:" in err and "vocabulary" in err, err
    assert not list((tmp_path / "runs").glob("**/result.json"))

    assert main(common + ["--init-from", str(good), "train.max_steps=2", "train.val_check_interval=2"]) == 0
    out = capsys.readouterr().out
    assert "positional grid duplicated 2x2" in out, out
    (record_path,) = (tmp_path / "runs").glob("**/result.json")
    record = read_record(record_path)
    assert record["status"] == "completed"
    assert record["config"]["train"]["init_from"] == str(good)


def test_a_run_started_from_a_checkpoint_resumes_without_it(tmp_path, capsys, monkeypatch):
    """A fine-tune stopped at a deadline ($LRA_STOP_AT) resumes from its own last.ckpt when the
    initial checkpoint is no longer there (a run tree carried to another machine without it): same
    run id, the remaining steps, no weights loaded from the missing file. A fresh run with a missing
    --init-from is still one clear error."""
    from lra.cli import main
    from lra.records import read_record

    cfg = resolve_smoke_model()
    good = save_checkpoint(tmp_path / "p16.ckpt", network(cfg, spec_for(16), dtype=torch.float32), cfg,
                           spec_for(16))
    common = ["train", "--task", "pathfinder32", "--attention", "softmax", "--preset", "smoke",
              "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--no-progress",
              "--init-from", str(good), "train.max_steps=4", "train.val_check_interval=2"]
    monkeypatch.setenv("LRA_STOP_AT", "1")   # already past: stop at the first step, as on Ctrl-C
    assert main(common) == 130                 # a resumable stop, as Ctrl-C
    (record_path,) = (tmp_path / "runs").glob("**/result.json")
    assert read_record(record_path)["status"] == "interrupted"
    assert "positional grid duplicated 2x2" in capsys.readouterr().out

    good.unlink()
    monkeypatch.setenv("LRA_STOP_AT", str(10**12))
    assert main(common + ["--resume"]) == 0
    out = capsys.readouterr().out
    assert "is not needed" in out and "positional grid duplicated" not in out, out
    assert list((tmp_path / "runs").glob("**/result.json")) == [record_path]
    record = read_record(record_path)
    assert record["status"] == "completed" and record["steps"] == 4

    fresh = ["train", "--task", "pathfinder32", "--attention", "softmax", "--preset", "smoke",
             "--runs-dir", str(tmp_path / "runs2"), "--data-dir", str(tmp_path / "data"), "--no-progress",
             "--init-from", str(good)]
    assert main(fresh) == 2
    assert "p16.ckpt" in capsys.readouterr().err

    # --resume naming the checkpoint by another path: a new run id,
    # nothing to resume there -- the error says the path is part of the id
    moved = tmp_path / "elsewhere" / "p16.ckpt"
    assert main([*common[:-3], str(moved), *common[-2:], "--resume"]) == 2
    err = capsys.readouterr().err
    assert "part of the run id" in err and str(moved) in err, err
    assert list((tmp_path / "runs").glob("**/result.json")) == [record_path]


def resolve_smoke_model() -> ModelConfig:
    from lra.config import resolve

    return resolve("pathfinder32", "softmax", preset="smoke").model
