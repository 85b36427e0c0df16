"""Errors of the CLIs' guard and of Hydra's composition: one ``error:`` line, the traceback in the run's log."""

import logging

import pytest
from cfg_utils import compose_train
from cli_utils import guarded_error, run_cli
from omegaconf import OmegaConf

from mnp.cli.cli import run_guarded


@pytest.fixture(autouse=True)
def no_full_error(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


def test_every_failure_leaves_its_traceback_in_the_log_file(tmp_path, capsys):
    """A one-line error (an internal bug raising KeyError looks like a user error) names the log file that
    holds its traceback; an unexpected error type propagates and is logged there too."""

    def bug(cfg):
        return {}["model"]

    def crash(cfg):
        raise RuntimeError("boom")

    log_file = tmp_path / "train.log"
    handler = logging.FileHandler(log_file)
    logging.getLogger().addHandler(handler)  # what Hydra's job logging attaches in a real run
    try:
        line = guarded_error(bug, OmegaConf.create({}), capsys)
        assert line == f"error: 'model' (traceback in {log_file})"
        with pytest.raises(RuntimeError, match="boom"):
            run_guarded(crash, OmegaConf.create({}))
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    text = log_file.read_text()
    assert text.count("Traceback (most recent call last):") == 2
    assert 'return {}["model"]' in text and "KeyError: 'model'" in text and "RuntimeError: boom" in text


@pytest.mark.parametrize(
    "override,expected",
    [
        (
            "model.bogus=1",
            "error: model.bogus is not a key of the model (Key 'bogus' is not in struct; in a sweep, of "
            "every model it runs): check its spelling (the models' keys: docs/usage.md)",
        ),
        (
            "model=nosuch",
            "error: In 'train': Could not find 'model/nosuch' Available options in 'model': de_ef, de_lf, ",
        ),
        ("seed=[", "error: no viable alternative at input '['"),
    ],
)
@pytest.mark.slow
def test_cli_hydra_composition_errors_are_one_line(tmp_path, override, expected):
    """Unknown keys, unknown group options and malformed overrides fail in Hydra's composition, before
    any code runs; :func:`mnp.cli.cli.main_guarded` turns Hydra's multi-line text into one line, exit 1."""
    r = run_cli(["train.py", override, f"hydra.run.dir={tmp_path / 'run'}", "logger=none"])
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(expected), r.stderr
    assert not (tmp_path / "run").exists()


def test_unknown_top_level_and_group_keys_fail_in_composition(tmp_path):
    """The same Hydra error for ``bogus=1`` and ``dataset.bogus=1`` (what the CLI test above prints)."""
    from hydra.errors import ConfigCompositionException

    for key in ("bogus", "dataset.bogus"):
        with pytest.raises(ConfigCompositionException, match=f"Could not override '{key}'") as e:
            compose_train(tmp_path, [f"{key}=1"])
        assert f"Key '{key.split('.')[-1]}' is not in struct" in str(e.value.__cause__)
