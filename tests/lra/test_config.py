"""Typed run configs: presets, overrides, conversion errors, deterministic run ids."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lra import attention as registry
from lra.config import (PRESET_DIR, RunConfig, load_preset, parse_overrides, preset_names, preset_tasks, resolve,
                        validate)

TASKS = ("listops", "text", "retrieval", "image", "pathfinder32", "pathfinder64", "pathx", "path256")


def test_every_task_has_paper_and_smoke_presets():
    assert set(TASKS) <= set(preset_tasks())
    for task in TASKS:
        names = preset_names(task)
        assert "paper" in names and "smoke" in names, task


@pytest.mark.parametrize("task", TASKS)
def test_every_preset_resolves_for_every_attention(task):
    for preset in preset_names(task):
        for name in registry.available():
            config = resolve(task, name, preset=preset)
            assert config.preset == preset and config.task == task
            assert config.data.seq_len is not None, f"{task}/{preset} must fix seq_len"
            assert config.run_id().startswith(f"{preset}-n{config.data.seq_len}-s0-")


def test_paper_numbers_follow_the_published_setting():
    """The issue's table: batch / warm-up / steps per task, shared model and optimizer."""
    expected = {"listops": (32, 1000, 5000), "text": (32, 8000, 20000), "retrieval": (32, 800, 30000),
                "image": (256, 175, 35000), "pathfinder32": (256, 312, 62400)}
    for task, (batch, warmup, steps) in expected.items():
        c = resolve(task, "softmax", preset="paper")
        assert (c.train.batch_size, c.optim.warmup_steps, c.train.max_steps) == (batch, warmup, steps), task
        m, o = c.model, c.optim
        assert (m.dim, m.mlp_dim, m.num_heads, m.head_dim, m.depth) == (64, 128, 2, 32, 2)
        assert (m.dropout, m.attention_dropout, m.positional, m.pooling) == (0.1, 0.1, "learned", "mean")
        assert (o.lr, o.beta1, o.beta2, o.eps, o.weight_decay) == (1e-4, 0.9, 0.999, 1e-6, 0.0)


def test_preset_numbers_are_documented():
    """Every number in a paper section carries a source comment on its line; every number in a cpu
    section (the README's main job) says why, tagged [ours]."""
    for path in PRESET_DIR.glob("*.yaml"):
        section = None
        for line in path.read_text().splitlines():
            if not line.startswith(" ") and line.strip():
                section = line.split(":")[0]
                continue
            body = line.split("#")[0]
            if section in ("paper", "cpu") and ":" in body and body.split(":", 1)[1].strip() not in ("", "{}"):
                assert "#" in line, f"{path.name}: undocumented {line!r}"
                assert section != "cpu" or "# [ours] " in line, f"{path.name}: {line!r} says not why"


def test_overrides_are_typed():
    c = resolve("listops", "performer", preset="smoke",
                overrides=["model.dim=48", "optim.lr=3e-4", "train.max_steps=5e1", "model.pooling=cls",
                           "optim.fused=true", "train.compile=auto", "data.limit_train=none",
                           "attention.nb_features=16", "seed=7"])
    assert c.model.dim == 48 and isinstance(c.model.dim, int)
    assert c.optim.lr == 3e-4 and c.train.max_steps == 50 and c.model.pooling == "cls"
    assert c.optim.fused is True and c.train.compile is None and c.data.limit_train is None
    assert c.attention_options["nb_features"] == 16 and c.seed == 7
    # Defaults of the attention are filled in, typed by the registry.
    assert c.attention_options == registry.resolve_options("performer", nb_features=16)


@pytest.mark.parametrize("override, message", [
    ("model.dimm=3", "did you mean 'model.dim'"),
    ("model.dim=abc", "model.dim: expected an integer"),
    ("model.dim=2.5", "model.dim: expected an integer"),
    ("optim.lr=fast", "optim.lr: expected a number"),
    ("model.pooling=max", "model.pooling: expected one of 'mean', 'cls', got 'max'"),
    ("optim.schedule=cosin", "did you mean 'cosine'"),
    ("train.deterministic=maybe", "expected true or false"),
    ("attention.nb_featurez=3", "unknown option(s) 'nb_featurez'"),
    ("attention.nb_features=many", "nb_features"),
    ("attention.dropout=0.5", "use model.attention_dropout"),
    ("nonsense", "not of the form key=value"),
    ("foo.bar=1", "unknown config key 'foo.bar'"),
    ("model.dim=0", "model.dim must be > 0"),
    ("model.dropout=1.5", "model.dropout must be in [0, 1)"),
    ("optim.warmup_steps=100000", "exceeds train.max_steps"),
    ("train.strategy=ddp_spawn", "use --strategy ddp"),
])
def test_bad_overrides_name_the_problem(override, message):
    with pytest.raises(ValueError) as err:
        resolve("listops", "performer", preset="smoke", overrides=[override])
    assert message in str(err.value)


