"""A run directory is reused only for its own config and data.

A directory is skipped as finished (``metrics.json``) or resumed (``last.ckpt``) only when the
``config.yaml`` it holds matches the job's config. A config file edited since the run (a new
per-dataset value, say) would otherwise return stale numbers; the job stops instead, names the keys
that differ, and leaves the directory as it is. The same holds for the data: a run records the sha256
of every file its datamodule read (``data_hash`` in ``config.yaml`` and in its checkpoints), and a
data file changed since stops the job too.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

from omegaconf import OmegaConf

from mnp.runs.datahash import data_change
from mnp.runs.dirname import is_result_key
from mnp.runs.flat import flatten
from mnp.runs.migrations import upgrade_run_config

log = logging.getLogger(__name__)


class EvalOutputConflict(ValueError):
    """evaluate.py's output directory holds a training record, or another evaluation's."""


def check_eval_output(out_dir: Path, ckpt_path: Path, run_cfg: dict) -> None:
    """Refuse (:class:`EvalOutputConflict`) an ``out_dir`` whose ``metrics.json`` is a training run's (or that holds
    ``checkpoints/``), or another evaluation's: of another checkpoint, or with another config (``run_cfg``, the
    one its ``config.yaml`` would hold). The same evaluation again writes over its own outputs, also once the data
    changed (it warns, :func:`warn_if_data_changed`, and scores them as they are now)."""
    metrics, config = out_dir / "metrics.json", out_dir / "config.yaml"
    try:
        record = json.loads(metrics.read_text()) if metrics.is_file() else None
    except (OSError, ValueError):
        record = []
    evaluated = record.get("checkpoint") if isinstance(record, dict) else None
    if (out_dir / "checkpoints").exists() or (record is not None and evaluated is None):
        raise EvalOutputConflict(
            f"output_dir {out_dir} holds a training run's record ({metrics.name}, "
            f"{config.name}, checkpoints/), which an evaluation never writes over; leave "
            "output_dir unset (the evaluation goes into the run's eval_* folder) or choose another"
        )
    if evaluated is None:
        return
    drift = [] if Path(evaluated).resolve() == Path(ckpt_path).resolve() else ["checkpoint"]
    if config.is_file():
        old, new = flatten(upgrade_run_config(OmegaConf.to_container(OmegaConf.load(config)))), flatten(run_cfg)
        drift += sorted(
            k for k in old.keys() | new.keys() if old.get(k) != new.get(k) and not k.startswith("data_hash.")
        )
    if drift:
        raise EvalOutputConflict(
            f"output_dir {out_dir} holds another evaluation (differs at {', '.join(drift[:6])}); "
            "it was left as it is: choose another output_dir, or move it away"
        )


def declared_in_both(a: dict, b: dict) -> set[str]:
    """Keys :func:`mnp.cli.validate.resolve_auto` filled in or consumed in both configs (their ``declared``)."""
    return (a.get("declared") or {}).keys() & (b.get("declared") or {}).keys()


def as_declared(config: dict, keys: Iterable[str]) -> dict:
    """``config`` flattened, with ``keys`` as the config gave them before they were derived: what the user set."""
    return {**flatten(config), **{k: config["declared"][k] for k in keys}}


def keep_derived(cfg, run: dict) -> None:
    """A resume keeps the values derived for the run (``run``: its config), MNP's warm-up from the run's first
    ``trainer.max_epochs`` say, where this job derives them too: only what the user sets changes a run."""
    flat = flatten(run)
    for key in declared_in_both(run, OmegaConf.to_container(cfg)):
        if key in flat:  # a derived value, not an input resolve_auto consumed
            OmegaConf.update(cfg, key, flat[key])


def named_drift(drift: list[str], stored: dict, current: dict) -> str:
    """The keys of ``drift`` as the user set them (``seed``, not the ``dataset.seed`` that interpolates it), joined."""
    if "dataset.seed" in drift and stored.get("seed") != current.get("seed"):
        drift = ["seed" if k == "dataset.seed" else k for k in drift]
    return ", ".join(drift[:6]) + (f" and {len(drift) - 6} more" if len(drift) > 6 else "")


def config_drift(saved: dict, current: dict) -> list[str]:
    """Result keys whose values differ between a run's saved config and the job's (both resolved).

    A key the saved config lacks is a switch added since the run, with a default that keeps the old
    behaviour; it is not drift.
    """
    old, new = flatten(saved), flatten(current)
    return sorted(k for k in old.keys() & new.keys() if is_result_key(k) and old[k] != new[k]) + sorted(
        k for k in old.keys() - new.keys() if is_result_key(k)
    )


def rename_key(set_keys: Iterable[str] | None = None, multirun: bool | None = None) -> str:
    """The key that gives this job another run directory (N108): the one the user set to name this one
    (``paths.output_dir``, ``hydra.run.dir``, ``hydra.sweep.subdir`` or ``hydra.sweep.dir``), else
    ``experiment_name``. Read from the running Hydra job unless ``set_keys`` (the override keys) is given;
    outside a Hydra job the directory is ``paths.output_dir``."""
    if set_keys is None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if not HydraConfig.initialized():
            return "paths.output_dir"
        hc = HydraConfig.get()
        set_keys, multirun = [*hc.overrides.hydra, *hc.overrides.task], hc.mode == RunMode.MULTIRUN
    keys = {k.split("=", 1)[0].lstrip("+~") for k in set_keys}
    named = ("hydra.sweep.subdir", "hydra.sweep.dir") if multirun else ("hydra.run.dir",)
    return next((k for k in ("paths.output_dir", *named) if k in keys), "experiment_name")


class RunDirConflict(ValueError):
    """The run directory holds a run of another config."""


def stored_config(out_dir, inside_checkpoint: dict | None = None) -> dict | None:
    """The config of the run in ``out_dir``: its ``config.yaml``, else the one kept inside its checkpoint. A
    config.yaml that cannot be read (damaged, or YAML-tagged: ``!!python/...`` is never constructed) is a
    :class:`RunDirConflict`: it cannot be shown to be this job's."""
    path = Path(out_dir) / "config.yaml"
    if not path.is_file():
        return upgrade_run_config(inside_checkpoint)
    try:
        return upgrade_run_config(OmegaConf.to_container(OmegaConf.load(path)) or {})  # MNP's flat keys: nested
    except Exception as e:  # noqa: BLE001 - yaml and OmegaConf raise assorted types for a damaged file
        raise RunDirConflict(
            f"{path} cannot be read ({' '.join(str(e).split())[:160]}), so {out_dir} cannot be shown "
            "to hold a run of this job; it was left as it is. Move it away to re-run"
        ) from None


