"""Reliability round four (issue 30): crafted checkpoint state and evaluate.py's outputs."""

import json

import pytest
import torch
from cfg_utils import compose_train
from test_checkpointing import MLP_RUN, eval_cfg, guarded, results

from mnp.cli.pipeline import evaluate, train

pytestmark = pytest.mark.usefixtures("one_thread")


def _victim(tmp_path):
    victim = tmp_path / "victimdir"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "keep.txt").write_text("precious")
    return victim


def _with_best_path(src, dst, best):
    """``src`` with its ModelCheckpoint state's best_model_path set to ``best`` (it loads weights_only=True), as
    a state of the checkpoint folder ``dst`` is in."""
    ckpt = torch.load(src, weights_only=True)
    for key, state in ckpt["callbacks"].items():
        if key.startswith("ModelCheckpoint"):
            state["dirpath"] = str(dst.parent)
            state["best_model_path"] = str(best)
            state["best_k_models"] = {str(best): torch.tensor(0.0)}
    torch.save(ckpt, dst)


@pytest.mark.parametrize("where", ["ckpt_path", "last"])
def test_a_crafted_best_model_path_outside_the_run_deletes_nothing_on_resume(tmp_path, where):
    victim = _victim(tmp_path)
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    good = tmp_path / "a" / "checkpoints" / "last.ckpt"
    run = tmp_path / "b"
    if where == "ckpt_path":  # N17: resumed from a file given on the command line
        crafted, resume = tmp_path / "evil.ckpt", [f"ckpt_path={tmp_path / 'evil.ckpt'}"]
    else:  # N18: the same state in a shared run's last.ckpt, resumed by the default ckpt_path=last
        (run / "checkpoints").mkdir(parents=True)
        crafted, resume = run / "checkpoints" / "last.ckpt", []
    _with_best_path(good, crafted, run / "checkpoints" / ".." / ".." / "victimdir")
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=3", *resume]))
    assert (victim / "sub" / "keep.txt").read_text() == "precious"
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 3


def test_a_checkpoint_whose_loop_state_holds_text_is_refused_in_one_line(tmp_path, capsys):
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    ckpt = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["loops"]["fit_loop"]["state_dict"] = {"path": "/etc"}
    torch.save(ckpt, tmp_path / "evil.ckpt")
    line = guarded(
        train,
        compose_train(tmp_path / "b", [*MLP_RUN, "trainer.max_epochs=2", f"ckpt_path={tmp_path / 'evil.ckpt'}"]),
        capsys,
    )
    assert line == (
        f"error: checkpoint {tmp_path / 'evil.ckpt'} refused: its loop state holds str '/etc' at "
        "loops.fit_loop.state_dict.path, where train.py writes counters; only load checkpoints "
        "written by train.py"
    )
    assert not (tmp_path / "b" / "config.yaml").exists()


def test_evaluate_never_writes_over_a_training_record_nor_another_evaluation(tmp_path, capsys):
    run = tmp_path / "run"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=1"]))
    ckpt = run / "checkpoints" / "last.ckpt"
    record = {f: (run / f).read_bytes() for f in ("metrics.json", "config.yaml", "predictions.npz")}
    cfg = eval_cfg(ckpt, run)  # N98: output_dir=<the run>
    cfg.eval = {"noise_levels": [0.5]}
    line = guarded(evaluate, cfg, capsys)
    assert line.startswith(
        f"error: output_dir {run} holds a training run's record (metrics.json, config.yaml, "
        "checkpoints/), which an evaluation never writes over"
    )
    assert record == {f: (run / f).read_bytes() for f in record}
    outs = {}
    for bins in (5, 7):  # two evaluations with other eval settings: each its own folder
        cfg = eval_cfg(ckpt, None)
        cfg.output_dir, cfg.eval = None, {"n_bins": bins}
        outs[bins] = evaluate(cfg)
    for bins in (5, 7):
        assert json.loads((run / f"eval_n_bins={bins}" / "metrics.json").read_text()) == outs[bins]
    assert outs[5]["test/ece"] != outs[7]["test/ece"]
    cfg = eval_cfg(ckpt, run / "eval_n_bins=5")  # an explicit output_dir of another evaluation
    cfg.eval = {"n_bins": 9}
    assert guarded(evaluate, cfg, capsys) == (
        f"error: output_dir {run / 'eval_n_bins=5'} holds another evaluation "
        "(differs at eval.n_bins); it was left as it is: choose another "
        "output_dir, or move it away"
    )
    cfg.eval = {"n_bins": 5}  # the same evaluation again writes over its own outputs
    assert results(evaluate(cfg)) == results(outs[5])