@pytest.mark.parametrize("overrides, message", [
    (["optim.warmup_steps=0"], "optim.schedule=onecycle needs 0 < optim.warmup_steps < train.max_steps"),
    (["train.max_steps=10", "optim.warmup_steps=10"], "got warmup_steps=10, max_steps=10"),
    (["optim.min_lr_ratio=0.1"], "optim.min_lr_ratio=0.1 does not apply to optim.schedule=onecycle"),
])
def test_onecycle_rejects_a_degenerate_cycle(overrides, message):
    with pytest.raises(ValueError) as err:
        resolve("listops", "softmax", preset="smoke", overrides=["optim.schedule=onecycle", *overrides])
    assert message in str(err.value)
    # The paper presets' warm-up and length make a valid cycle.
    c = resolve("listops", "softmax", overrides=["optim.schedule=onecycle"])
    assert (c.optim.schedule, c.optim.warmup_steps, c.train.max_steps) == ("onecycle", 1000, 5000)


def test_unknown_preset_attention_and_task():
    with pytest.raises(ValueError, match="has no preset 'fast'; available: paper, cpu, smoke"):
        resolve("listops", "softmax", preset="fast")
    with pytest.raises(ValueError, match="unknown attention 'flashy'"):
        resolve("listops", "flashy")
    with pytest.raises(ValueError, match="no preset file for task 'lisops'"):
        resolve("lisops", "softmax")


def test_run_id_is_deterministic_and_tracks_what_matters(tmp_path):
    base = resolve("listops", "performer", preset="smoke")
    same = resolve("listops", "performer", preset="smoke", runs_dir=tmp_path, data_dir=tmp_path / "d",
                   overrides=["data.num_workers=3"])
    assert base.run_id() == same.run_id()  # where files live does not change what is computed
    as_string = resolve("listops", "performer", preset="smoke", overrides=["attention.nb_features=32"])
    assert as_string.run_id() == base.run_id()  # "32" from the CLI == 32 from the preset
    for changed in (resolve("listops", "performer", preset="smoke", seed=1),
                    resolve("listops", "performer", preset="smoke", seq_len=96),
                    resolve("listops", "performer", preset="smoke", overrides=["optim.lr=1e-2"]),
                    resolve("listops", "performer", preset="smoke", overrides=["attention.nb_features=8"])):
        assert changed.run_id() != base.run_id()
    assert base.run_dir() == Path("runs") / "listops" / "performer" / base.run_id()


def test_compile_mode_is_checked_and_a_speed_setting_outside_the_run_id():
    from lra.config import COMPILE_MODES

    base = resolve("listops", "softmax", preset="smoke")
    assert base.train.compile_mode == "default"
    assert COMPILE_MODES == ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
    for mode in COMPILE_MODES:
        config = resolve("listops", "softmax", preset="smoke", compile=True, overrides=[f"train.compile_mode={mode}"])
        assert config.train.compile_mode == mode and config.run_id() == base.run_id()
    assert resolve("listops", "softmax", preset="smoke", compile_mode="max-autotune").train.compile_mode == "max-autotune"
    with pytest.raises(ValueError, match="train.compile_mode: expected one of 'default', 'reduce-overhead'.*"
                                         "got 'max_autotune'; did you mean 'max-autotune'"):
        resolve("listops", "softmax", preset="smoke", overrides=["train.compile_mode=max_autotune"])
    bad = resolve("listops", "softmax", preset="smoke")
    bad.train.compile_mode = "fastest"
    with pytest.raises(ValueError, match="train.compile_mode: 'fastest' is not one of default, reduce-overhead"):
        validate(bad)


