"""Run directories: one per result-changing set of overrides, never reused for another config.

A job's directory is ``<model>_<dataset>_s<seed>`` plus, when the command line changes anything that
can change the result, ``_<those overrides>`` (``model.tau=0.5``, ``trainer.max_epochs=10``): a sweep
``model.tau=0.1,0.5`` gets two directories, not one overwritten or skipped. Overrides that cannot
change a result (where logs go, progress bars, launcher, logger, device) are left out of the name,
so the paper sweeps keep their plain names.

A directory is skipped as finished (``metrics.json``) or resumed (``last.ckpt``) only when the
``config.yaml`` it holds matches the job's config. A config file edited since the run (a new
per-dataset value, say) would otherwise return stale numbers; the job stops instead, names the keys
that differ, and leaves the directory as it is.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable

from omegaconf import OmegaConf

RESOLVER = "mnp_run_suffix"
EVAL_RESOLVER = "mnp_eval_dir"
WARMUP_RESOLVER = "mnp_warmup"
# keys that cannot change a run's numbers: these exactly (group choices, bookkeeping) ...
NON_RESULT_KEYS = frozenset({
    "model", "dataset", "seed", "experiment", "experiment_name", "variant", "launcher", "logger", "callbacks",
    "trainer", "paths", "hydra", "skip_if_done", "ckpt_path", "test", "torch_threads", "optimized_metric",
    "dataset.data_dir", "dataset.download", "dataset.checksum", "trainer.enable_progress_bar",
    "trainer.enable_model_summary", "trainer.log_every_n_steps", "trainer.accelerator", "trainer.devices",
    "trainer.num_nodes", "trainer.strategy"})
# ... and everything under these
NON_RESULT_PREFIXES = ("logger.", "launcher.", "callbacks.", "paths.", "hydra.")
MAX_SUFFIX = 100


def _is_result_key(key: str) -> bool:
    key = key.lstrip("+~")
    return key not in NON_RESULT_KEYS and not key.startswith(NON_RESULT_PREFIXES)


def result_overrides(overrides: Iterable[str]) -> list[str]:
    """The command-line overrides that can change a run's numbers, sorted."""
    return sorted(o for o in overrides if _is_result_key(o.split("=", 1)[0]))


def variant_name(overrides: Iterable[str]) -> str:
    """``"k=v,k2=v2"`` of the result-changing overrides (``""`` if none); long ones end in a hash."""
    kept = ",".join(result_overrides(overrides)).replace("/", "-")
    if len(kept) > MAX_SUFFIX:
        kept = f"{kept[:MAX_SUFFIX - 9]}~{hashlib.sha1(kept.encode()).hexdigest()[:8]}"
    return kept


def run_suffix(overrides: Iterable[str]) -> str:
    """``""`` or ``"_" + variant_name(overrides)``, appended to a run directory name."""
    name = variant_name(overrides)
    return f"_{name}" if name else ""


def register_resolver() -> None:
    """The configs' resolvers: ``${mnp_run_suffix:${hydra.overrides.task}}`` in conf/hydra/default.yaml,
    ``${mnp_eval_dir:${ckpt_path}}`` in conf/evaluate.yaml and ``${mnp_warmup:W,E}`` in conf/model_dataset/."""
    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, lambda overrides: run_suffix(list(overrides or [])))
    if not OmegaConf.has_resolver(EVAL_RESOLVER):
        OmegaConf.register_new_resolver(EVAL_RESOLVER, eval_dir)
    if not OmegaConf.has_resolver(WARMUP_RESOLVER):
        OmegaConf.register_new_resolver(WARMUP_RESOLVER, scaled_warmup)


def scaled_warmup(warmup: int, of: int, *, _root_) -> int:
    """``${mnp_warmup:W,E}``: a dataset's W warm-up epochs of its E. A ``trainer.max_epochs`` that leaves no epoch
    after them (a run shortened for a quick try, or a sweep's shared ``trainer.max_epochs``) scales the warm-up
    to the same share W/E of the shorter run, keeping at least one main epoch."""
    epochs = OmegaConf.select(_root_, "trainer.max_epochs")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1 or epochs > warmup:
        return int(warmup)  # a bad trainer.max_epochs is the validation's to report
    return max(min(round(warmup * epochs / of), epochs - 1), 0)


def eval_dir(ckpt_path: str) -> str:
    """``<run dir>/eval`` for ``<run dir>/checkpoints/<name>.ckpt`` (else ``eval`` beside the file),
    absolute: an evaluation writes nothing outside the run it evaluates."""
    ckpt = Path(str(ckpt_path)).expanduser().absolute()
    run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    return str(run / "eval")


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


def config_drift(saved: dict, current: dict) -> list[str]:
    """Result keys whose values differ between a run's saved config and the job's (both resolved).

    A key the saved config lacks is a switch added since the run, with a default that keeps the old
    behaviour; it is not drift.
    """
    old, new = flatten(saved), flatten(current)
    return sorted(k for k in old.keys() & new.keys() if _is_result_key(k) and old[k] != new[k]) + \
        sorted(k for k in old.keys() - new.keys() if _is_result_key(k))


class RunDirConflict(ValueError):
    """The run directory holds a run of another config."""


def check_reuse(out_dir, current: dict, resuming: bool = False, stored: dict | None = None) -> None:
    """Raise :class:`RunDirConflict` when ``out_dir/config.yaml`` is not ``current`` (see module doc).

    ``resuming`` (no metrics.json yet, a last.ckpt to continue from) allows a new
    ``trainer.max_epochs``: training an unfinished run for longer is what a resume is for. ``stored``:
    the config kept inside the checkpoint, compared when ``config.yaml`` is missing.
    """
    path = Path(out_dir) / "config.yaml"
    if path.is_file():
        stored = OmegaConf.to_container(OmegaConf.load(path)) or {}
    if stored is None:
        return
    drift = config_drift(stored, current)
    if resuming:
        drift = [k for k in drift if k != "trainer.max_epochs"]
    if drift:
        shown = ", ".join(drift[:6]) + (f" and {len(drift) - 6} more" if len(drift) > 6 else "")
        raise RunDirConflict(
            f"{out_dir} holds a run of another config (differs at {shown}); it was left as it is. "
            "Move it away to re-run, or give this job another experiment_name=...")
