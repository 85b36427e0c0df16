"""Run directories: one per result-changing set of overrides, never reused for another config.

A job's directory is ``<model>_<dataset>_s<seed>`` plus, when the command line changes anything that
can change the result, ``_<those overrides>`` (``model.loss.tau=0.5``, ``trainer.max_epochs=10``): a sweep
``model.loss.tau=0.1,0.5`` gets two directories, not one overwritten or skipped. Overrides that cannot
change a result (where logs go, progress bars, launcher, logger, device, whether MNP's step is replayed
as a CUDA graph) are left out of the name, so the paper sweeps keep their plain names.

A directory is skipped as finished (``metrics.json``) or resumed (``last.ckpt``) only when the
``config.yaml`` it holds matches the job's config. A config file edited since the run (a new
per-dataset value, say) would otherwise return stale numbers; the job stops instead, names the keys
that differ, and leaves the directory as it is. The same holds for the data: a run records the sha256
of every file its datamodule read (``data_hash`` in ``config.yaml`` and in its checkpoints), and a
data file changed since stops the job too.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

from mnp.checks import is_int
from mnp.runs.migrations import upgrade_run_config
from mnp.runs.places import check_output_dir, experiment_dir_name
from mnp.cli.resources import gpu_jobs
from mnp.runs.runrecord import pending_subdir

log = logging.getLogger(__name__)

RESOLVER = "mnp_run_suffix"
EVAL_RESOLVER = "mnp_eval_dir"
PENDING_RESOLVER = "mnp_pending_record"
JOBS_RESOLVER = "mnp_gpu_jobs"
WARMUP_RESOLVER = "mnp_warmup"
EXPERIMENT_RESOLVER = "mnp_experiment"
# keys that cannot change a run's numbers: these exactly (group choices, bookkeeping) ...
NON_RESULT_KEYS = frozenset(
    {
        "model",
        "dataset",
        "seed",
        "data_hash",
        "declared",
        "experiment",
        "experiment_name",
        "variant",
        "launcher",
        "logger",
        "callbacks",
        "trainer",
        "paths",
        "hydra",
        "skip_if_done",
        "ckpt_path",
        "test",
        "torch_threads",
        "optimized_metric",
        "dataset.data_dir",
        "dataset.download",
        "dataset.checksum",
        "trainer.enable_progress_bar",
        "trainer.enable_model_summary",
        "trainer.log_every_n_steps",
        "trainer.accelerator",
        "trainer.devices",
        "trainer.num_nodes",
        "trainer.strategy",
        # the captured step computes what the eager one does: bit for bit emulated (tests/test_step_graphs.py), and
        # the same parameters and metrics on an H200 (benchmarks/h200_9de9874); runs of false and auto are one run
        "accel.cuda_graph",
    }
)
# ... and everything under these
NON_RESULT_PREFIXES = ("logger.", "launcher.", "callbacks.", "paths.", "hydra.", "data_hash.", "declared.")
MAX_SUFFIX = 100
LAST_CKPT = "last.ckpt"  # mnp.runs.checkpointing.LAST (which imports torch; this module must not)


def _is_result_key(key: str) -> bool:
    key = key.lstrip("+~")
    return key not in NON_RESULT_KEYS and not key.startswith(NON_RESULT_PREFIXES)


def result_overrides(overrides: Iterable[str]) -> list[str]:
    """The command-line overrides that can change a run's numbers, sorted."""
    return sorted(o for o in overrides if _is_result_key(o.split("=", 1)[0]))


def variant_name(overrides: Iterable[str]) -> str:
    """``"k=v,k2=v2"`` of the result-changing overrides (``""`` if none); long ones end in a hash."""
    return short_name(result_overrides(overrides))


def short_name(parts: Iterable[str]) -> str:
    """``parts`` joined by commas, a directory name (no ``/``); a long one ends in a hash."""
    kept = ",".join(parts).replace("/", "-")
    if len(kept) > MAX_SUFFIX:
        kept = f"{kept[: MAX_SUFFIX - 9]}~{hashlib.sha1(kept.encode()).hexdigest()[:8]}"
    return kept


def run_suffix(overrides: Iterable[str]) -> str:
    """``""`` or ``"_" + variant_name(overrides)``, appended to a run directory name."""
    name = variant_name(overrides)
    return f"_{name}" if name else ""


