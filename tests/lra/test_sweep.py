"""`lra sweep`: grid expansion, dry-run plan, skip on rerun, failures recorded, GPU pinning, SLURM."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lra.cli import main
from lra.records import write_record
from lra.sweep import (SlurmOptions, SweepSpec, expand_grid, format_plan, pending_runs, plan_sweep, run_local,
                       run_slurm, train_argv)

FAST = ["train.max_steps=4", "train.val_check_interval=2", "train.batch_size=8", "data.limit_train=32",
        "data.limit_eval=16", "train.throughput_warmup_steps=1", "optim.warmup_steps=1"]


def records(runs: Path) -> dict:
    out = {}
    for path in runs.glob("*/*/*/result.json"):
        rec = json.loads(path.read_text())
        out[(rec["task"], rec["attention"], rec["seq_len"])] = rec
    return out


def test_grid_expansion_and_order():
    spec = SweepSpec(tasks=["listops", "pathfinder32"], attentions=["softmax", "flash"], seq_lens=[None],
                     seeds=[0, 1])
    cells = expand_grid(spec)
    assert len(cells) == 8
    assert cells[:3] == [("listops", None, "softmax", 0), ("listops", None, "softmax", 1),
                         ("listops", None, "flash", 0)]


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "bigbird",
                 "--seq-lens", "64", "128", "--seeds", "0", "1", "--dry-run", "--runs-dir", str(runs),
                 "--data-dir", str(tmp_path / "data")])
    out = capsys.readouterr().out
    assert code == 0
    assert "sweep plan: 8 runs — 6 new, 2 invalid" in out
    assert "needs at least 113 tokens" in out  # bigbird at 64 tokens, with the reason
    assert not runs.exists()


def test_local_sweep_skips_done_records_failures_and_resumes(tmp_path, capsys):
    runs, data = tmp_path / "runs", tmp_path / "data"
    argv = ["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "linformer",
            "bigbird", "--seq-lens", "64", "--runs-dir", str(runs), "--data-dir", str(data), *FAST]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 1  # one cell cannot run; the others still ran
    recs = records(runs)
    assert recs[("listops", "softmax", 64)]["status"] == "completed"
    assert recs[("listops", "linformer", 64)]["status"] == "completed"
    bigbird = recs[("listops", "bigbird", 64)]
    assert bigbird["status"] == "failed" and "needs at least 113 tokens" in bigbird["error"]
    assert set(bigbird) == set(recs[("listops", "softmax", 64)])  # full schema even when never started
    assert "[2/2] completed" in out and "2 completed, 0 failed, 0 oom, 0 already done, 1 invalid" in out
    log = next(runs.glob("listops/softmax/*/train.log")).read_text()
    assert "python" in log and "--resume" in log

    # Rerun: completed runs are skipped, nothing is trained again.
    before = {k: r["created"] for k, r in records(runs).items()}
    main(argv)
    out = capsys.readouterr().out
    assert "2 done, 1 invalid" in out and "0 completed, 0 failed, 0 oom, 2 already done" in out
    assert {k: r["created"] for k, r in records(runs).items() if r["status"] == "completed"} == \
        {k: v for k, v in before.items() if k[1] != "bigbird"}

    # A run interrupted mid-way (last.ckpt, record still "running") is planned as a resume.
    softmax_dir = next(runs.glob("listops/softmax/*"))
    rec = json.loads((softmax_dir / "result.json").read_text())
    write_record(softmax_dir / "result.json", {**rec, "status": "running"})
    plan = plan_sweep(SweepSpec(tasks=["listops"], attentions=["softmax"], seq_lens=[64], preset="smoke",
                                overrides=FAST, runs_dir=str(runs), data_dir=str(data)))
    assert [(p.state, p.reason) for p in plan] == [("resume", "interrupted run, resuming from last.ckpt")]


# A valid setting that fails inside the run here: Lightning's Transformer Engine precision without
# the package (a misspelt strategy or precision is refused before anything runs).
RUNTIME_FAILURE = "train.precision=transformer-engine"


def test_runtime_failure_is_recorded_and_the_sweep_goes_on(tmp_path, capsys):
    try:
        import transformer_engine  # noqa: F401
        pytest.skip("transformer_engine is installed: the precision would not fail")
    except ImportError:
        pass
    runs = tmp_path / "runs"
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "performer",
                 "--seq-lens", "64", "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"), *FAST,
                 RUNTIME_FAILURE])
    out = capsys.readouterr().out
    assert code == 1
    recs = records(runs)
    assert len(recs) == 2 and all(r["status"] == "failed" and "transformer_engine" in r["error"]
                                  for r in recs.values())
    assert "0 completed, 2 failed" in out
    # With --skip-failed a rerun leaves them alone.
    main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "performer",
          "--seq-lens", "64", "--runs-dir", str(runs), "--data-dir", str(tmp_path / "data"), *FAST,
          RUNTIME_FAILURE, "--skip-failed", "--dry-run"])
    assert "2 skipped" in capsys.readouterr().out


def _spec(tmp_path, attentions=("softmax", "performer", "linformer")):
    return SweepSpec(tasks=["listops"], attentions=list(attentions), seq_lens=[64], preset="smoke",
                     overrides=FAST, runs_dir=str(tmp_path / "runs"), data_dir=str(tmp_path / "data"))


def test_a_task_without_data_is_an_invalid_cell_and_the_others_still_run(tmp_path, capsys):
    """A sweep over several tasks, one of whose data is not there (the AAN release): that task's cells
    are invalid, with how to get the data, and the rest of the grid trains (the whole sweep, --dry-run
    included, stopped at the first such cell)."""
    spec = _spec(tmp_path, attentions=["softmax"])
    spec.tasks = ["listops", "retrieval"]
    states = {run.task: (run.state, run.reason) for run in plan_sweep(spec)}
    assert states["listops"] == ("new", "")
    assert states["retrieval"][0] == "invalid"
    assert states["retrieval"][1].startswith("data: no data for retrieval") and "lra_release.gz" in states["retrieval"][1]
    assert main(["sweep", "--preset", "smoke", "--tasks", "listops", "retrieval", "--attentions", "softmax",
                 "--seq-lens", "64", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
                 "--dry-run", *FAST]) == 0
    assert "invalid  retrieval/softmax/" in capsys.readouterr().out


def test_parallel_runs_are_pinned_to_distinct_gpus(tmp_path):
    spec = _spec(tmp_path)
    plan = plan_sweep(spec)
    seen, active, lock = [], set(), threading.Lock()
    overlap = []

    def runner(argv, env, log_path):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        with lock:
            assert gpu not in active, "two concurrent runs on one GPU"
            active.add(gpu)
            overlap.append(len(active))
            seen.append((argv[argv.index("--attention") + 1], gpu))
        if "softmax" in argv:  # killed mid-run: its "running" record stays behind
            from lra.train import write_status_record

            write_status_record(plan[0].config, "running", None)
        time.sleep(0.2)
        with lock:
            active.discard(gpu)
        return -9  # dies without a final record: the sweep must record the failure itself

    outcomes = run_local(plan, spec, parallel=2, gpus=["3", "5"], runner=runner)
    assert sorted(a for a, _ in seen) == ["linformer", "performer", "softmax"]
    assert {g for _, g in seen} <= {"3", "5"} and max(overlap) == 2
    assert all(o.status == "failed" and "exit code -9 without a final record" in o.record["error"]
               for o in outcomes)
    assert plan[0].attention == "softmax" and json.loads(plan[0].record_path.read_text())["status"] == "failed"
    with pytest.raises(ValueError, match="--parallel 3 needs 3 GPUs"):
        run_local(plan, spec, parallel=3, gpus=["0", "1"], runner=runner)


def test_train_argv_resolves_to_the_planned_run(tmp_path):
    from lra.commands.train import config_from_args
    from lra.cli import build_parser

    spec = _spec(tmp_path, attentions=["performer"])
    spec.attention_options = {"nb_features": "16"}
    spec.compile_mode = "reduce-overhead"
    run = plan_sweep(spec)[0]
    argv = train_argv(run, spec)
    assert argv[1:4] == ["-m", "lra", "train"] and "--resume" in argv
    args = build_parser().parse_args(argv[3:])
    config = config_from_args(args, task=args.task, attention=args.attention, seed=args.seed, seq_len=args.seq_len)
    assert config.run_id() == run.config.run_id() and config.attention_options["nb_features"] == 16
    assert config.train.compile_mode == run.config.train.compile_mode == "reduce-overhead"


def test_slurm_no_submit_writes_sbatch_scripts_without_a_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    spec = _spec(tmp_path, attentions=["softmax", "performer"])
    spec.num_nodes = 2
    messages = []
    paths = run_slurm(plan_sweep(spec), spec,
                      SlurmOptions(partition="gpu", account="lra", time_min=90, gpus_per_node=4,
                                   setup=["source .venv/bin/activate"], backend="sbatch", submit=False),
                      echo=messages.append)
    assert len(paths) == 2 and "--no-submit" in messages[0]
    text = Path(paths[0]).read_text()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4",
                 "#SBATCH --time=01:30:00", "#SBATCH --partition=gpu", "#SBATCH --account=lra",
                 "source .venv/bin/activate"):
        assert line in text
    srun = [line for line in text.splitlines() if line.startswith("srun ")][0]
    assert "-m lra train" in srun and "--devices 4 --num-nodes 2" in srun and "--resume" in srun
    assert "train.max_steps=4" in srun


@pytest.mark.parametrize("which", ["no sbatch", "squeue fails"])
def test_slurm_without_a_cluster_refuses_and_runs_nothing(tmp_path, monkeypatch, capsys, which):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    names = ["squeue"] if which == "no sbatch" else ["sbatch", "squeue"]
    for name in names:  # stand-ins that fail as they do where no slurmctld answers
        (bin_dir / name).write_text("#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\n"
                                    "exit 1\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    runs = tmp_path / "runs"
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "--seq-lens", "64",
                 "--launcher", "slurm", "--slurm-backend", "sbatch", "--runs-dir", str(runs),
                 "--data-dir", str(tmp_path / "data"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "no SLURM cluster is reachable" in err and "--launcher local" in err
    assert ("sbatch not on PATH" if which == "no sbatch" else "Unable to contact slurm controller") in err
    assert not runs.exists()


def test_slurm_scripts_and_hints_quote_a_runs_dir_with_a_space(tmp_path):
    import shlex

    spec = _spec(tmp_path / "my runs")
    messages = []
    paths = run_slurm(plan_sweep(spec), spec, SlurmOptions(backend="sbatch", submit=False), echo=messages.append)
    output = next(line for line in Path(paths[0]).read_text().splitlines() if line.startswith("#SBATCH --output="))
    assert shlex.split(output.split("=", 1)[1]) == [f"{Path(paths[0]).parents[2].resolve()}/listops/softmax/"
                                                    f"{plan_sweep(spec)[0].config.run_id()}/slurm-%j.out"]
    hint = messages[0].splitlines()[-1]
    assert f"for f in {shlex.quote(str(Path(paths[0]).parent))}/*.sbatch" in hint


def test_repeated_cells_are_planned_and_trained_once(tmp_path):
    # `--seeds 0 0` (or a length given twice) planned the same run folder twice: two trainings of
    # one run, side by side with --parallel.
    spec = _spec(tmp_path, attentions=["softmax", "softmax"])
    spec.seeds = [0, 0, 1]
    plan = plan_sweep(spec)
    assert [(p.attention, p.seed) for p in plan] == [("softmax", 0), ("softmax", 1)]
    assert len({p.run_dir for p in plan}) == 2


def test_overrides_after_the_list_options_are_overrides(tmp_path, capsys):
    # `--attentions softmax model.dim=32` took the override for an attention name ("unknown
    # attention(s) ['model.dim=32']"), and after --seeds for a seed.
    runs = tmp_path / "runs"
    base = ["sweep", "--preset", "smoke", "--tasks", "listops", "--dry-run", "--runs-dir", str(runs),
            "--data-dir", str(tmp_path / "data"), "--seq-lens", "64"]
    assert main([*base, "--attentions", "softmax", "model.dim=32", "--seeds", "0", "1", "train.max_steps=7"]) == 0
    late = capsys.readouterr().out
    assert main([*base, "--attentions", "softmax", "--seeds", "0", "1", "model.dim=32", "train.max_steps=7"]) == 0
    assert capsys.readouterr().out == late and "2 runs — 2 new" in late
    spec = _spec(tmp_path, attentions=["softmax"])
    spec.overrides = ["model.dim=32", "train.max_steps=7"]
    spec.seq_lens, spec.runs_dir = [64], str(runs)
    assert plan_sweep(spec)[0].label in late


def _interrupted(run_dir: Path, config, *, checkpoint: bool) -> None:
    from lra.train import _error_text, write_status_record

    write_status_record(config, "failed", _error_text(KeyboardInterrupt()))
    if checkpoint:
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")


def test_an_interrupted_run_resumes_even_with_skip_failed(tmp_path):
    # Ctrl-C on a sweep records the run it stopped as failed / "interrupted"; --skip-failed then
    # skipped it for good, although interrupted runs are documented to resume from last.ckpt.
    spec = _spec(tmp_path, attentions=["softmax", "performer", "linformer"])
    spec.skip_failed = True
    first = plan_sweep(spec)
    _interrupted(first[0].run_dir, first[0].config, checkpoint=True)
    _interrupted(first[1].run_dir, first[1].config, checkpoint=False)
    from lra.train import write_status_record

    write_status_record(first[2].config, "failed", "RuntimeError: boom")  # a real failure stays skipped
    states = [(p.state, p.reason) for p in plan_sweep(spec)]
    assert states == [("resume", "interrupted run, resuming from last.ckpt"),
                      ("retry", "interrupted before its first checkpoint, starting again"),
                      ("skipped", "previous run failed (--skip-failed)")]


def test_the_plan_says_how_far_each_recorded_run_got(tmp_path):
    """A campaign spread over many allocations: the plan says where each run stopped (its step of
    the schedule and best validation accuracy) and what a finished one scored."""
    spec = _spec(tmp_path, attentions=["softmax", "performer", "linformer", "sdpa"])
    first = plan_sweep(spec)
    shared = {"config": {"train": {"max_steps": 62400}}, "best_val_acc": 0.82165}
    records = [{"status": "interrupted", "error": "interrupted ($LRA_STOP_AT deadline reached at step 50763)",
                "steps": 50763},
               {"status": "completed", "steps": 62400, "test_acc": 0.8237},
               {"status": "diverged", "steps": 812},
               {"status": "running", "steps": 100}]   # its trainer died: the step is stale
    for run, fields in zip(first, records):
        run.run_dir.mkdir(parents=True, exist_ok=True)
        write_record(run.run_dir / "result.json", {"task": "listops", "attention": run.attention, **shared, **fields})
        (run.run_dir / "checkpoints").mkdir()
        (run.run_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    assert [(p.state, p.reason) for p in plan_sweep(spec)] == [
        ("resume", "interrupted at step 50,763 of 62,400, best val 82.2 %, resuming from last.ckpt"),
        ("done", "completed record exists: test 82.4 %"),
        ("retry", "previous run diverged at step 812 of 62,400, best val 82.2 %, resuming from last.ckpt"),
        ("resume", "interrupted run, resuming from last.ckpt")]


def test_runs_that_resume_from_a_checkpoint_start_before_new_ones(tmp_path):
    """A campaign over short allocations finishes what it started: with four runs to a GPU and two
    half-trained ones at the end of the grid, those two take slots first."""
    spec = _spec(tmp_path, attentions=["softmax", "performer", "linformer", "sdpa"])
    first = plan_sweep(spec)
    _interrupted(first[2].run_dir, first[2].config, checkpoint=True)    # linformer: resumes
    _interrupted(first[1].run_dir, first[1].config, checkpoint=False)   # performer: starts again
    from lra.train import write_status_record

    write_status_record(first[3].config, "failed", "RuntimeError: boom")   # sdpa: retried from its checkpoint
    (first[3].run_dir / "checkpoints").mkdir(parents=True)
    (first[3].run_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    plan = plan_sweep(spec)
    assert [r.attention for r in pending_runs(plan)] == ["linformer", "sdpa", "softmax", "performer"]
    assert [r.resumes for r in plan] == [False, False, True, True]
    started = []
    run_local(plan, spec, runner=lambda argv, env, log: started.append(argv[argv.index("--attention") + 1]) or 0)
    assert started == ["linformer", "sdpa", "softmax", "performer"]


def test_of_the_runs_that_resume_the_furthest_along_start_first(tmp_path):
    """Four runs to a GPU and more half-trained runs than slots: the ones nearest the end of their
    schedule take the slots, so each allocation completes runs rather than advancing all a little."""
    spec = _spec(tmp_path, attentions=["softmax", "performer", "linformer", "sdpa", "flash"])
    first = plan_sweep(spec)
    steps = {"softmax": 5000, "performer": 61000, "linformer": None, "sdpa": 30000}   # flash: new
    for run in first[:4]:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        fields = {} if steps[run.attention] is None else {"steps": steps[run.attention]}
        write_record(run.run_dir / "result.json", {"task": "listops", "attention": run.attention, "status": "interrupted",
                                                   "config": {"train": {"max_steps": 62400}}, **fields})
        (run.run_dir / "checkpoints").mkdir()
        (run.run_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
    plan = plan_sweep(spec)
    assert [r.attention for r in pending_runs(plan)] == ["performer", "sdpa", "softmax", "linformer", "flash"]
    listed = [line.split()[1].split("/")[1] for line in format_plan(plan).splitlines()[1:]]
    assert listed == ["performer", "sdpa", "softmax", "linformer", "flash"]   # the plan shows that order


def test_a_run_stopped_before_it_recorded_itself_counts_as_interrupted(tmp_path):
    spec = _spec(tmp_path, attentions=["softmax"])
    plan = plan_sweep(spec)
    outcomes = run_local(plan, spec, runner=lambda argv, env, log: 130)  # `lra train` on Ctrl-C
    assert outcomes[0].record["error"].startswith("interrupted (exit code 130 without a final record")
    from lra.sweep import describe_outcome

    assert describe_outcome(outcomes[0]).startswith("stopped ")         # not reported as a failure
    spec.skip_failed = True
    assert plan_sweep(spec)[0].state == "retry"


def test_ctrl_c_on_a_sweep_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("lra.sweep.run_local", interrupted)
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "--seq-lens", "64",
                 "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), *FAST])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err
    # before it: the lines of the data the sweep generated for its plan
    assert err.strip().splitlines()[-1] == "lra sweep: interrupted; run the same command again to continue"


def test_a_sweep_without_a_terminal_reports_runs_as_they_start_and_train(tmp_path, monkeypatch, capsys):
    """Without a terminal: a [start] line per run and, every --heartbeat seconds, a [running] line with
    the run's latest validation line from its train.log."""
    def slow_run(argv, env, log_path):
        with open(log_path, "a") as log:
            log.write("training listops/softmax ...\nstep 2/4  val_acc 0.2500  best 0.2500 (step 2)  0.1s\n")
        time.sleep(0.6)
        return 1

    monkeypatch.setattr("lra.sweep._default_runner", slow_run)
    main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax", "--seq-lens", "64",
          "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"), "--heartbeat", "0.1", *FAST])
    out = capsys.readouterr().out
    assert "[start] listops/softmax" in out and "train.log" in out
    running = [line for line in out.splitlines() if line.startswith("[running]")]
    assert running and "step 2/4  val_acc 0.2500" in running[-1]
    assert out.index("[start]") < out.index("[running]") < out.index("[1/1]")


