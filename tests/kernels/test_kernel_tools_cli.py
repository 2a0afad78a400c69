"""The command lines of `python -m kernels.tuning` and `python -m kernels.compile_check`: lists as the
`lra` commands take them, bad values refused before anything is timed or compiled."""
from __future__ import annotations

import pytest
import torch

from kernels import compile_check, tuning


@pytest.fixture
def tuned(monkeypatch):
    """What `tune` would be asked to time (no GPU needed: the timing itself is replaced)."""
    calls = []

    def tune(head_dims, seq_lens, tokens, hidden, dtype, **options):
        calls.append(dict(head_dims=head_dims, seq_lens=seq_lens, dtype=dtype, passes=options["passes"]))
        return {}

    monkeypatch.setattr(tuning, "tune", tune)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return calls


@pytest.mark.parametrize("argv", [
    ["--head-dims", "64", "128", "--seq-lens", "4K", "16384", "--passes", "dq", "fwd", "--dtype", "bf16"],
    ["--head-dims", "64,128", "--seq-lens", "4096,16K", "--passes", "fwd,dq", "--dtype", "bfloat16"],
], ids=["space-separated", "comma-separated"])
def test_lists_come_space_or_comma_separated(tuned, argv):
    assert tuning.main(argv) == 0
    assert tuned == [dict(head_dims=[64, 128], seq_lens=[4096, 16384], dtype=torch.bfloat16, passes=["fwd", "dq"])]


@pytest.mark.parametrize("argv,message", [
    (["--passes", "fwd", "bwd"], "no pass 'bwd'; the passes are fwd, dkdv, dq"),
    (["--seq-lens", "4x"], "bad sequence length '4x'"),
    (["--head-dims", "256"], "bad head dim '256': the kernels take 1 to 128"),
    (["--dtype", "half"], "invalid choice: 'half'"),
])
def test_a_bad_value_is_one_error_before_any_timing(tuned, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        tuning.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert tuned == []


@pytest.mark.parametrize("argv,message", [
    (["--kernels", "fdw"], "no kernel 'fdw'; the kernels are fwd, dkdv, dq"),
    (["--kernels", "fwd,ln_fwd"], "no kernel 'ln_fwd'; the kernels are fwd, dkdv, dq (the LayerNorm kernels compile "
                                  "with --full)"),
])
def test_compile_check_refuses_a_kernel_it_does_not_have(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        compile_check.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_compile_check_takes_kernels_space_or_comma_separated(monkeypatch):
    asked = []
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(compile_check, "compile_variants", lambda **options: asked.append(options["kernel_names"]) or [])
    assert compile_check.main(["--full", "--kernels", "fwd", "ln_fwd,ln_bwd"]) == 0
    assert asked == [["fwd", "ln_fwd", "ln_bwd"]]
