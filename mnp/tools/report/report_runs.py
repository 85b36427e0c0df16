"""Finished sweep jobs for :mod:`mnp.tools.report` and :mod:`mnp.tools.report.plots`: loading, table cells and results.csv,
the paper's order of methods and datasets, and their display names."""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf
from tabulate import DataRow, TableFormat

from mnp.runs.migrations import upgrade_run_config
from mnp.runs.naming import data_label
from mnp.tools.report.stats import t_interval

log = logging.getLogger(__name__)

MODEL_ORDER = ["mcd", "de_ef", "sngp", "etp", "de_lf", "tmc", "mgp", "mnp", "mnp_official", "mlp"]
MODEL_NAMES = {
    "mcd": "MCD",
    "de_ef": "DE (EF)",
    "sngp": "SNGP",
    "etp": "ETP",
    "de_lf": "DE (LF)",
    "tmc": "TMC",
    "mgp": "MGP",
    # `mnp` is the paper's method plus this project's extensions (docs/switches.md), `mnp_official` the authors' code
    "mnp": "MNP (paper + eq. 8′, CUB: view dropout)",
    "mnp_official": "MNP (authors' code)",
    "mlp": "MLP",
}
DATASET_ORDER = [
    "handwritten",
    "cub",
    "pie",
    "caltech101",
    "scene15",
    "hmdb",
    "cifar10c",
    "digits_c",
    "synthetic",
    "custom",
]
DATASET_NAMES = {
    "handwritten": "Handwritten",
    "cub": "CUB",
    "pie": "PIE",
    "caltech101": "Caltech101",
    "scene15": "Scene15",
    "hmdb": "HMDB",
    "cifar10c": "CIFAR10-C",
    "digits_c": "Digits-C",
    "synthetic": "Synthetic",
    "custom": "Custom",
}


@dataclass
class Run:
    """One finished job: its identity, its metrics and (when present) its resolved config."""

    path: Path
    experiment: str
    model: str
    dataset: str
    seed: int
    variant: str | None
    metrics: dict
    config: dict = field(default_factory=dict)

    @property
    def row(self) -> tuple[str, str | None]:
        return self.model, self.variant


@dataclass
class Job:
    """A failed or skipped job, from its failed.json / skipped.json, a job whose record cannot be read (status
    ``unreadable``: a truncated metrics.json, one that holds a list, a damaged config.yaml, ...), or one that
    stopped before it finished (status ``interrupted``: a config.yaml and no metrics.json)."""

    path: Path
    status: str
    record: dict

    def describe(self) -> str:
        r = self.record
        what = r.get("message") or r.get("reason") or ""
        err = f"{r['error']}: " if r.get("error") else ""
        who = f"{r.get('model')} / {r.get('dataset')} / seed {r.get('seed')}: " if "model" in r else ""
        return f"{who}{err}{what} ({self.path.parent})"


def _read_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    return OmegaConf.to_container(OmegaConf.load(path)) or {}


def _who(run_dir: Path) -> dict:
    """The job's model, dataset and seed from its config.yaml; ``{}`` where that cannot be read."""
    try:
        cfg = _read_config(run_dir)
        return {"model": cfg["model"]["name"], "dataset": cfg["dataset"]["name"], "seed": cfg["seed"]}
    except Exception:  # noqa: BLE001 - no or a damaged config.yaml: the job is named by its directory only
        return {}


def _unreadable(path: Path, problem: str) -> Job:
    """A job whose ``path`` cannot be used, named by its config.yaml where that can be read; warned about."""
    log.warning("%s %s; the job is left out of the tables", path, problem)
    return Job(
        path, "unreadable", {**_who(path.parent), "message": f"{path.name} {problem}; re-run the job to write it again"}
    )


def _config_or_unreadable(run_dir: Path, jobs: list[Job]) -> dict | None:
    """The run's config.yaml (``{}`` if none), or None with an ``unreadable`` job: a damaged or YAML-tagged file
    (``!!python/object``, which is never constructed) leaves its run out, not the whole report."""
    try:
        return _read_config(run_dir)
    except Exception as e:  # noqa: BLE001 - yaml and OmegaConf raise assorted types for a damaged file
        jobs.append(_unreadable(run_dir / "config.yaml", f"cannot be read ({' '.join(str(e).split())[:200]})"))
        return None


def _interrupted(d: Path) -> list[Job]:
    """Jobs under ``d`` that stopped before they finished: a run directory with config.yaml and no metrics.json,
    failed.json or skipped.json (a killed or interrupted job; its seed is missing from the means)."""
    jobs = []
    for cpath in sorted(d.rglob("config.yaml")):
        run = cpath.parent
        if any(part.startswith(".") for part in run.relative_to(d).parts) or any(
            (run / f).exists() for f in ("metrics.json", "failed.json", "skipped.json")
        ):
            continue  # Hydra's own .hydra/ records, finished, failed or skipped jobs
        who = _who(run)
        if who and _read_config(run).get("test") is False:
            continue  # trained with test=false: it writes no metrics.json
        kept = "its checkpoints/last.ckpt is kept, " if (run / "checkpoints" / "last.ckpt").exists() else ""
        jobs.append(
            Job(
                cpath,
                "interrupted",
                {**who, "message": f"no metrics.json: the job stopped before it finished; {kept}re-run it to finish"},
            )
        )
    return jobs


