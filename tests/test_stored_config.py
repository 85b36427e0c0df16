"""A crafted checkpoint's stored config cannot run code or write files (evaluate.py, mnp.tools.diagnose)."""

import glob
from pathlib import Path

import pytest
import torch
import yaml
from cfg_utils import CONF
from test_checkpointing import MLP_RUN, cli, compose_train, eval_cfg, one_line

from mnp.cli.pipeline import evaluate, train
from mnp.cli.run_loading import load_run
from mnp.runs.checkpointing import CFG_KEY, CheckpointError
from mnp.runs.stored_config import DATAMODULES, MODELS, READ_ONLY

pytestmark = pytest.mark.usefixtures("one_thread")
PRECIOUS = "precious\n"


@pytest.fixture(scope="module")
def genuine(tmp_path_factory):
    """A finished MLP run's last.ckpt (a genuine checkpoint, loadable with weights_only=True)."""
    run = tmp_path_factory.mktemp("genuine") / "run"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=1"]))
    return run / "checkpoints" / "last.ckpt"


def crafted(genuine: Path, tmp_path: Path, edit) -> tuple[Path, Path]:
    """A copy of the genuine checkpoint with ``edit(ckpt, victim)`` applied, and the victim file."""
    victim = tmp_path / "victim.txt"
    victim.write_text(PRECIOUS)
    ckpt = torch.load(genuine, weights_only=True)
    edit(ckpt, str(victim))
    path = tmp_path / "crafted.ckpt"
    torch.save(ckpt, path)
    torch.load(path, weights_only=True)  # still passes the unpickling guard: only the config is hostile
    return path, victim


def set_dataset(node):
    return lambda ckpt, victim: ckpt[CFG_KEY].__setitem__("dataset", node(victim))


CALLABLES = {  # each would truncate, overwrite or create files if the stored config were instantiated
    "builtins.open": set_dataset(lambda v: {"_target_": "builtins.open", "_args_": [v, "w"]}),
    "shutil.copyfile": set_dataset(lambda v: {"_target_": "shutil.copyfile", "src": "/dev/null", "dst": v}),
    "numpy.savetxt": set_dataset(lambda v: {"_target_": "numpy.savetxt", "fname": v, "X": [1.0]}),
    "pathlib.Path.write_text": set_dataset(lambda v: {"_target_": "pathlib.Path.write_text", "self": v, "data": ""}),
    "model os.system": lambda ckpt, v: ckpt[CFG_KEY]["model"].__setitem__("_target_", "os.system"),
    "nested target": lambda ckpt, v: ckpt[CFG_KEY]["dataset"].__setitem__(
        "n_train", {"_target_": "builtins.open", "_args_": [v, "w"]}
    ),
    "_args_ of a registered class": lambda ckpt, v: ckpt[CFG_KEY]["dataset"].__setitem__("_args_", [v]),
    "interpolation": lambda ckpt, v: ckpt[CFG_KEY]["dataset"].__setitem__(
        "n_train", "${oc.decode:'{_target_: builtins.open, _args_: [" + v + ", w]}'}"
    ),
    "interpolation outside model and dataset": lambda ckpt, v: ckpt[CFG_KEY].__setitem__("seed", "${oc.env:HOME}"),
    "lightning _instantiator": lambda ckpt, v: ckpt["hyper_parameters"].__setitem__("_instantiator", "builtins.open"),
    "hyperparameter node": lambda ckpt, v: ckpt["hyper_parameters"].__setitem__(
        "hidden", {"_target_": "builtins.open", "_args_": [v, "w"]}
    ),
}


@pytest.mark.parametrize("name", list(CALLABLES))
def test_crafted_stored_config_is_refused_and_writes_nothing(genuine, tmp_path, name):
    path, victim = crafted(genuine, tmp_path, CALLABLES[name])
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(
        CheckpointError, match=rf"checkpoint {path}( refused: its stored config|: MLP takes no argument)"
    ):
        load_run(path)
    assert victim.read_text() == PRECIOUS and sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow
def test_evaluate_cli_refuses_a_crafted_checkpoint_in_one_line(genuine, tmp_path):
    path, victim = crafted(genuine, tmp_path, CALLABLES["builtins.open"])
    r = cli("evaluate.py", f"ckpt_path={path}", f"output_dir={tmp_path / 'eval'}", f"hydra.run.dir={tmp_path / 'h'}")
    line = one_line(r.returncode, r.stderr)
    assert line == (
        f"error: checkpoint {path} refused: its stored config names 'builtins.open', which is not one "
        "of the project's datamodules at dataset._target_; only checkpoints written by train.py can be "
        "evaluated"
    )
    assert victim.read_text() == PRECIOUS and not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_diagnose_refuses_a_crafted_checkpoint(genuine, tmp_path):
    path, victim = crafted(genuine, tmp_path, CALLABLES["numpy.savetxt"])
    r = cli("-m", "mnp.tools.diagnose", str(path), "--json", str(tmp_path / "d.json"))
    assert r.returncode != 0 and "refused: its stored config names 'numpy.savetxt'" in r.stderr
    assert victim.read_text() == PRECIOUS


def test_targets_outside_model_and_dataset_are_never_built(genuine, tmp_path):
    """Trainer, logger and callback nodes of the stored config are not instantiated by a load: a genuine
    run with such a node in its config evaluates normally and the named callable never runs."""

    def edit(ckpt, victim):
        ckpt[CFG_KEY]["logger"] = {"x": {"_target_": "builtins.open", "_args_": [victim, "w"]}}
        ckpt[CFG_KEY]["trainer"]["_target_"] = "shutil.rmtree"

    path, victim = crafted(genuine, tmp_path, edit)
    res = evaluate(eval_cfg(path, tmp_path / "eval"))
    assert res["test/acc"] > 0.5 and victim.read_text() == PRECIOUS


def test_a_genuine_checkpoint_loads_with_its_weights(genuine):
    _, name, dataset, dm, model, ckpt = load_run(genuine)
    assert (name, dataset) == ("mlp", "synthetic")
    for key, value in model.state_dict().items():
        assert torch.equal(value, ckpt["state_dict"][key]), key


def test_a_rebuilt_feature_dataset_never_downloads(genuine, tmp_path):
    """A stored ``download: true`` and a ``data_dir`` of the file's choosing: the load reads, never writes."""
    empty = tmp_path / "data"
    empty.mkdir()

    def edit(ckpt, victim):
        ckpt[CFG_KEY]["dataset"] = {
            "_target_": "datamodules.features.FeatureDataModule",
            "name": "cub",
            "dataset": "cub",
            "data_dir": str(empty),
            "download": True,
        }

    path, _ = crafted(genuine, tmp_path, edit)
    with pytest.raises(ValueError, match="not found in"):
        load_run(path)
    assert not any(empty.iterdir())


def test_the_registry_is_every_target_of_the_model_and_dataset_configs():
    found = {"model": set(), "dataset": set()}
    for group in ("model", "model_family/**", "model_dataset", "dataset"):
        for f in glob.glob(f"{CONF}/{group}/*.yaml", recursive=True):
            target = (yaml.safe_load(Path(f).read_text()) or {}).get("_target_")
            if target:
                found["dataset" if group == "dataset" else "model"].add(target)
    assert found == {"model": set(MODELS), "dataset": set(DATAMODULES)}
    assert set(READ_ONLY) <= DATAMODULES
