"""Reliability round five (issue 49), B7 and B2: MNP's flat keys of before its parts, on the command line and as
constructor arguments, are refused in one line naming today's key; a part's node that is no mapping is one line
before the data is read; the constructor explains the config-only ``warmup.fraction``; the baselines check their
``optim`` mapping when built, not at fit."""

import inspect

import numpy as np
import pytest
from cfg_utils import ROOT, compose_train
from cli_utils import assert_no_outputs, guarded_error, hydra_only, run_cli
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from baselines.deep_ensemble import DeepEnsemble
from baselines.etp import ETP
from baselines.mcd import MCDropout
from baselines.mgp import MGP
from baselines.mlp import MLP
from baselines.sngp import SNGP
from baselines.tmc import TMC
from datamodules.custom import CustomDataModule
from mnp.cli.cli import not_a_model_key, one_line
from mnp.cli.pipeline import train
from mnp.model import MNP

MOVED = "is not a key of the model: MNP's flat settings moved into its parts' nodes (docs/usage.md), give"
OLD_KEYS = {  # round 5's K01-K07: the old key as typed -> today's key with the value
    "model.warmup_epochs=1": "model.warmup.epochs=1",
    "model.memory_size=30": "model.memory.size=30",
    "model.view_weighting=distance": "model.aggregation.view_weighting.mode=distance",
    "model.distance_power=2": "model.aggregation.view_weighting.power=2",
    "model.clip_norm=1": "model.optim.clip_norm=1",
    "model.d_e=64": "model.encoder.d_e=64",
    "model.num_samples=3": "model.decoder.num_samples=3",
}


def _data(path):
    rng = np.random.default_rng(0)
    y = np.arange(60) % 3
    np.savez(path, x1=rng.normal(size=(60, 4)) + y[:, None], x2=rng.normal(size=(60, 3)), y=y)
    return path


@pytest.mark.parametrize("old, new", OLD_KEYS.items())
def test_an_old_flat_key_on_the_command_line_names_todays_key(tmp_path, old, new):
    """K01-K07: Hydra refuses the key in composition; the CLI's one line names today's key once, with the value."""
    with pytest.raises(ConfigCompositionException) as e:
        compose_train(tmp_path, ["model=mnp", old])
    assert not_a_model_key(one_line(e.value)) == f"{old.split('=')[0]} {MOVED} {new}"


