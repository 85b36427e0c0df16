"""Claims tested on the test rows as well as the seeds: the report's per-run predictions archive and the two-level
bootstrap of :func:`mnp.tools.report.stats.row_bootstrap`.

Every seed of a model reads the same test rows, so the seeds' spread leaves the test rows' sampling noise out: on
CUB's 120 rows a gap of 3 rows is 2.5 points, which a seed t-test can call exact. The report keeps each run's test
probabilities in ``<out>/predictions/<experiment>/<model>_<dataset>.npz`` (``seeds`` (S,), ``labels`` (N,), ``probs``
(S, N, K) float32, compressed; default variants) and tests "MNP beats X" on per-row scores: a row's correctness
(``test/acc``) or its NLL (``test/nll``), resampling seeds and then rows. ``p_rows`` and ``verdict_rows`` join
claims.csv; a claim holds on the rows only when this test says so.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from mnp.tools.report.stats import Paired, row_bootstrap, verdict

log = logging.getLogger(__name__)

ROW_METRICS = {
    "test/acc": lambda p, y: (p.argmax(-1) == y).astype(float),
    "test/nll": lambda p, y: -np.log(np.clip(np.take_along_axis(p, y[None, :, None], -1)[..., 0], 1e-12, None)),
}


def archive_path(root: Path, experiment: str, model: str, dataset: str) -> Path:
    return root / "predictions" / experiment / f"{model}_{dataset}.npz"


def archive_predictions(runs: list, out: Path) -> list[Path]:
    """Add the default-variant runs' test predictions to ``out``'s archive (a seed replaces its own row)."""
    groups: dict[tuple, dict[int, tuple]] = {}
    for r in runs:
        path = Path(r.path) / "predictions.npz"
        if r.variant is not None or not path.is_file():
            continue
        with np.load(path) as z:
            if "test/probs" not in z.files:
                continue
            groups.setdefault((r.experiment, r.model, r.dataset), {})[r.seed] = (z["test/probs"], z["test/labels"])
    written = []
    for (e, m, d), by_seed in groups.items():
        path = archive_path(out, e, m, d)
        if path.is_file():
            with np.load(path) as z:
                for s, p in zip(z["seeds"], z["probs"]):
                    by_seed.setdefault(int(s), (p, z["labels"]))
        seeds = sorted(by_seed)
        labels = {tuple(by_seed[s][1]) for s in seeds}
        if len(labels) > 1:
            log.warning("%s on %s: the runs' test rows differ between seeds; no predictions archived", m, d)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        probs = np.stack([by_seed[s][0] for s in seeds]).astype(np.float32)
        np.savez_compressed(path, seeds=np.array(seeds), labels=by_seed[seeds[0]][1], probs=probs)
        written.append(path)
    return written


def _scores(root: Path, e: str, m: str, d: str, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    path = archive_path(root, e, m, d)
    if not path.is_file():
        return None
    with np.load(path) as z:
        return z["seeds"], z["labels"], ROW_METRICS[metric](z["probs"].astype(np.float64), z["labels"])


def add_row_tests(rows: list[dict], root: Path) -> None:
    """``p_rows`` and ``verdict_rows`` of each claim on a row metric whose two models are archived under ``root``
    (None where not: no archive, another metric, or test rows that differ)."""
    for r in rows:
        r["p_rows"], r["verdict_rows"] = None, None
        if r["metric"] not in ROW_METRICS:
            continue
        ours = _scores(root, r["experiment"], r["model"], r["dataset"], r["metric"])
        theirs = _scores(root, r["experiment"], r["baseline"], r["dataset"], r["metric"])
        if ours is None or theirs is None or not np.array_equal(ours[1], theirs[1]):
            continue
        shared = sorted(set(ours[0].tolist()) & set(theirs[0].tolist()))
        a = ours[2][[ours[0].tolist().index(s) for s in shared]]
        b = theirs[2][[theirs[0].tolist().index(s) for s in shared]]
        test = row_bootstrap(a, b) if len(shared) else Paired(float("nan"), None, 0)
        r["p_rows"], r["verdict_rows"] = test.p_value, verdict(test, r["metric"])