def test_resuming_from_a_checkpoint_of_another_config_is_one_line(tmp_path, capsys):
    """N105: `seed=1 ckpt_path=<the seed-0 run's last.ckpt>` trained nothing and recorded the seed-0 model as seed 1."""
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=2"]))
    ckpt = tmp_path / "a" / "checkpoints" / "last.ckpt"
    overrides = [*MLP_RUN, "trainer.max_epochs=2", f"ckpt_path={ckpt}"]
    line = guarded(train, compose_train(tmp_path / "b", [*overrides, "seed=1"]), capsys)
    assert line == (
        f"error: checkpoint {ckpt} is of a run of another config (differs at seed); resume only "
        "from a checkpoint of this job's config, or set ckpt_path=null to start afresh"
    )
    assert not (tmp_path / "b" / "config.yaml").exists()
    assert train(compose_train(tmp_path / "c", [*overrides, "trainer.max_epochs=3"]))["epochs"] == 3  # same config


@pytest.mark.parametrize(
    "key, value, says",
    [
        (
            "eval",
            {"noise_levels": [-1.0, float("nan")]},
            "eval.noise_levels must be null or a non-empty list of finite numbers >= 0, got [-1.0, nan]",
        ),
        (
            "eval",
            {"_target_": "builtins.open", "_args_": ["victim.txt", "w"]},
            "eval._args_ is not an evaluation key; valid keys: ",
        ),
        ("seed", "abc", "seed must be an integer in [0, 4294967295], got 'abc'"),
    ],
)
def test_a_checkpoints_stored_eval_and_seed_are_checked_as_train_py_checks_them(tmp_path, capsys, key, value, says):
    """N13, N09, N14: a stored eval of [-1, nan] reported noise/acc@nan, a _target_ in it was a 49-line traceback,
    and a stored seed `abc` said `invalid literal for int()` naming neither key nor file."""
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    ckpt = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["mnp_cfg"][key] = value
    torch.save(ckpt, tmp_path / "x.ckpt")
    line = guarded(evaluate, eval_cfg(tmp_path / "x.ckpt", tmp_path / "eval"), capsys)
    assert line.startswith(f"error: checkpoint {tmp_path / 'x.ckpt'}: its stored config cannot be evaluated: {says}")
    assert not (tmp_path / "eval" / "metrics.json").exists() and not (tmp_path / "victim.txt").exists()


def test_a_truncated_metrics_json_is_tested_again_not_skipped(tmp_path, caplog):
    """N97: `skipping: ... already exists`, then an unnamed JSON error; the report's advice "re-run the job" failed."""
    run = tmp_path / "run"
    first = train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=2", "skip_if_done=true"]))
    (run / "metrics.json").write_text((run / "metrics.json").read_text()[:25])
    again = train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=2", "skip_if_done=true"]))
    assert results(again) == results(first) == results(json.loads((run / "metrics.json").read_text()))
    assert f"{run / 'metrics.json'} cannot be read (" in caplog.text


