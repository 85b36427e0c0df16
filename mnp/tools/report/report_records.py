"""Per-run records and what is derived from them, for :mod:`mnp.tools.report`.

* ``runs.csv``: one row per run, ``experiment, model, dataset, variant, seed`` and then every numeric metric of
  its metrics.json (sorted columns; empty: the run has no such metric; ``nan``: its value is void, see
  :func:`void_values`).
* ``results.csv``: per (experiment, model, variant, dataset, metric) the mean, the sample std (ddof = 1), n, the
  95 % t-interval ``ci95_low``/``ci95_high`` (empty for n = 1) over the values of runs.csv, and
  ``source = runs``; a cell with a void value is ``source = void`` (mean nan), shown as void, never averaged
  over the other seeds. Cells of an earlier results.csv whose group has no per-run record are kept as they were,
  with ``source = legacy_aggregate`` and no interval.
* ``claims.csv``: "``mnp`` beats X on M" for every other model X of a dataset (default variants), as paired
  tests over shared seeds (:mod:`mnp.tools.report.stats`); a claim on a legacy cell is ``untested``. ``p_holm`` and
  ``verdict_holm``: the same test corrected for the claims of its (experiment, dataset, metric) family.
"""

from __future__ import annotations

import csv
import json
import logging
import math
from collections import defaultdict
from pathlib import Path

from mnp.tools.report.report_runs import (
    DATASET_ORDER,
    LEGACY,
    MODEL_ORDER,
    VOID,
    Cell,
    RecordFileError,
    Run,
    order,
    summarise,
)
from mnp.tools.report.stats import Paired, holm, paired_test, verdict

log = logging.getLogger(__name__)

ID_COLUMNS = ["experiment", "model", "dataset", "variant", "seed"]
RESULT_COLUMNS = [
    "model",
    "dataset",
    "metric",
    "mean",
    "std",
    "n",
    "ci95_low",
    "ci95_high",
    "source",
    "experiment",
    "variant",
]
CLAIM_COLUMNS = [
    "experiment", "model", "dataset", "metric", "baseline", "difference", "p_value", "n", "verdict", "p_holm",
    "verdict_holm", "p_rows", "verdict_rows",
]  # fmt: skip
# cal/: temperature-scaled (runs with eval.calibration=temperature, mnp.eval.calibration); conformal/: the sets of
# eval.conformal (mnp.tools.report.report_conformal): coverage kept under noise and with a view missing, size on clean rows
CLAIM_METRICS = [
    "test/acc", "test/ece", "noise/acc_mean", "test/nll", "cal/test/ece", "cal/test/nll",
    "conformal/noise/coverage_mean", "conformal/missing/coverage_mean", "conformal/test/size",
]  # fmt: skip
NON_METRICS = {"seed", "epochs"}
UNTESTED = "untested (legacy aggregate)"
UNTESTED_VOID = "untested (void value)"

# (experiment, model, dataset, variant, seed) -> {metric: value}
Records = dict[tuple, dict[str, float]]


def _sort_key(key: tuple) -> tuple:
    return tuple("" if x is None else x if isinstance(x, int) else str(x) for x in key)


# ---------------------------------------------------------------------------- runs.csv
METRIC_PREFIXES = ("test/", "val/", "noise/", "missing/", "view/", "cal/", "ood/", "time/")
UNIT = {"acc", "ece", "auroc", "aupr", "fpr95", "aurc"}  # fractions, in [0, 1]
NON_NEGATIVE = {"nll", "brier"}


def void_reason(key: str, value) -> str | None:
    """Why a metric's value is void: null, NaN, infinite, not a number (``"0.9"``), or out of its range (an
    accuracy, ECE, AUROC ... outside [0, 1]; a negative NLL, Brier score or time); None for a usable value or a key
    that is no metric."""
    if not key.startswith(METRIC_PREFIXES):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is {json.dumps(value)}, not a number"
    if not math.isfinite(value):
        return f"is {value}, not a finite number"
    name = set(key.rsplit("/", 1)[-1].split("@")[0].split("_"))
    if name & UNIT and not 0 <= value <= 1:
        return f"is {value:g}, outside [0, 1]"
    if (name & NON_NEGATIVE or key.startswith("time/")) and value < 0:
        return f"is {value:g}, below 0"
    return None


def void_values(runs: list[Run]) -> list[str]:
    """One line per void value of ``runs`` (:func:`void_reason`), naming its file and key."""
    return [
        f"{r.path / 'metrics.json'}: {k} {why}; its cell is void"
        for r in runs
        for k, v in r.metrics.items()
        if (why := void_reason(k, v))
    ]


def records_of(runs: list[Run]) -> Records:
    """Each run's numeric metrics (not its seed or epochs), keyed as a runs.csv row; a void value is NaN."""
    return {
        (r.experiment, r.model, r.dataset, r.variant, r.seed): {
            k: math.nan if void_reason(k, v) else float(v)
            for k, v in r.metrics.items()
            if k not in NON_METRICS and (void_reason(k, v) or isinstance(v, (int, float)) and not isinstance(v, bool))
        }
        for r in runs
    }


def write_runs(path: Path, records: Records) -> None:
    metrics = sorted({k for m in records.values() for k in m})
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ID_COLUMNS + metrics)
        for key in sorted(records, key=_sort_key):
            e, m, d, v, s = key
            w.writerow(
                [e, m, d, "" if v is None else v, s]
                + [repr(records[key][k]) if k in records[key] else "" for k in metrics]
            )


