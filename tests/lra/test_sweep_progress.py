"""The sweep's live display: step/max_steps and val acc per running run as soon as it trains, and
an ETA for the whole sweep."""
from __future__ import annotations

import io
import time
from contextlib import redirect_stdout
from types import SimpleNamespace

import pytest

from lra.run_progress import StepLines, read_progress
from lra.sweep_eta import Estimate, Run, estimate, format_eta


def test_read_progress_takes_the_latest_step_of_either_line_and_the_latest_val_acc(tmp_path):
    log = tmp_path / "train.log"
    assert read_progress(log) is None
    log.write_text("training listops/softmax ...\n")
    assert read_progress(log) is None
    log.write_text("training ...\nstep 1/20  loss 2.3026  40 samples/s\n")
    progress = read_progress(log)
    assert (progress.step, progress.max_steps, progress.val_acc) == (1, 20, None)
    assert progress.short() == "step 1/20" and progress.fraction == pytest.approx(0.05)
    log.write_text("step 10/20  val_acc 0.3000  best 0.3000 (step 10)  4.0s\nstep 14/20  loss 1.9\n")
    progress = read_progress(log)
    assert progress.short() == "step 14/20 val 0.300" and progress.long() == "step 14/20  val_acc 0.3000"


def test_step_lines_print_the_first_step_at_once_then_every_few_seconds():
    import torch

    trainer = SimpleNamespace(global_step=1, max_steps=20, world_size=1, is_global_zero=True,
                              callback_metrics={"train/loss": torch.tensor(2.5)})
    lines = StepLines(every_s=3600)
    batch = {"input_ids": torch.zeros(8, 16)}
    out = io.StringIO()
    with redirect_stdout(out):
        lines.on_train_batch_start(trainer, None, batch, 0)
        lines.on_train_batch_end(trainer, None, None, batch, 0)
        trainer.global_step = 2
        lines.on_train_batch_end(trainer, None, None, batch, 1)       # within every_s: silent
    printed = out.getvalue().splitlines()
    assert len(printed) == 1 and printed[0].startswith("step 1/20  loss 2.5000")


def test_step_lines_rate_counts_training_time_only_across_a_validation(monkeypatch):
    """8 samples per batch; 1 s of training, a 100 s validation, 1 s more: 32 samples in 2 s of
    training is 16 samples/s (not 32 samples over the 1 s after the validation, nor over 102 s)."""
    import torch

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    trainer = SimpleNamespace(global_step=1, max_steps=20, world_size=1, is_global_zero=True, callback_metrics={})
    lines = StepLines(every_s=1.5)
    batch = {"input_ids": torch.zeros(8, 16)}
    out = io.StringIO()
    with redirect_stdout(out):
        lines.on_train_batch_start(trainer, None, batch, 0)
        lines.on_train_batch_end(trainer, None, None, batch, 0)            # first line at t = 0
        for i, t in enumerate((0.5, 1.0)):
            lines.on_train_batch_start(trainer, None, batch, i + 1)
            clock[0] = t
            lines.on_train_batch_end(trainer, None, None, batch, i + 1)
        lines.on_validation_start(trainer, None)
        clock[0] = 101.0
        lines.on_validation_end(trainer, None)
        for i, t in enumerate((101.5, 102.0)):
            lines.on_train_batch_start(trainer, None, batch, i + 3)
            clock[0] = t
            lines.on_train_batch_end(trainer, None, None, batch, i + 3)
    printed = out.getvalue().splitlines()
    assert len(printed) == 2 and printed[1].endswith("  16 samples/s"), printed


def test_eta_from_finished_runs_and_step_progress():
    assert estimate([], [Run("a", 100, 30.0)], [Run("a", 100)], slots=1) is None   # nothing tells yet
    # no run finished: a run at 25 of 100 steps going 1 step per 2.4 s: 180 s left + 2 queued x 240 s
    assert estimate([], [Run("a", 100, 60.0, 25, recent_pace=1 / 2.4)], [Run("a", 100)] * 2,
                        slots=1).seconds == pytest.approx(660.0)
    # its pace not seen yet (one look at its log): its steps over its elapsed time tell nothing
    assert estimate([], [Run("a", 100, 60.0, 25)], [Run("a", 100)], slots=1) is None
    # finished runs took 100 s on average; two slots share the work
    assert estimate([Run("a", 100, 90.0, 100), Run("a", 100, 110.0, 100)],
                        [Run("a", 100, 50.0, 50), Run("a", 100, 10.0)], [Run("a", 100)] * 2,
                        slots=2).seconds == pytest.approx((50.0 + 90.0 + 200.0) / 2)
    assert estimate([Run("a", 100, 90.0, 100)], [], [], slots=1).seconds == 0.0
    assert format_eta(3725) == "ETA 1h02m" and format_eta(200) == "ETA 3m20s" and format_eta(None) == "ETA ?"


