"""A new user's first hour, run as a user runs the programs: the CLI as a subprocess, stdout and stderr
captured. Help, the end-of-run summary, progress lines in a log, config errors before training, a
checkpoint evaluated from another directory, a quiet console and a sweep's closing lines (the config
checks behind those errors, the warm-up and the quick preset: tests/test_first_hour_config.py)."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from cfg_utils import ROOT
from cli_utils import hydra_only, run_cli

NOISE = ("litlogger", "LeafSpec", "GPU available", "TPU available", "torch.jit.script")


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 40)
    path = tmp_path_factory.mktemp("data") / "two_views.npz"
    np.savez(path, x1=rng.normal(size=(120, 6)) + 2.0 * y[:, None], x2=rng.normal(size=(120, 4)) + y[:, None], y=y)
    return path


@pytest.fixture(scope="module")
def mnp_run(data_file, tmp_path_factory):
    """``train.py model=mnp dataset=custom`` with 4 epochs: 1 warm-up (a quarter) and 3 main epochs."""
    run_dir = tmp_path_factory.mktemp("runs") / "mnp_run"
    res = run_cli(
        [
            "train.py",
            "model=mnp",
            "dataset=custom",
            f"dataset.path={data_file}",
            "trainer.max_epochs=4",
            "model.encoder.d_e=16",
            f"hydra.run.dir={run_dir}",
            "eval.noise_levels=[0.1,1.0,10.0]",
        ]
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res, run_dir


# ---------------------------------------------------------------------------- help
def test_help_describes_the_command_with_examples_and_lists_choices_without_internals():
    res = run_cli(["train.py", "--help"])
    assert res.returncode == 0
    out = res.stdout
    assert out.startswith("train.py: train one model") and out.count("python train.py") >= 6
    assert re.search(r"^models:.*\bmgp\b.*\bmnp\b", out, re.M) and re.search(r"^datasets:.*\bcustom\b", out, re.M)
    assert "paper_main" in out and "model_dataset" not in out and "mnp_official_pie" not in out
    res = run_cli(["evaluate.py", "-h"])
    assert res.returncode == 0 and res.stdout.startswith("evaluate.py: rebuild a finished run")


def test_help_imports_neither_torch_nor_hydras_config_composition():
    code = (
        "import runpy, sys; sys.argv = ['train.py', '--help']\n"
        "try:\n    runpy.run_path('train.py', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('torch' in sys.modules, 'pytorch_lightning' in sys.modules, file=sys.stderr)"
    )
    res = run_cli(["-c", code])
    assert res.stderr.strip().splitlines()[-1] == "False False"


# ---------------------------------------------------------------------------- the end of a run
@pytest.mark.slow
def test_a_run_ends_with_a_summary_naming_its_directory_and_files(mnp_run):
    res, run_dir = mnp_run
    out = res.stdout + res.stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "Finished: mnp on custom, seed 0, 4 epochs" in out
    assert f"accuracy            {100 * metrics['test/acc']:.2f} %" in out
    assert f"ECE                 {metrics['test/ece']:.4f}" in out and "noisy accuracy" in out and "total time" in out
    assert f"train time / epoch  {metrics['time/train_epoch_s']:.2f} s (median of 3 main epochs)" in out  # no warm-up
    assert f"Run directory: {run_dir.resolve()}" in out
    assert re.search(r"^\s+metrics\.json  \(\d", out, re.M) and re.search(r"^\s+checkpoints/last\.ckpt  \(", out, re.M)
    log = (run_dir / "train.log").read_text()
    assert "Finished: mnp on custom" in log and f"Run directory: {run_dir.resolve()}" in log


def test_progress_is_one_line_per_epoch_with_stage_and_whole_run_eta_when_not_a_tty(mnp_run):
    res, run_dir = mnp_run
    out = res.stdout + res.stderr
    lines = re.findall(r"(warm-up|main) epoch (\d)/4(.*?)  elapsed \S+  ETA (\S+)", out)
    assert [(stage, int(e)) for stage, e, _, _ in lines] == [("warm-up", 1), ("main", 2), ("main", 3), ("main", 4)]
    assert lines[-1][3] == "0s"
    # the warm-up says it trains L_RBF alone; a main epoch shows what the classifier learned before the loss
    assert re.fullmatch(r" \(L_RBF only\)  loss \S+", lines[0][2]), lines[0]
    for _, _, learned, _ in lines[1:]:
        assert re.fullmatch(r"  train acc [01]\.\d{3}  class loss \S+  loss \S+", learned), learned
    assert "━" not in out and "it/s" not in out  # no progress bar in a log
    assert len(re.findall(r"epoch \d/4", (run_dir / "train.log").read_text())) == 4


def test_metrics_json_orders_noise_levels_numerically(mnp_run):
    _, run_dir = mnp_run
    keys = [k for k in json.loads((run_dir / "metrics.json").read_text()) if k.startswith("noise/acc@")]
    assert keys == ["noise/acc@0.1", "noise/acc@1", "noise/acc@10"]


def test_the_console_carries_no_library_noise(mnp_run):
    res, _ = mnp_run
    assert not [n for n in NOISE if n in res.stdout + res.stderr]
    code = "from mnp.cli.console import quiet; quiet(); import gpytorch"  # MGP's import warned torch.jit.script
    assert "torch.jit.script" not in run_cli(["-W", "default", "-c", code]).stderr


# ---------------------------------------------------------------------------- portable checkpoints
def test_evaluate_works_from_another_directory_and_writes_only_inside_the_run(mnp_run, tmp_path):
    _, run_dir = mnp_run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = run_cli([str(ROOT / "evaluate.py"), f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"], cwd=elsewhere)
    assert res.returncode == 0, res.stderr[-2000:]
    assert list(elsewhere.iterdir()) == []  # no logs/, no data directory
    ev = json.loads((run_dir / "eval" / "metrics.json").read_text())
    assert ev["test/acc"] == json.loads((run_dir / "metrics.json").read_text())["test/acc"]
    assert (run_dir / "eval" / "config.yaml").read_text().count(str(ROOT)) == 0  # data paths are absolute anyway
    assert f"Run directory: {(run_dir / 'eval').resolve()}" in res.stdout + res.stderr


@pytest.mark.slow
def test_evaluate_helps_example_of_another_noise_protocol_runs(mnp_run, tmp_path):
    from mnp.cli.help import evaluate_help

    _, run_dir = mnp_run
    example = next(ln.split()[1:] for ln in evaluate_help().splitlines() if "eval.noise_levels" in ln)
    assert example[0] == "evaluate.py" and example[1] == "ckpt_path=last.ckpt"
    out = tmp_path / "eval"
    overrides = [t for t in example[2:] if "=" in t]  # the words after it describe it
    res = run_cli(
        ["evaluate.py", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", *overrides, f"output_dir={out}"]
    )
    assert res.returncode == 0, res.stderr[-2000:]
    levels = [k for k in json.loads((out / "metrics.json").read_text()) if k.startswith("noise/acc@")]
    assert levels == ["noise/acc@0.5", "noise/acc@1", "noise/acc@2"]


def test_evaluate_without_a_checkpoint_is_one_line():
    res = run_cli(["evaluate.py"])
    assert (
        res.returncode == 1
        and res.stderr.strip() == "error: ckpt_path is required: add ckpt_path=<value> to the command"
    )


# ---------------------------------------------------------------------------- errors before training
@pytest.mark.parametrize(
    "args, message",
    [
        (["model=mnp", "model.loss.tau=oops"], "error: model.loss.tau must be a number, got 'oops'"),
        ([], "error: dataset.path is required"),
        (["trainer.max_epochs=-1"], "error: trainer.max_epochs must be an integer >= 1, got -1"),
        (["model=mnp", "model.warmup.epochs=600"], "error: model.warmup.epochs=600 >= trainer.max_epochs=500"),
        (["model=mnp", "model.optim.clip_norm=-0.1"], "error: model.optim.clip_norm must be > 0 (or null), got -0.1"),
        (
            ["model=mlp", "model.warmup.epochs=10"],
            "error: model.warmup.epochs is not a key of the model (Key "
            "'warmup' is not in struct; in a sweep, of every model it runs): check its spelling (the models' keys: "
            "docs/usage.md), and give a key only some models of a sweep have in a command of its own for those; "
            "+model.warmup.epochs would pass it to a model that does not take it; MNP's warm-up follows a shorter "
            "trainer.max_epochs by itself",
        ),
    ],
)
def test_config_errors_are_one_line_before_anything_is_written(tmp_path, data_file, args, message):
    path = [] if "dataset.path" in message else [f"dataset.path={data_file}"]
    run_dir = tmp_path / "run"
    res = run_cli(["train.py", "dataset=custom", *path, f"hydra.run.dir={run_dir}", *args])
    err = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(err) == 1 and err[0].startswith(message), res.stderr[-1500:]
    assert hydra_only(run_dir)  # no config.yaml, no csv/hparams.yaml, no checkpoint


# ---------------------------------------------------------------------------- sweeps
@pytest.mark.slow
def test_a_sweep_ends_with_one_line_per_job_and_the_report_command(tmp_path, data_file):
    res = run_cli(
        [
            "train.py",
            "-m",
            "model=mlp",
            "dataset=custom",
            f"dataset.path={data_file}",
            "seed=0,1",
            "trainer.max_epochs=1",
            "eval.noise=false",
            f"paths.log_dir={tmp_path}",
            "experiment_name=t",
        ]
    )
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert "Sweep finished: 2 ok" in out
    assert len(re.findall(r"^  ok\s+mlp_custom_s[01]", out, re.M)) == 2
    assert f"Aggregate with: python -m mnp.tools.report {tmp_path / 't' / 'multiruns'}" in out
    again = run_cli(
        [
            "train.py",
            "-m",
            "model=mlp",
            "dataset=custom",
            f"dataset.path={data_file}",
            "seed=0,1",
            "trainer.max_epochs=1",
            "eval.noise=false",
            f"paths.log_dir={tmp_path}",
            "experiment_name=t",
        ]
    )
    assert "Sweep finished: 2 done before" in again.stdout


# ---------------------------------------------------------------------------- the terminal's bar
def test_on_a_terminal_the_bar_names_the_stage_and_the_whole_run_eta(tmp_path):
    import pytorch_lightning as pl
    from mnp_utils import flat_mnp

    from datamodules import TensorDataModule
    from mnp.cli.progress import EpochLines, RunProgressBar, progress_callbacks

    assert isinstance(progress_callbacks(True, tty=True)[0][0], RunProgressBar)
    assert isinstance(progress_callbacks(True, tty=False)[0][0], EpochLines)
    assert progress_callbacks(False) == ([], False)

    class Recorded(RunProgressBar):
        seen: list = []
        postfix: list = []

        def on_train_epoch_start(self, trainer, pl_module):
            super().on_train_epoch_start(trainer, pl_module)
            self.seen.append(self.train_progress_bar.desc)

        def on_train_epoch_end(self, trainer, pl_module):
            super().on_train_epoch_end(trainer, pl_module)
            self.postfix.append(self.get_metrics(trainer, pl_module))

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 20)
    dm = TensorDataModule([rng.normal(size=(60, 4)) + y[:, None]], y, np.arange(60), np.arange(0), batch_size=30)
    model = flat_mnp(num_classes=3, view_dims=[4], d_e=8, memory_size=6, projection="linear", warmup_epochs=1)
    bar = Recorded()
    pl.Trainer(
        max_epochs=3,
        default_root_dir=tmp_path,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[bar],
    ).fit(model, dm)
    assert bar.seen[0].startswith("warm-up 1/3 (L_RBF only)") and bar.seen[1].startswith("main 2/3 · run ETA ")
    assert bar.seen[2].startswith("main 3/3 · run ETA ")
    # the bar shows what was learned: the warm-up's loss alone, then train accuracy and classification loss
    assert list(bar.postfix[0]) == ["loss"]
    assert [list(p) for p in bar.postfix[1:]] == [["train acc", "class loss", "loss"]] * 2
    assert 0 <= float(bar.postfix[-1]["train acc"]) <= 1 and float(bar.postfix[-1]["class loss"]) > 0


@pytest.mark.slow
def test_console_entry_points_run_from_any_directory(tmp_path):
    import shutil
    import subprocess

    def which(script: str) -> str | None:  # beside this interpreter (a venv not on PATH), else on PATH
        here = Path(sys.executable).parent / script
        return str(here) if here.exists() else shutil.which(script)

    for script, first in (("mnp-train", "train.py: train one model"), ("mnp-eval", "evaluate.py: rebuild")):
        exe = which(script)
        assert exe, f"{script} is not installed: pip install -e ."
        res = subprocess.run([exe, "--help"], cwd=tmp_path, capture_output=True, text=True)
        assert res.returncode == 0 and res.stdout.startswith(first)
    res = subprocess.run(
        [
            which("mnp-train"),
            "model=mlp",
            "trainer.max_epochs=1",
            "eval.noise=false",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "MNP_TORCH_THREADS": "1"},
    )
    assert res.returncode == 0, res.stderr[-1500:]
    assert (tmp_path / "run" / "metrics.json").exists() and (tmp_path / "run" / "train.log").exists()
    for script in ("mnp-report", "mnp-bench", "mnp-docgen"):
        assert subprocess.run([which(script), "--help"], capture_output=True).returncode == 0