def test_read_progress_reads_the_last_validation_line(tmp_path):
    from lra.run_progress import read_progress

    log = tmp_path / "train.log"
    assert read_progress(log) is None                                        # no log yet
    log.write_text("training ...\n")
    assert read_progress(log) is None                                        # no step yet
    log.write_text("step 2/9  val_acc 0.1\nnoise\n" + "x" * 20000 + "\nstep 4/9  val_acc 0.3  best 0.3\nEpoch 1\n")
    assert read_progress(log).long() == "step 4/9  val_acc 0.3000"


def test_runs_per_gpu_shares_each_gpu_by_k_runs_and_says_so(tmp_path):
    spec = _spec(tmp_path, attentions=("softmax", "performer", "linformer", "sdpa"))
    spec.runs_per_gpu = 2
    plan = plan_sweep(spec)
    active: dict = {}
    peak: dict = {}
    lock = threading.Lock()

    def runner(argv, env, log_path):
        gpu = env["CUDA_VISIBLE_DEVICES"]
        assert argv[argv.index("--runs-per-gpu") + 1] == "2"
        with lock:
            active[gpu] = active.get(gpu, 0) + 1
            peak[gpu] = max(peak.get(gpu, 0), active[gpu])
        time.sleep(0.3)
        with lock:
            active[gpu] -= 1
        return 0

    pending = [r for r in plan if r.state == "new"]
    run_local(plan, spec, parallel=1, gpus=["7"], runner=runner)
    assert peak == {"7": 2}  # never more than K runs on the GPU, and K at once
    assert len(pending) >= 3
    from lra.sweep import gpu_slots

    assert gpu_slots(2, ["0", "1"], 3) == ["0", "1"] * 3
    with pytest.raises(ValueError, match="none is visible"):
        gpu_slots(1, None, 2)