def test_eta_goes_at_each_kinds_own_pace():
    """The README's CPU sweep: `flash` through the interpreter finishes first after 170 s, the other
    attentions take 10 s each. Their queued runs are not estimated at flash's pace."""
    flash = Run("flash", 300, 170.0, 300)
    # softmax 100 of 300 steps in after 4 s: 8 s left; its second seed 12 s; flash's second seed 170 s
    running = [Run("softmax", 300, 4.0, 100, recent_pace=25.0)]
    assert estimate([flash], running, [Run("softmax", 300), Run("flash", 300)],
                        slots=1).seconds == pytest.approx(8.0 + 12.0 + 170.0)
    # a finished run of a kind sets its pace; a kind not yet seen goes at the kinds' mean pace
    softmax = Run("softmax", 300, 10.0, 300)
    mean_pace = (300 / 170 + 300 / 10) / 2
    assert estimate([flash, softmax], [], [Run("softmax", 300), Run("performer", 300)],
                        slots=1).seconds == pytest.approx(10.0 + 300 / mean_pace)
    # the three attentions after flash, one finished and two queued: well under a minute, not 6
    left = estimate([flash, softmax], [Run("performer", 300, 2.0)], [Run("linformer", 300), Run("bigbird", 300)],
                        slots=1).seconds
    assert left < 60
    # a running run before its first step: its kind's duration minus its elapsed time
    assert estimate([softmax], [Run("softmax", 300, 4.0)], [], slots=1).seconds == pytest.approx(6.0)
    # a run just past its process's start, its pace not seen yet: its remaining steps at its kind's pace
    # (here the mean of the finished kinds), not at one step per 4 s
    assert estimate([flash], [Run("softmax", 300, 4.0, 1)], [Run("performer", 300)],
                        slots=1).seconds == pytest.approx(299 * 170 / 300 + 170.0)


def test_paces_of_the_interpreter_say_nothing_of_native_runs_and_back():
    """The README's CPU sweep starts with `flash` through the interpreter (1.4 steps/s) and queues four
    native attentions (about 50 steps/s): until one of them is seen, the ETA is flash's remaining time
    as a lower bound, not 4 x 300 steps at flash's pace."""
    flash = Run("flash", 300, 110.0, 153, recent_pace=1.4, group="interpreter")
    native = [Run(name, 300, group="native") for name in ("softmax", "performer", "linformer", "bigbird")]
    eta = estimate([], [flash], native, slots=1)
    assert eta == Estimate(pytest.approx(147 / 1.4), at_least=True)
    assert format_eta(eta) == "ETA > 1m45s"
    # softmax done in 6 s: the three other native kinds go at its pace, the estimate is whole
    softmax = Run("softmax", 300, 6.0, 300, group="native")
    eta = estimate([Run("flash", 300, 225.0, 300, group="interpreter"), softmax], [], native[1:], slots=1)
    assert eta == Estimate(pytest.approx(18.0)) and format_eta(eta) == "ETA 18s"
    # and the other way: a queued interpreter run is not estimated at the native pace
    eta = estimate([softmax], [], [Run("flash", 300, group="interpreter")], slots=1)
    assert eta.at_least and format_eta(eta) == "ETA ?"


def test_the_sweep_display_gives_each_task_length_and_attention_its_own_pace(tmp_path):
    from lra.commands.sweep import _Running
    from lra.sweep import Outcome

    def cell(attention, seed):
        config = SimpleNamespace(task="listops", attention=attention, data=SimpleNamespace(seq_len=32),
                                 train=SimpleNamespace(max_steps=300))
        return SimpleNamespace(label=f"listops/{attention}/s{seed}", config=config)

    runs = [cell("flash", 0), cell("softmax", 0), cell("softmax", 1)]
    display = _Running(runs, slots=1)
    assert display.eta() == "ETA ?"
    display.start(runs[0], tmp_path / "flash.log", None)
    display.stop(Outcome(runs[0], "completed", 170.0, None, {"steps": 300}))
    display.start(runs[1], tmp_path / "softmax.log", None)
    display.stop(Outcome(runs[1], "completed", 10.0, None, {"steps": 300}))
    assert display.eta() == "ETA 10s"          # the second softmax seed at softmax's pace, not flash's