def test_pathfinder_difficulty_is_data_config_and_changes_ids_only_when_set():
    hard = resolve("pathfinder32", "softmax", preset="smoke")
    assert hard.data.difficulty is None and "difficulty" not in hard.identity()["data"]
    # the default keeps the ids that runs had before the key existed
    assert resolve("pathfinder32", "softmax", preset="smoke", overrides=["data.difficulty=none"]).run_id() == hard.run_id()
    easy = resolve("pathfinder32", "softmax", preset="smoke", overrides=["data.difficulty=easy"])
    explicit_hard = resolve("pathfinder32", "softmax", preset="smoke", overrides=["data.difficulty=hard"])
    assert easy.data.difficulty == "easy" and len({easy.run_id(), explicit_hard.run_id(), hard.run_id()}) == 3
    with pytest.raises(ValueError, match="must be one of easy, intermediate, hard"):
        resolve("pathfinder32", "softmax", preset="smoke", overrides=["data.difficulty=medium"])
    with pytest.raises(ValueError, match="Pathfinder tasks only, not listops"):
        resolve("listops", "softmax", preset="smoke", overrides=["data.difficulty=easy"])


def test_round_trip_through_dict_and_yaml():
    c = resolve("pathfinder32", "linformer", preset="smoke", overrides=["model.dim=40"])
    again = RunConfig.from_dict(yaml.safe_load(c.to_yaml()))
    assert again == c and again.run_id() == c.run_id()
    with pytest.raises(ValueError, match="unknown config key 'model.width'"):
        RunConfig.from_dict({**c.to_dict(), "model": {"width": 3}})


def test_overrides_are_converted_to_the_field_types_by_the_shared_rules():
    config = resolve("listops", "softmax", preset="smoke",
                     overrides=["train.max_steps=1_000", "train.compile=off", "train.limit_val_batches=auto",
                                "optim.lr=3", "seed=2"])
    assert config.train.max_steps == 1000 and config.train.compile is False
    assert config.train.limit_val_batches is None and config.optim.lr == 3.0 and config.seed == 2
    with pytest.raises(ValueError, match="train.max_steps: expected an integer, got '2.5'"):
        resolve("listops", "softmax", preset="smoke", overrides=["train.max_steps=2.5"])
    assert parse_overrides(["a.b = 3"]) == [("a.b", "3")]


def test_preset_file_errors_name_the_file(tmp_path, monkeypatch):
    import lra.config as config_module

    (tmp_path / "listops.yaml").write_text("paper:\n  model: {dim: 64}\n  modle: {}\n")
    monkeypatch.setattr(config_module, "PRESET_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"listops.yaml: preset 'paper' has unknown section\(s\) \['modle'\]"):
        load_preset("listops", "paper")
    (tmp_path / "listops.yaml").write_text("paper: [1, 2\n")
    with pytest.raises(ValueError, match="invalid YAML"):
        load_preset("listops", "paper")


@pytest.mark.parametrize("key, default, value, default_hidden, error", [
    ("pixel_embedding", "token", "linear", True, "pixel_embedding=linear applies to pixel tasks .* not listops"),
    ("positional", "learned", "axial", False, "positional=axial .* applies to pixel tasks .* not listops"),
])
def test_pixel_only_model_options_change_ids_and_are_refused_for_token_tasks(key, default, value, default_hidden,
                                                                             error):
    plain = resolve("pathfinder32", "softmax", preset="smoke")
    assert getattr(plain.model, key) == default
    if default_hidden:  # a key added later: run ids of runs made before it existed stay
        assert key not in plain.identity()["model"]
    changed = resolve("pathfinder32", "softmax", preset="smoke", overrides=[f"model.{key}={value}"])
    assert getattr(changed.model, key) == value and changed.run_id() != plain.run_id()
    with pytest.raises(ValueError, match=error):
        resolve("listops", "softmax", preset="smoke", overrides=[f"model.{key}={value}"])


def test_augment_is_data_config_validated_per_task_and_changes_ids_only_when_set():
    plain = resolve("pathfinder32", "softmax", preset="smoke")
    assert plain.data.augment == "none" and "augment" not in plain.identity()["data"]
    assert resolve("pathfinder32", "softmax", preset="smoke", overrides=["data.augment=none"]).run_id() == plain.run_id()
    dihedral = resolve("pathfinder32", "softmax", preset="smoke", overrides=["data.augment=dihedral"])
    assert dihedral.data.augment == "dihedral" and dihedral.run_id() != plain.run_id()
    with pytest.raises(ValueError, match=r"augmentation 'dihedral' \(data.augment\) is not label-preserving for "
                                         r"image \(or unknown\); it admits: none, hflip"):
        resolve("image", "softmax", preset="smoke", overrides=["data.augment=dihedral"])
    with pytest.raises(ValueError, match="for listops .*it admits: none$"):
        resolve("listops", "softmax", preset="smoke", overrides=["data.augment=hflip"])
