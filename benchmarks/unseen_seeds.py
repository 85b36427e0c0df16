"""Do runs on seeds that no decision and no table saw agree with the committed 10-seed cells?

    python benchmarks/unseen_seeds.py <run dirs of seeds 10-12> --runs results/paper_main/runs.csv \\
        --out benchmarks/unseen_seeds.json

For each model and dataset of the given runs and each main metric, the committed runs.csv cell (seeds 0-9) is
set against the new seeds: their mean with its 95 % t-interval, whether the committed mean lies inside that
interval, and Welch's two-sample t-test of the two groups (seeds are independent draws; a p-value below 0.05
would say the committed cell does not describe a fresh seed). The JSON is rendered in docs/results.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mnp.tools.report.report_runs import load  # noqa: E402
from mnp.tools.report.stats import t_interval  # noqa: E402

METRICS = ("test/acc", "test/ece", "noise/acc_mean")


def committed(path: Path) -> dict[tuple[str, str, str], list[float]]:
    """{(model, dataset, metric): values over seeds} of the default-variant rows of a runs.csv."""
    out: dict[tuple[str, str, str], list[float]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row["variant"]:
                continue
            for m in METRICS:
                if row.get(m):
                    out.setdefault((row["model"], row["dataset"], m), []).append(float(row[m]))
    return out


def compare(old: list[float], new: list[float]) -> dict:
    lo_hi = t_interval(new)
    welch = st.ttest_ind(new, old, equal_var=False).pvalue if len(new) > 1 and len(old) > 1 else None
    return {
        "committed_mean": float(np.mean(old)),
        "committed_n": len(old),
        "new_values": new,
        "new_mean": float(np.mean(new)),
        "new_ci95": lo_hi,
        "committed_mean_in_new_ci": bool(lo_hi and lo_hi[0] <= np.mean(old) <= lo_hi[1]),
        "welch_p": None if welch is None or np.isnan(welch) else float(welch),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="run directories of the unseen seeds (or their evaluate.py outputs)")
    ap.add_argument("--runs", type=Path, required=True, help="the committed runs.csv")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    cells = committed(args.runs)
    new: dict[tuple[str, str, str], list[float]] = {}
    seeds: dict[tuple[str, str], list[int]] = {}
    for run in load(args.dirs, evaluations=True)[0]:  # a directory given may be a run re-scored by evaluate.py
        seeds.setdefault((run.model, run.dataset), []).append(run.seed)
        for m in METRICS:
            if m in run.metrics:
                new.setdefault((run.model, run.dataset, m), []).append(float(run.metrics[m]))
    rows = []
    for (model, dataset, metric), values in sorted(new.items()):
        if (model, dataset, metric) not in cells:
            raise SystemExit(f"error: {args.runs} has no default-variant runs of {model} on {dataset}")
        rows.append(
            {
                "model": model,
                "dataset": dataset,
                "metric": metric,
                "seeds": sorted(seeds[(model, dataset)]),
                **compare(cells[(model, dataset, metric)], values),
            }
        )
    command = "python benchmarks/unseen_seeds.py " + " ".join(args.dirs) + f" --runs {args.runs} --out {args.out}"
    args.out.write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    for r in rows:
        print(
            f"{r['model']:5s} {r['dataset']:8s} {r['metric']:15s} committed {r['committed_mean']:.4f} "
            f"(n={r['committed_n']})  new {r['new_mean']:.4f} {r['new_ci95']}  Welch p {r['welch_p']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