def test_the_heartbeat_shows_steps_before_the_first_validation_and_an_eta(tmp_path, monkeypatch, capsys):
    from lra.cli import main

    def slow_run(argv, env, log_path):
        with open(log_path, "a") as log:   # two step lines apart in time: the ETA sees a pace
            log.write("training listops/softmax ...\nstep 5/20  loss 2.1000  40 samples/s\n")
            log.flush()
            time.sleep(0.3)
            log.write("step 6/20  loss 2.0000  40 samples/s\n")
        time.sleep(0.4)
        return 1

    monkeypatch.setattr("lra.sweep._default_runner", slow_run)
    main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "--seq-lens", "64",
          "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--heartbeat", "0.1",
          "train.max_steps=4", "train.val_check_interval=2", "data.limit_train=16", "data.limit_eval=8"])
    out = capsys.readouterr().out
    running = [line for line in out.splitlines() if line.startswith("[running]")]
    assert running and "step 6/20  no validation yet" in running[-1], out + capsys.readouterr().err
    # heartbeats come only while the run goes (none after it ended), the last one with a pace
    eta = [line for line in out.splitlines() if line.startswith("[sweep]")]
    assert eta and all(line.startswith("[sweep] 0/1 done, ETA ") for line in eta), out
    assert "ETA ?" not in eta[-1], out


def test_a_running_runs_eta_uses_its_pace_since_its_first_seen_step(tmp_path, monkeypatch):
    """Start-up (process, data, compilation) does not count in a running run's pace: one step after a
    minute of compiling is not a pace of one step per minute, and a resumed run that shows step 40,000
    at once has not trained 40,000 steps since it started."""
    from lra.commands import sweep as sweep_cmd
    from lra.sweep_eta import Run, estimate

    assert estimate([], [Run("flash", 62400, 60.0, 1, recent_pace=50.0)], [], slots=1).seconds == pytest.approx(62399 / 50)
    assert estimate([], [Run("flash", 62400, 60.0, 1)], [], slots=1) is None      # not 43 days

    config = SimpleNamespace(task="pathfinder32", attention="flash", data=SimpleNamespace(seq_len=1024),
                             train=SimpleNamespace(max_steps=62400))
    run = SimpleNamespace(label="pathfinder32/flash/s0", config=config)
    clock = [1000.0]
    monkeypatch.setattr(sweep_cmd.time, "perf_counter", lambda: clock[0])
    display = sweep_cmd._Running([run], slots=1)
    log = tmp_path / "train.log"
    display.start(run, log, None)
    clock[0] += 60.0
    log.write_text("step 40000/62400  loss 0.2000  16,000 samples/s\n")   # resumed: first step seen late
    display.eta()
    clock[0] += 10.0
    log.write_text("step 40000/62400  loss 0.2000  16,000 samples/s\nstep 40500/62400  loss 0.2  16,000 samples/s\n")
    assert display.eta() == "ETA 7m18s"       # 21,900 steps left at 50 steps/s


def test_a_resumed_run_that_finishes_sets_its_kinds_pace_by_the_steps_it_trained_in_this_sweep(tmp_path, monkeypatch):
    """Its record counts the steps of its earlier segments too: 62,400 steps in 508 s is not its pace."""
    from lra.commands import sweep as sweep_cmd
    from lra.sweep import Outcome

    config = SimpleNamespace(task="pathfinder32", attention="flash", data=SimpleNamespace(seq_len=1024),
                             train=SimpleNamespace(max_steps=62400))
    resumed = SimpleNamespace(label="pathfinder32/flash/s0", config=config, resumes=True)
    queued = SimpleNamespace(label="pathfinder32/flash/s1", config=config, resumes=False)
    clock = [1000.0]
    monkeypatch.setattr(sweep_cmd.time, "perf_counter", lambda: clock[0])
    display = sweep_cmd._Running([resumed, queued], slots=1)
    log = tmp_path / "train.log"
    display.start(resumed, log, None)
    clock[0] += 60.0
    log.write_text("step 40000/62400  loss 0.2000  16,000 samples/s\n")
    display.eta()
    clock[0] += 448.0                          # 22,400 steps at 50 steps/s
    display.stop(Outcome(resumed, "completed", 508.0, None, {"steps": 62400}))
    assert display.eta() == "ETA 20m48s"       # the queued seed: 62,400 steps at 50 steps/s
