"""Reliability round five (issue 49): run directories (symlinked, read-only, moved), user-given paths, SIGTERM in
the test's epoch-end stages, temperature scaling's rows and the per-view metrics."""

import json
import os
import signal

import pytest
from cfg_utils import compose_train
from test_checkpointing import MLP_RUN, SMALL_MNP
from test_run_records import g, write_data

from mnp.core import calibration
from mnp.core.cli import run_guarded
from mnp.core.per_view import PerView
from mnp.core.pipeline import train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_a_train_log_link_planted_in_an_unfinished_run_is_replaced_and_its_target_untouched(tmp_path):
    """F06 (severe): Hydra's file handler appended the job's log through a planted train.log link."""
    data, run = write_data(tmp_path / "data.npz"), tmp_path / "run"
    assert g(data, run).returncode == 0
    (run / "metrics.json").unlink()
    victim = tmp_path / "victim.txt"
    victim.write_text("VICTIM LOG\n")
    (run / "train.log").unlink()
    (run / "train.log").symlink_to(victim)
    res = g(data, run, epochs=3)
    assert res.returncode == 0, res.stderr[-3000:]
    assert victim.read_text() == "VICTIM LOG\n"
    log = run / "train.log"
    assert not log.is_symlink() and "resuming from" in log.read_text()
    assert f"{log} was a symbolic link; it is now a file of this run" in log.read_text()
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3


def _terminated_in(monkeypatch, owner, name):
    """SIGTERM to this process inside ``owner.name`` (its first call), which then runs on."""
    original = getattr(owner, name)

    def stage(*args, **kwargs):
        if not hit:
            hit.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args, **kwargs)

    hit: list[int] = []
    monkeypatch.setattr(owner, name, stage)
    return hit


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage, overrides",
    [
        ("temperature fit", [*MLP_RUN, "dataset.val_fraction=0.2", "eval.calibration=temperature"]),
        ("per-view step", [*SMALL_MNP, "dataset.n_test=40"]),
    ],
)
def test_sigterm_in_the_tests_epoch_end_stages_ends_with_143_and_no_metrics(
    tmp_path, monkeypatch, capsys, stage, overrides
):
    """T09, P04: SIGTERM inside the temperature fit (on_test_epoch_end) or the per-view step of the last test batch
    was ignored: status 0 and every output written."""
    owner, name = (calibration, "fit_temperature") if stage == "temperature fit" else (PerView, "step")
    hit = _terminated_in(monkeypatch, owner, name)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        run_guarded(train, compose_train(run, [*overrides, "trainer.max_epochs=2"]))
    assert hit and e.value.code == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: terminated by SIGTERM during testing; re-run the same command to test the trained "
        f"model ({run / 'checkpoints' / 'last.ckpt'} holds all 2 epochs)"
    ]
    assert not (run / "metrics.json").exists() and not (run / "predictions.npz").exists()
