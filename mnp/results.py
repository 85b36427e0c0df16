"""Results as pandas DataFrames, for a notebook: ``mnp.results.runs(...)``, ``cells(...)``, ``claims(...)`` and
``metrics(run)``.

A source is a committed experiment (``results/paper_main``, or its ``runs.csv``) or sweep and run directories
(``logs/default/multiruns``): the same records the report reads (:mod:`mnp.tools.report`), so a DataFrame here and a
table there always agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from mnp.tools.report.report_records import ID_COLUMNS, Records, aggregate, read_runs, records_of
from mnp.tools.report.report_records import claims as claim_rows
from mnp.tools.report.report_runs import load

Source = str | Path | Iterable[str | Path]


def _records(source: Source) -> Records:
    paths = [Path(source)] if isinstance(source, (str, Path)) else [Path(p) for p in source]
    csvs = [p if p.suffix == ".csv" else p / "runs.csv" for p in paths]
    if all(p.is_file() for p in csvs):  # committed experiments: their runs.csv
        out: Records = {}
        for p in csvs:
            out.update(read_runs(p))
        return out
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{missing[0]} is neither a runs.csv, an experiment's folder nor a run directory")
    runs, _ = load(paths)
    return records_of(runs)


def runs(source: Source) -> pd.DataFrame:
    """One row per run: experiment, model, dataset, variant (None: the defaults), seed, then every metric."""
    records = _records(source)
    rows = [dict(zip(ID_COLUMNS, key), **metrics) for key, metrics in records.items()]
    frame = pd.DataFrame(rows, columns=[*ID_COLUMNS, *sorted({k for m in records.values() for k in m})])
    return frame.sort_values(ID_COLUMNS[:3] + ["seed"], kind="stable", ignore_index=True)


def cells(source: Source) -> pd.DataFrame:
    """One row per (experiment, model, variant, dataset, metric): mean, std, n and the 95 % t-interval over seeds."""
    agg = aggregate(_records(source))
    rows = [
        {"experiment": e, "model": m, "variant": v, "dataset": d, "metric": k, "mean": c.mean, "std": c.std,
         "n": c.n, "ci95_low": c.ci[0] if c.ci else None, "ci95_high": c.ci[1] if c.ci else None}
        for (e, m, v, d, k), c in agg.items()
    ]  # fmt: skip
    return pd.DataFrame(rows)


def claims(source: Source, model: str = "mnp") -> pd.DataFrame:
    """ "``model`` beats X on M": the paired test over seeds of every claim, as the report's claims.csv."""
    records = _records(source)
    return pd.DataFrame(claim_rows(records, aggregate(records), model))


def metrics(run: str | Path) -> pd.Series:
    """A run directory's metrics.json as a Series (metric -> value)."""
    path = Path(run) / "metrics.json" if Path(run).is_dir() else Path(run)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: give a finished run's directory or its metrics.json")
    return pd.Series(json.loads(path.read_text()), name=str(Path(run)))