def register_resolver() -> None:
    """The configs' resolvers: ``${mnp_run_suffix:${hydra.overrides.task}}`` in conf/hydra/default.yaml,
    ``${mnp_eval_dir:${ckpt_path},${eval},${data_dir},${model},${output_dir}}`` in conf/evaluate.yaml, ``${mnp_pending_record:}`` in conf/train.yaml,
    ``${mnp_gpu_jobs:}`` in conf/launcher/gpu_joblib.yaml (mnp.cli.resources), ``${mnp_warmup:W,E}`` in
    conf/model_dataset/ and ``${mnp_experiment:${experiment_name}}`` in conf/hydra/default.yaml (mnp.runs.places)."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, lambda overrides: run_suffix(list(overrides or [])))
    if not OmegaConf.has_resolver(EVAL_RESOLVER):
        OmegaConf.register_new_resolver(EVAL_RESOLVER, eval_dir)
    if not OmegaConf.has_resolver(PENDING_RESOLVER):
        OmegaConf.register_new_resolver(PENDING_RESOLVER, pending_subdir)
    if not OmegaConf.has_resolver(JOBS_RESOLVER):
        OmegaConf.register_new_resolver(JOBS_RESOLVER, gpu_jobs)
    if not OmegaConf.has_resolver(WARMUP_RESOLVER):
        OmegaConf.register_new_resolver(WARMUP_RESOLVER, scaled_warmup)
    if not OmegaConf.has_resolver(EXPERIMENT_RESOLVER):
        OmegaConf.register_new_resolver(EXPERIMENT_RESOLVER, experiment_dir_name)


def scaled_warmup(warmup: int, of: int, *, _root_) -> int:
    """``${mnp_warmup:W,E}``: a dataset's W warm-up epochs of its E. A ``trainer.max_epochs`` that leaves no epoch
    after them (a run shortened for a quick try, or a sweep's shared ``trainer.max_epochs``) scales the warm-up
    to the same share W/E of the shorter run, keeping at least one main epoch."""
    epochs = OmegaConf.select(_root_, "trainer.max_epochs")
    if not is_int(epochs) or epochs < 1 or epochs > warmup:
        return int(warmup)  # a bad trainer.max_epochs is the validation's to report
    return max(min(round(warmup * epochs / of), epochs - 1), 0)


def eval_dir(ckpt_path: str, evaluation=None, data_dir: str | None = None, model=None, output_dir=None) -> str:
    """``<run dir>/eval`` for ``<run dir>/checkpoints/<name>.ckpt`` (else ``eval`` beside the file),
    absolute: an evaluation writes nothing outside the run it evaluates. Evaluations with ``+eval.*``
    settings (``evaluation``), ``+model.*`` settings (``model``) or another ``data_dir`` each get their own,
    ``eval_<settings>`` (``eval_noise_levels=[0.5]``, ``eval_model.decoder.eval_samples=20``), so one never writes
    over another. A user's ``output_dir`` is the place (checked first: :func:`mnp.runs.places.check_output_dir`),
    so a read-only run is evaluated into a folder elsewhere."""
    if output_dir:
        check_output_dir(output_dir)
        return str(Path(str(output_dir)).expanduser().absolute())
    ckpt = Path(str(ckpt_path)).expanduser().absolute()
    if ckpt.is_dir():  # a run directory or its checkpoints/ (refused by evaluate.py): its eval stays inside it
        ckpt = ckpt / LAST_CKPT if ckpt.name == "checkpoints" else ckpt / "checkpoints" / LAST_CKPT
    run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    parts = _setting_names(evaluation) + _setting_names(model, "model.")
    parts += [f"data_dir={data_dir}"] if data_dir else []
    return str(run / ("eval_" + short_name(parts) if parts else "eval"))


def _setting_names(node, prefix: str = "") -> list[str]:
    """``["<prefix>key=value", ...]`` of a (nested) override node, sorted, without blanks."""
    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=True)
    return sorted(f"{prefix}{k}={v}".replace(" ", "") for k, v in flatten(node or {}).items())


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


def hydra_variant() -> str:
    """:func:`variant_name` of the running Hydra job's overrides; ``""`` outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    return variant_name(HydraConfig.get().overrides.task) if HydraConfig.initialized() else ""


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as {"a.b.c": value}."""
    if not isinstance(d, dict):
        return {prefix[:-1]: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flatten(v, f"{prefix}{k}."))
    return out


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
    return sorted(k for k in old.keys() & new.keys() if _is_result_key(k) and old[k] != new[k]) + sorted(
        k for k in old.keys() - new.keys() if _is_result_key(k)
    )


def file_sha256(path: Path) -> str:
    """:func:`datamodules.sources.file_sha256`, imported here: the data layer imports torch, which
    ``train.py --help`` (it imports this module) does without."""
    from datamodules.sources import file_sha256 as sha256

    return sha256(path)


def data_hashes(files: Iterable[Path], read: dict[str, str] | None = None) -> dict[str, str]:
    """``{absolute path: sha256}`` of the data files, in their order (the run's ``data_hash`` record): the hash
    of the bytes the datamodule parsed (``read``, its ``read_sha256``) where it has one, else of the file now."""
    read = read or {}
    return {str(Path(f).absolute()): read.get(str(Path(f).absolute())) or file_sha256(Path(f)) for f in files}


def data_change(recorded: dict | None, files: list[Path], read: dict[str, str] | None = None) -> str | None:
    """How ``files`` (a datamodule's, in order; ``read``: the hashes of the bytes it parsed, if it has) differ from
    the ``data_hash`` a run recorded: ``None`` when they are the same, or when there is nothing to compare (no
    record; a file not there to hash)."""
    if not recorded:
        return None
    if len(recorded) != len(files):
        return f"it read {len(recorded)} data files ({', '.join(recorded)}), this job reads {len(files)}"
    for (then_path, then), path in zip(recorded.items(), map(Path, files)):
        now = (read or {}).get(str(path.absolute())) or (file_sha256(path) if path.is_file() else then)
        if now != then:
            was = "" if str(path.absolute()) == then_path else f" (then {then_path})"
            return f"{path}{was} has changed since (sha256 {now[:12]}… now, {then[:12]}… when the run read it)"
    return None


def warn_if_data_changed(run_cfg, files: list[Path], ckpt_path, read: dict[str, str] | None = None) -> None:
    """evaluate.py: one warning line when the data read (``read``: their hashes) differ from those the checkpoint
    was trained on; the record then names the data evaluated."""
    changed = data_change(run_cfg.get("data_hash"), files, read)
    if changed:
        log.warning(
            "the data differ from those %s was trained on: %s; the scores are of the data as they are now",
            ckpt_path,
            changed,
        )
        run_cfg.data_hash = data_hashes(files, read)


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
