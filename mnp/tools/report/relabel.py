"""Label finished runs by today's defaults (``python -m mnp.tools.report --relabel``).

A run's label normally comes from the command that made it: its experiment and the result-changing
overrides it was given. After a default changes, that label goes stale: a run made with
``model.warmup.lr=0.01`` as an override is a default run once 0.01 is the default, and an old default
run is now a variant. With ``--relabel`` the report labels each run by its saved ``config.yaml``
instead: its variant is the result keys where that config differs from today's composed defaults for
its model, dataset and seed (``mnp.runs.rundir.config_drift``, the same comparison that guards run
directories), and its experiment is the one whose directory holds it
(``<log_dir>/<experiment>/multiruns/<run>``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path

from omegaconf import OmegaConf

from mnp.runs.flat import flatten
from mnp.runs.migrations import MNP_TARGET, under_built_in, upgrade_run_config
from mnp.runs.rundir import config_drift

CONF = Path(__file__).resolve().parents[3] / "conf"
RESULT_GROUPS = ("model", "dataset", "trainer", "eval")


@functools.cache
def _composed(model: str, dataset: str, tuned: bool):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    untuned = [] if tuned else ["~tuned"]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[f"model={model}", f"dataset={dataset}", "logger=none", *untuned])
    GlobalHydra.instance().clear()
    return cfg


def defaults(model: str, dataset: str, seed: int, tuned: bool = True) -> dict:
    """The result groups (model, dataset, trainer, eval) of today's resolved ``train.yaml`` for a job
    (composed once per model and dataset, resolved per seed); ``tuned=False``: without the model's applied tuning
    study on the dataset (``conf/tuned/``), the defaults a run made before it, or with ``'~tuned'``, had."""
    from mnp.cli.validate import resolve_auto

    cfg = copy.deepcopy(_composed(model, dataset, tuned))
    cfg.seed = seed
    resolve_auto(cfg)
    return {k: OmegaConf.to_container(cfg[k], resolve=True) for k in RESULT_GROUPS if k in cfg}


def with_built_in_defaults(config: dict, current: dict) -> dict:
    """An MNP run's saved config with the part settings it lacks, of those today's ``current`` config has, at their
    built-in defaults. A switch added after the run keeps the old behaviour at its built-in default, so that is the
    value the run used, whatever default a dataset has set since (``decoder.eval_samples``: a run without it drew
    ``num_samples``)."""
    model = config.get("model")
    if not isinstance(model, Mapping) or model.get("_target_") != MNP_TARGET:
        return config
    from mnp.model.parts import PARTS

    today = current.get("model") or {}
    parts = {
        n: under_built_in(dataclasses.asdict(c()), model.get(n), today.get(n) or {})
        for n, c in PARTS.items()
        if n in today
    }
    return {**config, "model": {**model, **parts}}


def variant_of(config: dict, model: str, dataset: str, seed: int, tuned: bool | None = None) -> str | None:
    """``"k=v,..."`` of the result keys where ``config`` (a run's saved one) differs from today's
    defaults, with the run's values; ``None`` when it is a default run. A run is set against the tuned defaults
    when it ran with them (its config names its ``tuned_from``), else against the untuned ones; ``tuned`` says
    which instead."""
    current = defaults(model, dataset, seed, bool(config.get("tuned_from")) if tuned is None else tuned)
    config = with_built_in_defaults(upgrade_run_config(config), current)  # flat keys nested; later switches
    saved = {k: config[k] for k in current if k in config}
    flat = flatten(saved)
    return ",".join(f"{k}={flat[k]}" for k in config_drift(saved, current)) or None


def experiment_of(run_dir: Path, fallback: str) -> str:
    """The experiment whose directory holds ``run_dir`` (``<experiment>/multiruns|runs/<run>``)."""
    run_dir = Path(run_dir)
    return run_dir.parent.parent.name if run_dir.parent.name in ("multiruns", "runs") else fallback