def check_reuse(out_dir, current: dict, stored: dict, resuming: bool = False, data_files: list[Path] = ()) -> None:
    """Raise :class:`RunDirConflict` when ``current`` is not the config of the run in ``out_dir`` (``stored``)
    in what the user set, or the job's ``data_files`` are not the data it recorded (see module doc).

    ``resuming`` (no metrics.json yet, a last.ckpt to continue from) allows a new
    ``trainer.max_epochs``: training an unfinished run for longer is what a resume is for.
    """
    keys = declared_in_both(stored, current)
    drift = config_drift(as_declared(stored, keys), as_declared(current, keys))
    if resuming:
        drift = [k for k in drift if k != "trainer.max_epochs"]
    if drift:
        raise RunDirConflict(
            f"{out_dir} holds a run of another config (differs at {named_drift(drift, stored, current)}); it was left "
            f"as it is. Move it away to re-run, or give this job another {rename_key()}=..."
        )
    changed = data_change(stored.get("data_hash"), list(data_files))
    if changed:
        raise RunDirConflict(
            f"{out_dir} holds a run of other data: {changed}; it was left as it is. Move it "
            f"away to re-run, or give this job another {rename_key()}=..."
        )


def check_checkpoint_config(ckpt_path, current: dict, stored: dict | None) -> None:
    """``ckpt_path=<file>``: refuse (:class:`RunDirConflict`) a checkpoint whose stored config (``stored``) is not
    ``current`` in what the user set, a longer ``trainer.max_epochs`` aside: resuming a seed-0 checkpoint as seed 1
    would record the seed-0 model as seed 1's."""
    if not stored:
        return
    keys = declared_in_both(stored, current)
    drift = [
        k for k in config_drift(as_declared(stored, keys), as_declared(current, keys)) if k != "trainer.max_epochs"
    ]
    if drift:
        raise RunDirConflict(
            f"checkpoint {ckpt_path} is of a run of another config (differs at "
            f"{named_drift(drift, stored, current)}); resume only "
            "from a checkpoint of this job's config, or set ckpt_path=null to start afresh"
        )