@pytest.mark.parametrize(
    "override, message",
    [
        ("+model.warmup_epochs=1", f"model.warmup_epochs {MOVED} model.warmup.epochs=1"),  # K08
        (
            "+model.view_weighting=distance",
            f"model.view_weighting {MOVED} model.aggregation.view_weighting.mode=distance",
        ),
        ("model.warmup=1", "model.warmup must be a mapping of its settings, got 1"),  # K09: was a 56-line traceback
        (  # K11 held, but after the data was read
            "model.aggregation.view_weighting=distance",
            "model.aggregation.view_weighting must be a mapping of its settings, got 'distance'",
        ),
    ],
)
def test_an_added_old_key_or_a_part_that_is_no_mapping_is_one_line_before_the_data_is_read(
    tmp_path, monkeypatch, capsys, override, message
):
    """K08, K09: refused by the config's validation, before the data is read and before anything is written."""

    def no_read(self):
        raise AssertionError("the data was read")

    monkeypatch.setattr(CustomDataModule, "load", no_read)
    data = _data(tmp_path / "d.npz")
    cfg = compose_train(
        tmp_path / "run", ["model=mnp", "dataset=custom", f"dataset.path={data}", "trainer.max_epochs=2", override]
    )
    assert guarded_error(train, cfg, capsys) == f"error: {message}"
    assert_no_outputs(tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize(
    "override, message",
    [
        ("model.memory_size=30", f"model.memory_size {MOVED} model.memory.size=30"),  # K02
        ("+model.warmup_epochs=1", f"model.warmup_epochs {MOVED} model.warmup.epochs=1"),  # K08
        ("model.warmup=1", "model.warmup must be a mapping of its settings, got 1"),  # K09
    ],
)
def test_the_cli_prints_the_one_line_and_writes_nothing(tmp_path, override, message):
    data, run_dir = _data(tmp_path / "d.npz"), tmp_path / "run"
    args = ["train.py", "model=mnp", "dataset=custom", f"dataset.path={data}", "trainer.max_epochs=2", "logger=none"]
    r = run_cli([*args, f"hydra.run.dir={run_dir}", override])
    err = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(err) == 1 and err[0].startswith(f"error: {message}"), r.stderr[-1500:]
    assert hydra_only(run_dir)


@pytest.mark.parametrize(
    "argument, value, today",
    [
        ("memory_size", 30, "memory={'size': 30}"),  # C33
        ("view_weighting", "distance", "aggregation={'view_weighting': {'mode': 'distance'}}"),
        ("warmup_epochs", 1, "warmup={'epochs': 1}"),
    ],
)
def test_an_old_flat_constructor_argument_names_todays_argument(argument, value, today):
    """C33: Python's own error named only the argument."""
    with pytest.raises(TypeError) as e:
        MNP(3, [8, 5], **{argument: value})
    assert str(e.value) == (
        f"MNP() got an unexpected keyword argument {argument!r}: MNP's flat settings moved into its parts' "
        f"nodes (docs/usage.md), give {today}"
    )


def test_the_check_of_old_arguments_keeps_the_constructors_signature_and_other_errors():
    """The wrapper is invisible to ``inspect`` (Hydra's key checks, help()), and an unknown argument that was never
    a flat key keeps Python's error."""
    params = list(inspect.signature(MNP).parameters)
    assert params[:3] == ["num_classes", "view_dims", "encoder"] and "kwargs" not in params
    with pytest.raises(TypeError, match=r"^MNP.__init__\(\) got an unexpected keyword argument 'memroy'$"):
        MNP(3, [8, 5], memroy={"size": 10})
    assert MNP(3, [8, 5], memory={"size": 30}).spec.memory.size == 30


def test_the_config_only_warmup_fraction_is_explained_by_the_constructor():
    """C28 (documented, not accepted): the fraction needs trainer.max_epochs, which the constructor does not know.
    Given alone, or in the node copied from conf/model/mnp.yaml, the line says what train.py does with it."""
    node = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "model" / "mnp.yaml").warmup)
    for warmup in ({"fraction": 2.0}, node):
        with pytest.raises(ValueError) as e:
            MNP(3, [8, 5], warmup=warmup)
        assert str(e.value) == (
            "model.warmup.fraction is read by train.py, not by the constructor: with warmup.epochs null it sets "
            "warmup.epochs = round(fraction × trainer.max_epochs); give warmup={'epochs': <that number>}"
        )


BASELINES = [DeepEnsemble, TMC, MGP, SNGP, ETP, MCDropout, MLP]


@pytest.mark.parametrize("cls", BASELINES, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "optim, message",
    [
        (
            {"lrr": 0.1},
            "model.optim has no setting 'lrr'; it takes lr, weight_decay, eps, schedule, milestones, "
            "values, eps_placement",
        ),  # C54
        (
            {"schedule": "bogus"},
            "unknown model.optim.schedule 'bogus'; choose one of constant, piecewise, linear",
        ),  # C57
        ({"eps_placement": "tf"}, "unknown model.optim.eps_placement 'tf'; choose one of torch, keras"),
        (0.1, "model.optim must be a mapping of its settings, got 0.1"),
    ],
)
def test_a_baselines_optim_mapping_is_checked_when_built(cls, optim, message):
    """C54, C57: each baseline refused these only at fit (a TypeError of make_optimizer, or its schedule's error)."""
    with pytest.raises(ValueError) as e:
        cls(3, [8, 5], optim=optim)
    assert str(e.value) == message