def _read_record(path: Path, jobs: list[Job]) -> dict | None:
    """The JSON object in ``path``, or None with an ``unreadable`` job appended to ``jobs``."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        jobs.append(_unreadable(path, f"cannot be read ({' '.join(str(e).split())})"))
        return None
    if not isinstance(record, dict):
        jobs.append(_unreadable(path, f"holds a JSON {type(record).__name__}, not a job's record (an object)"))
        return None
    return record


def load(dirs: Iterable[str | Path], relabel: bool = False, evaluations: bool = False) -> tuple[list[Run], list[Job]]:
    """Every run (metrics.json) and every failed, skipped or interrupted job under ``dirs``; a metrics.json,
    config.yaml, failed.json or skipped.json that cannot be read or holds no job's record is an ``unreadable`` job,
    with a warning.

    ``metrics.json`` written by ``evaluate.py`` (it has a ``checkpoint`` key) is not a sweep job
    and is left out, unless ``evaluations``: then it is its run re-scored (``+model.*``, a default decided after
    the run) and counts as the run, labelled by its own config.yaml. A ``dataset=custom`` run's dataset is its file's stem (:func:`mnp.runs.naming.data_label`).
    A job found twice (the same experiment, model, variant, dataset and seed) counts once when the two records are
    equal or one is its evaluation (:func:`_replaces`); two different records of it are refused (:class:`DuplicateRun`).
    A metrics.json whose seed is not an integer is ``unreadable``. ``relabel``: each run's experiment and variant from where it
    lives and how its saved config differs from today's defaults (:mod:`mnp.tools.report.relabel`).
    """
    runs: dict[tuple, Run] = {}
    jobs: list[Job] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"{d} is not a directory")
        for mpath in sorted(d.rglob("metrics.json")):
            m = _read_record(mpath, jobs)
            if m is None or ("checkpoint" in m and not evaluations):
                continue
            if "model" not in m or "dataset" not in m:
                jobs.append(_unreadable(mpath, "names no model and dataset, so it is not a run's metrics"))
                continue
            seed = m.get("seed", 0)
            if isinstance(seed, bool) or not isinstance(seed, int):
                jobs.append(_unreadable(mpath, f"holds seed {seed!r}, not an integer"))
                continue
            cfg = _config_or_unreadable(mpath.parent, jobs)
            if cfg is None:
                continue
            cfg = upgrade_run_config(cfg)  # a run from before MNP's parts: its flat keys nested
            variant = cfg.get("variant")
            experiment = str(m.get("experiment") or cfg.get("experiment_name") or "default")
            if relabel and cfg:
                from mnp.tools.report.relabel import experiment_of, variant_of

                variant = variant_of(cfg, str(m["model"]), str(m["dataset"]), seed)
                experiment = experiment_of(mpath.parent, experiment)
            run = Run(
                mpath.parent,
                experiment,
                str(m["model"]),
                data_label(str(m["dataset"]), cfg.get("dataset")),
                seed,
                None if variant is None else str(variant),
                m,
                cfg,
            )
            key = (run.experiment, run.model, run.variant, run.dataset, run.seed)
            if key not in runs or _replaces(run, runs[key]):
                runs[key] = run
        for status in ("failed", "skipped"):
            for p in sorted(d.rglob(f"{status}.json")):
                if not (p.parent / "metrics.json").exists() and (record := _read_record(p, jobs)) is not None:
                    jobs.append(Job(p, status, record))
        jobs += _interrupted(d)
    return list(runs.values()), jobs


def _replaces(run: Run, old: Run) -> bool:
    """Whether ``run`` replaces ``old``, a run of the same experiment, model, variant, dataset and seed: an
    evaluation (evaluate.py's, ``checkpoint`` in its record) replaces the run it re-scores; an exact copy is kept
    once; any other pair is a :class:`DuplicateRun`, since neither record can be trusted over the other."""
    if ("checkpoint" in run.metrics) != ("checkpoint" in old.metrics):
        evaluation, trained = (run, old) if "checkpoint" in run.metrics else (old, run)
        log.warning("%s re-scores %s: the evaluation counts", evaluation.path, trained.path)
        return evaluation is run
    if run.metrics == old.metrics:
        log.warning("%s is a copy of %s: counted once", run.path, old.path)
        return False
    raise DuplicateRun(
        f"two different records of {run.model} / {run.dataset} / seed {run.seed} (experiment {run.experiment}"
        f"{f', variant {run.variant}' if run.variant else ''}): {old.path / 'metrics.json'} and "
        f"{run.path / 'metrics.json'}; move the one that is not the run's away and run again"
    )


class DuplicateRun(ValueError):
    """Two different records of one job (experiment, model, variant, dataset, seed) under the directories read."""


def code_version(run: Run) -> str:
    """The commit the run's code came from (metrics.json's ``code/commit``; ``+dirty`` with uncommitted changes),
    ``unrecorded`` for a run that names none (outside a git checkout, or from before the record)."""
    commit = run.metrics.get("code/commit")
    return f"{str(commit)[:10]}{'+dirty' if run.metrics.get('code/dirty') else ''}" if commit else "unrecorded"


def mixed_versions(runs: list[Run], what: str) -> str:
    """A line saying that ``runs`` (``what``) come from more than one code version ('' when they do not)."""
    by: dict[str, list[Run]] = {}
    for r in sorted(runs, key=lambda r: str(r.path)):
        by.setdefault(code_version(r), []).append(r)
    if len(by) < 2:
        return ""
    return f"{what} pool runs of {len(by)} code versions: " + "; ".join(
        f"{v} ({len(rs)} runs, e.g. {rs[0].path})" for v, rs in sorted(by.items())
    )


LEGACY = "legacy_aggregate"  # a results.csv cell without per-run records: no interval, never tested
VOID = "void"  # a cell of which a run reported no usable value (mnp.tools.report.report_records.void_values)


@dataclass(frozen=True)
class Cell:
    """One table cell: mean, sample std (ddof = 1) and number of seeds; ``ci`` its 95 % t-interval (None for
    one seed or a legacy aggregate); ``source``: ``runs`` (derived from runs.csv), :data:`LEGACY` or :data:`VOID`
    (mean and std NaN)."""

    mean: float
    std: float
    n: int
    ci: tuple[float, float] | None = None
    source: str = "runs"


def summarise(values: list[float]) -> Cell:
    """Mean, sample standard deviation (ddof = 1; 0 for a single seed) and the 95 % t-interval."""
    a = np.asarray(values, dtype=float)
    return Cell(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0, len(a), t_interval(a))


def order(items: Iterable[str], known: list[str]) -> list[str]:
    """``items`` in the order of ``known``, then the unknown ones sorted."""
    items = set(items)
    return [x for x in known if x in items] + sorted(items - set(known))


def order_rows(rows: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """(model, variant) rows: models in the paper's order, numeric variants ascending, then the others."""
    rows = set(rows)
    models = order({m for m, _ in rows}, MODEL_ORDER)

    def vkey(v):
        try:
            return (0, float(v), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(v))

    return [(m, v) for m in models for v in sorted({v for mm, v in rows if mm == m}, key=vkey)]


