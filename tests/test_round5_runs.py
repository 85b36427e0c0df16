"""Reliability round five (issue 49): run directories (symlinked, read-only, moved), user-given paths, SIGTERM in
the test's epoch-end stages, temperature scaling's rows and the per-view metrics."""

import json

import pytest
from test_run_records import g, write_data

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