def test_budget_stops_runs_at_the_deadline_and_starts_none_after_it(tmp_path):
    from lra.callbacks import STOP_AT_ENV

    spec = _spec(tmp_path)
    plan = plan_sweep(spec)
    deadlines = []

    def runner(argv, env, log_path):
        deadlines.append(float(env[STOP_AT_ENV]))
        time.sleep(0.4)
        return 0

    deadline = time.time() + 0.2
    outcomes = run_local(plan, spec, parallel=1, runner=runner, deadline=deadline)
    assert len(outcomes) == 1 and deadlines == [pytest.approx(deadline, abs=1)]


def test_sweep_cli_refuses_runs_per_gpu_without_gpus(tmp_path, capsys):
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "softmax",
                 "--runs-per-gpu", "2", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "d")])
    assert code == 2 and "--runs-per-gpu" in capsys.readouterr().err


def test_the_plan_marks_cells_beyond_the_kernels_limits_invalid_and_launches_none(tmp_path, capsys):
    spec = SweepSpec(tasks=["listops"], attentions=["flash", "flash_sparse", "softmax"], seq_lens=[64],
                     preset="smoke", overrides=[*FAST, "model.head_dim=256"], runs_dir=str(tmp_path / "runs"),
                     data_dir=str(tmp_path / "data"))
    plan = {run.attention: run for run in plan_sweep(spec)}
    assert plan["flash"].state == plan["flash_sparse"].state == "invalid"
    assert "head_dim 256 (model.head_dim) is not supported" in plan["flash"].reason
    assert plan["softmax"].state == "new"  # plain PyTorch: no such limit

    launched = []
    run_local([run for run in plan.values() if run.attention != "softmax"], spec,
              runner=lambda argv, env, log: launched.append(argv) or 0)
    assert launched == []

    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "flash_sparse",
                 "--seq-lens", "64", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data"),
                 "--yes", *FAST, "attention.layout=local", "attention.block_size=48"])
    out = capsys.readouterr().out
    assert code == 1 and "1 invalid" in out and "block_size 48 (attention.block_size) is not supported" in out


def test_the_plan_marks_cells_beyond_the_kernels_batch_times_heads_invalid(tmp_path, capsys):
    code = main(["sweep", "--preset", "smoke", "--tasks", "listops", "--attentions", "flash", "flash_sparse",
                 "softmax", "--seq-lens", "1024", "--runs-dir", str(tmp_path / "runs"), "--data-dir",
                 str(tmp_path / "data"), "--dry-run", *FAST, "train.batch_size=8192", "model.num_heads=8"])
    out = capsys.readouterr().out
    assert code == 0 and "3 runs — 1 new, 2 invalid" in out, out
    invalid = [line for line in out.splitlines() if line.strip().startswith("invalid")]
    assert len(invalid) == 2 and all("8 heads (model.num_heads) = 65,536 (batch, head) pairs" in line for line in invalid)
    assert not (tmp_path / "runs").exists()
