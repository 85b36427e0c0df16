"""Reliability round four (issue 30): SIGTERM and Ctrl-C while a model is tested or evaluated."""

import json
import os
import signal

import pytest
from cfg_utils import compose_train
from test_checkpointing import MLP_RUN, eval_cfg

from baselines.mlp import MLP
from mnp.cli.cli import run_guarded
from mnp.cli.pipeline import evaluate, train
from mnp.framework.routine import Routine

pytestmark = pytest.mark.usefixtures("one_thread")

NOISY = [*MLP_RUN, "dataset.num_views=2", "eval.noise=true", "eval.noise_levels=[0.1,0.2,0.5,1,2,5]"]


def _signal_at_test_start(monkeypatch, sig):
    """``sig`` to this process as the test pass starts; returns the list of predict calls made after it."""
    calls, start, predict = [], Routine.on_test_epoch_start, MLP.predict

    def on_test_epoch_start(self):
        start(self)
        os.kill(os.getpid(), sig)

    monkeypatch.setattr(Routine, "on_test_epoch_start", on_test_epoch_start)
    monkeypatch.setattr(MLP, "predict", lambda self, *a, **k: calls.append(1) or predict(self, *a, **k))
    return calls


@pytest.fixture
def default_sigint():
    """Ctrl-C as a terminal delivers it, whatever an earlier test's library left installed for SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _guarded(fn, cfg, capsys):
    with pytest.raises(SystemExit) as e:
        run_guarded(fn, cfg)
    return e.value.code, capsys.readouterr().err.strip().splitlines()


def test_sigterm_during_the_test_pass_ends_it_at_once_with_143_and_the_rerun_tests(tmp_path, monkeypatch, capsys):
    """N57: Lightning acts on SIGTERM between test batches only; one batch's noise protocol ran on for 27 s."""
    run = tmp_path / "run"
    calls = _signal_at_test_start(monkeypatch, signal.SIGTERM)
    code, lines = _guarded(train, compose_train(run, [*NOISY, "trainer.max_epochs=2"]), capsys)
    assert code == 143 and calls == [], (code, lines, len(calls))
    assert lines == [
        f"error: terminated by SIGTERM during testing; re-run the same command to test the trained "
        f"model ({run / 'checkpoints' / 'last.ckpt'} holds all 2 epochs)"
    ]
    assert not (run / "metrics.json").exists()
    monkeypatch.undo()
    monkeypatch.setenv("MNP_TORCH_THREADS", "1")
    res = train(compose_train(run, [*NOISY, "trainer.max_epochs=2"]))
    assert res["epochs"] == 2 and json.loads((run / "metrics.json").read_text())["noise/n_subsets"] == 2


@pytest.mark.parametrize(
    "sig, code, cause", [(signal.SIGTERM, 143, "terminated by SIGTERM"), (signal.SIGINT, 130, "interrupted by Ctrl-C")]
)
def test_a_signal_during_evaluate_ends_it_at_once_in_one_line(
    tmp_path, monkeypatch, capsys, default_sigint, sig, code, cause
):
    """N58, N59, N60: SIGTERM was ignored until the test ended (exit 0), Ctrl-C exited 1 with no line, and the
    line spoke of training resuming."""
    train(compose_train(tmp_path / "run", [*NOISY, "trainer.max_epochs=1", "test=false"]))
    calls = _signal_at_test_start(monkeypatch, sig)
    got, lines = _guarded(evaluate, eval_cfg(tmp_path / "run" / "checkpoints" / "last.ckpt", tmp_path / "eval"), capsys)
    assert (got, lines, calls) == (
        code,
        [f"error: {cause} during the evaluation; nothing was written: re-run the same command to evaluate again"],
        [],
    )
    assert not (tmp_path / "eval" / "metrics.json").exists()


def test_a_run_stopped_early_by_max_time_is_not_recorded_as_finished(tmp_path, capsys):
    """N107: trainer.max_time stopped training at 0 epochs, and the untrained model was tested and recorded as
    finished, so every re-run skipped it."""
    run = tmp_path / "run"
    code, lines = _guarded(
        train, compose_train(run, [*MLP_RUN, "trainer.max_epochs=2", "+trainer.max_time=00:00:00:00"]), capsys
    )
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(
        "error: training stopped after 0 of 2 epochs (trainer.max_time, or a callback that "
        "stops training), so the run is not recorded as finished; "
    )
    assert not (run / "metrics.json").exists()
    assert train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=2"]))["epochs"] == 2


def test_trainer_gpu_on_a_machine_without_one_is_one_line_before_the_data_loads(tmp_path, monkeypatch, capsys):
    """N92: Hydra's `Error executing job` and Lightning's MisconfigurationException, after the data and model."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    code, lines = _guarded(train, compose_train(tmp_path / "run", [*MLP_RUN, "trainer=gpu"]), capsys)
    assert (code, lines) == (
        1,
        [
            "error: trainer.accelerator=gpu needs a GPU, and torch finds none on this machine; "
            "use trainer.accelerator=auto (trainer=default) to run on the CPU"
        ],
    )
    assert not (tmp_path / "run").exists()


def test_logger_wandb_with_a_broken_wandb_is_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """N72: a wandb package that fails on import gave a 65-line ImportError traceback."""
    import sys

    from omegaconf import open_dict

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    cfg = compose_train(tmp_path / "run", [*MLP_RUN, "trainer.max_epochs=1"])
    with open_dict(cfg):
        cfg.logger = {
            "wandb": {
                "_target_": "mnp.cli.wandb_utils.RunLogger",
                "project": "mnp",
                "mode": "offline",
                "save_dir": str(tmp_path / "run"),
            }
        }
    code, lines = _guarded(train, cfg, capsys)
    assert (
        code == 1
        and len(lines) == 1
        and lines[0].startswith("error: logger.wandb needs wandb, which cannot be imported (ModuleNotFoundError: ")
    ), lines
    assert lines[0].endswith("repair it (pip install wandb) or use logger=csv")
    assert not (tmp_path / "run" / "config.yaml").exists()