def test_a_yaml_tagged_config_in_the_run_dir_is_one_line_and_runs_no_code(tmp_path, capsys):
    """N19: an 85-line ConstructorError traceback with no `error:` line."""
    run = tmp_path / "run"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=1"]))
    marker = tmp_path / "PWNED_YAML"
    (run / "config.yaml").write_text(f'seed: !!python/object/apply:os.system ["touch {marker}"]\n')
    line = guarded(train, compose_train(run, [*MLP_RUN, "trainer.max_epochs=1"]), capsys)
    assert line.startswith(
        f"error: {run / 'config.yaml'} cannot be read (could not determine a constructor for the "
        "tag 'tag:yaml.org,2002:python/object/apply:os.system'"
    )
    assert line.endswith(
        f"so {run} cannot be shown to hold a run of this job; it was left as it is. Move it away to re-run"
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda sd: sd.update({"extra.weight": torch.zeros(2)}), "extra.weight is not in this model"),
        (
            lambda sd: sd.update({k: torch.zeros(1, 1) for k in [next(k for k in sd if k.endswith("weight"))]}),
            "has shape [1, 1] there, ",
        ),
    ],
)
def test_weights_that_do_not_fit_their_own_hyperparameters_are_one_line(tmp_path, capsys, change, says):
    """N15: a 53-line `Error(s) in loading state_dict` traceback."""
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    ckpt = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)
    change(ckpt["state_dict"])
    torch.save(ckpt, tmp_path / "x.ckpt")
    line = guarded(evaluate, eval_cfg(tmp_path / "x.ckpt", tmp_path / "eval"), capsys)
    assert line.startswith(f"error: checkpoint {tmp_path / 'x.ckpt'}: its weights do not fit its own hyperparameters (")
    assert says in line and line.endswith("it was written by another version of the code or not by train.py")


def test_evaluating_an_unfinished_checkpoint_says_so_and_not_finished(tmp_path, caplog):
    """N47: evaluate.py on a 1-epoch checkpoint of a 6-epoch run printed `Finished: ..., 1 epochs`."""
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    ckpt = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["mnp_cfg"]["trainer"]["max_epochs"] = 6  # as the checkpoint of a 6-epoch run after its first epoch
    torch.save(ckpt, tmp_path / "early.ckpt")
    with caplog.at_level("INFO"):
        evaluate(eval_cfg(tmp_path / "early.ckpt", tmp_path / "eval"))
    assert f"{tmp_path / 'early.ckpt'} holds 1 of its run's 6 epochs: this evaluates an unfinished run" in caplog.text
    assert f"Evaluated: mlp on synthetic, seed 2, 1 epochs ({tmp_path / 'early.ckpt'})" in caplog.text
    assert "Finished:" not in caplog.text


@pytest.mark.parametrize(
    "key, says",
    [
        ("${oc.env:HOME}", "refused: its stored config holds an interpolation in a key at dataset.${oc.env:HOME}"),
        ("evil", "TwoMoons takes no argument 'evil' (stored at dataset.evil)"),
    ],
)
def test_a_stored_dataset_key_that_is_an_interpolation_or_unknown_is_one_line(tmp_path, capsys, key, says):
    """N07: the key reached the datamodule's constructor: Hydra's two lines and a TypeError."""
    train(compose_train(tmp_path / "a", [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    ckpt = torch.load(tmp_path / "a" / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["mnp_cfg"]["dataset"][key] = 1
    torch.save(ckpt, tmp_path / "x.ckpt")
    line = guarded(evaluate, eval_cfg(tmp_path / "x.ckpt", tmp_path / "eval"), capsys)
    assert line.startswith(f"error: checkpoint {tmp_path / 'x.ckpt'}") and says in line, line


@pytest.mark.slow
def test_evaluate_on_a_directory_says_it_is_one_and_writes_nothing_beside_the_run(tmp_path):
    """N99: `checkpoint <run>/checkpoints does not exist`, and for ckpt_path=<run> eval/evaluate.log was written
    into the run's parent directory."""
    from cli_utils import run_cli

    run = tmp_path / "run"
    train(compose_train(run, [*MLP_RUN, "trainer.max_epochs=1", "test=false"]))
    for given in (run, run / "checkpoints"):
        res = run_cli(["evaluate.py", f"ckpt_path={given}"])
        assert res.returncode == 1 and res.stderr.strip().splitlines()[-1].startswith(
            f"error: checkpoint {given} is a directory, not a checkpoint file; give ckpt_path="
            f"{run / 'checkpoints' / 'last.ckpt'}"  # the traceback: in a new eval/'s evaluate.log (runrecord.staged)
        ), res.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