def model_label(model: str) -> str:
    return MODEL_NAMES.get(model, model)


def row_label(row: tuple[str, str | None]) -> str:
    model, variant = row
    return model_label(model) if variant is None else f"{model_label(model)} ({variant})"


def dataset_label(d: str) -> str:
    return DATASET_NAMES.get(d, d)


# the committed tables' form: cells as given, unpadded, under a |---|---| rule (tabulate's "pipe" pads them)
_MD_ROW = DataRow("| ", " | ", " |")
MARKDOWN = TableFormat(None, lambda widths, _: "|" + "---|" * len(widths), None, None, _MD_ROW, _MD_ROW, 0, None)


def markdown_table(header: list[str], rows: Iterable[Iterable]) -> str:
    """A markdown table of ``rows`` under ``header``, each cell as ``str`` writes it (numbers formatted beforehand)."""
    frame = pd.DataFrame([[str(c) for c in r] for r in rows], columns=header)
    return frame.to_markdown(index=False, tablefmt=MARKDOWN, stralign=None, numalign=None, disable_numparse=True)


def read_cells(path: Path) -> dict[tuple, Cell]:
    """(experiment, model, variant, dataset, metric) -> Cell of a results.csv written by mnp.tools.report; a file
    from before runs.csv (no ``source`` column) holds legacy aggregates only."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        return {
            (r["experiment"], r["model"], r["variant"] or None, r["dataset"], r["metric"]): Cell(
                float(r["mean"]),
                float(r["std"]),
                int(r["n"]),
                (float(r["ci95_low"]), float(r["ci95_high"])) if r.get("ci95_low") else None,
                r.get("source") or LEGACY,
            )
            for r in rows
        }
    except (KeyError, ValueError, TypeError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
        problem = f"it has no column {e}" if isinstance(e, KeyError) else " ".join(str(e).split())[:120]
        raise RecordFileError(path, "results.csv", problem) from None


class RecordFileError(ValueError):
    """A results.csv or runs.csv that mnp.tools.report did not write as it is now; ``what`` names the file and the
    problem, the message adds the report's advice (docgen gives its own)."""

    def __init__(self, path: Path, kind: str, problem: str):
        self.what = f"{path} is not a {kind} written by mnp.tools.report ({problem})"
        super().__init__(f"{self.what}; move it away or leave out --update")


def read_results(path: Path) -> dict[tuple[str, str, str, str], dict]:
    """(model, variant, dataset, metric) -> {mean, std, n, ci, source} of a results.csv (empty if there is none)."""
    if not path.exists():
        return {}
    return {
        (m, v or "", d, k): {"mean": c.mean, "std": c.std, "n": c.n, "ci": c.ci, "source": c.source}
        for (_, m, v, d, k), c in read_cells(path).items()
    }