def read_runs(path: Path) -> Records:
    """The records of a runs.csv written by :func:`write_runs`; :class:`RecordFileError` naming the file and line
    where a row is cut short or long, or a seed or value is not a number."""
    records = {}
    try:
        with open(path, newline="") as f:
            for line, r in enumerate(csv.DictReader(f), 2):
                if None in r.values() or None in r:
                    raise ValueError(
                        f"line {line} has {'fewer' if None in r.values() else 'more'} fields than its header"
                    )
                try:
                    records[(r["experiment"], r["model"], r["dataset"], r["variant"] or None, int(r["seed"]))] = {
                        k: float(v) for k, v in r.items() if k not in ID_COLUMNS and v != ""
                    }
                except ValueError as e:
                    raise ValueError(f"line {line}: {e}") from None
    except KeyError as e:
        raise RecordFileError(path, "runs.csv", f"it has no column {e}") from None
    except (ValueError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
        raise RecordFileError(path, "runs.csv", " ".join(str(e).split())[:160]) from None
    return records


# ---------------------------------------------------------------------------- results.csv
def aggregate(records: Records) -> dict[tuple, Cell]:
    """(experiment, model, variant, dataset, metric) -> Cell over seeds; :data:`VOID` where a value is not finite."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for (e, m, d, v, _), metrics in sorted(records.items(), key=lambda kv: _sort_key(kv[0])):
        for k, x in metrics.items():
            values[(e, m, v, d, k)].append(x)
    return {
        k: summarise(v) if all(map(math.isfinite, v)) else Cell(math.nan, math.nan, len(v), source=VOID)
        for k, v in values.items()
    }


def derive(records: Records, previous: dict[tuple, Cell] | None = None) -> dict[tuple, Cell]:
    """The cells of ``records``, and the legacy cells of ``previous`` (a results.csv's) whose group (experiment,
    model, variant, dataset) has no record; a legacy group that records now cover is replaced, with a note."""
    agg = aggregate(records)
    groups = {(e, m, v, d) for (e, m, d, v, _) in records}
    legacy = {k: c for k, c in (previous or {}).items() if c.source == LEGACY}
    for g in sorted({k[:4] for k in legacy} & groups, key=_sort_key):
        log.info("legacy aggregate of %s replaced by its per-run records", "/".join(str(x) for x in g))
    return {**{k: c for k, c in legacy.items() if k[:4] not in groups}, **agg}


def write_results(path: Path, agg: dict[tuple, Cell]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RESULT_COLUMNS)
        for e, m, v, d, k in sorted(agg, key=_sort_key):
            c = agg[(e, m, v, d, k)]
            lo, hi = (repr(c.ci[0]), repr(c.ci[1])) if c.ci else ("", "")
            w.writerow([m, d, k, repr(c.mean), repr(c.std), c.n, lo, hi, c.source, e, "" if v is None else v])


# ---------------------------------------------------------------------------- claims.csv
def seed_values(records: Records, group: tuple, metric: str) -> dict[int, float]:
    """seed -> value of ``metric`` for ``group`` = (experiment, model, variant, dataset)."""
    e, m, v, d = group
    return {
        s: x[metric] for (ee, mm, dd, vv, s), x in records.items() if (ee, mm, vv, dd) == (e, m, v, d) and metric in x
    }


def claims(records: Records, agg: dict[tuple, Cell], model: str = "mnp") -> list[dict]:
    """ "``model`` beats X on M (dataset)" for every other model X with a default-variant cell of M beside
    ``model``'s, in the paper's order: paired tests on records, ``untested`` where a cell is a legacy aggregate."""
    out = []
    for e in sorted({k[0] for k in agg}):
        cells = {(m, d, k): c for (ee, m, v, d, k), c in agg.items() if ee == e and v is None}
        for d in order({d for (m, d, _) in cells if m == model}, DATASET_ORDER):
            for x in order({m for (m, dd, _) in cells if dd == d and m != model}, MODEL_ORDER):
                for k in CLAIM_METRICS:
                    ours, theirs = cells.get((model, d, k)), cells.get((x, d, k))
                    if ours is None or theirs is None:
                        continue
                    row = {"experiment": e, "model": model, "dataset": d, "metric": k, "baseline": x}
                    if VOID in (ours.source, theirs.source):
                        row.update(difference=None, p_value=None, n=None, verdict=UNTESTED_VOID)
                    elif LEGACY in (ours.source, theirs.source):
                        row.update(difference=ours.mean - theirs.mean, p_value=None, n=None, verdict=UNTESTED)
                    else:
                        t = paired_test(
                            seed_values(records, (e, model, None, d), k), seed_values(records, (e, x, None, d), k)
                        )
                        row.update(difference=t.difference, p_value=t.p_value, n=t.n, verdict=verdict(t, k))
                    out.append(row)
    with_holm(out)
    return out


def with_holm(rows: list[dict]) -> None:
    """Each claim's Holm–Bonferroni p over its family, the claims of one (experiment, dataset, metric): MNP against
    every other model there (:func:`mnp.tools.report.stats.holm`), and the verdict that p gives."""
    families: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        families[(r["experiment"], r["dataset"], r["metric"])].append(r)
    for family in families.values():
        for r, p in zip(family, holm([r["p_value"] for r in family])):
            r["p_holm"] = p
            tested = r["verdict"] != UNTESTED and p is not None
            r["verdict_holm"] = verdict(Paired(r["difference"], p, r["n"]), r["metric"]) if tested else r["verdict"]


def write_claims(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CLAIM_COLUMNS)
        w.writeheader()
        w.writerows(
            {k: "" if r.get(k) is None else repr(r[k]) if isinstance(r[k], float) else r[k] for k in CLAIM_COLUMNS}
            for r in rows
        )
