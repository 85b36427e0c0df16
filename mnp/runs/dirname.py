"""A run directory's name, and an evaluation's folder beside its checkpoint.

A job's directory is ``<model>_<dataset>_s<seed>`` plus, when the command line changes anything that
can change the result, ``_<those overrides>`` (``model.loss.tau=0.5``, ``trainer.max_epochs=10``): a sweep
``model.loss.tau=0.1,0.5`` gets two directories, not one overwritten or skipped. Overrides that cannot
change a result (where logs go, progress bars, launcher, logger, device, whether MNP's step is replayed
as a CUDA graph) are left out of the name, so the paper sweeps keep their plain names; mnp/runs/rundir.py
refuses to reuse a directory for another config.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from omegaconf import OmegaConf

from mnp.runs.flat import flatten
from mnp.runs.places import check_output_dir

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


def is_result_key(key: str) -> bool:
    key = key.lstrip("+~")
    return key not in NON_RESULT_KEYS and not key.startswith(NON_RESULT_PREFIXES)


def result_overrides(overrides: Iterable[str]) -> list[str]:
    """The command-line overrides that can change a run's numbers, sorted."""
    return sorted(o for o in overrides if is_result_key(o.split("=", 1)[0]))


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


def hydra_variant() -> str:
    """:func:`variant_name` of the running Hydra job's overrides; ``""`` outside a Hydra job."""
    from hydra.core.hydra_config import HydraConfig

    return variant_name(HydraConfig.get().overrides.task) if HydraConfig.initialized() else ""
