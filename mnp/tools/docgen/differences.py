"""Every gap between the paper's tables and ours, with its hypothesis, the experiment that tests it and the measured
outcome: ``python -m mnp.tools.docgen.differences`` writes ``results/differences/gaps.csv`` (rendered into docs/results.md by
:mod:`mnp.tools.docgen.docgen_differences`).

Inputs, all committed: the paper's numbers (``mnp/tools/report/paper_results.csv``), our cells (``results/paper_main``; ``results/paper_tuned`` at the tuned defaults), and
the experiments' outputs: ``results/differences/tmc_ece.csv`` (TMC's ECE under each probability reading,
``benchmarks/research/tmc_probabilities.py``), ``results/differences/cub_official/runs.csv`` and
``scene15_etp/runs.csv`` (one switch flipped at a time) and ``mgp_<dataset>_full/runs.csv`` (MGP at the authors'
steps), all by ``benchmarks/differences/*.sh``, the speed benches
(``benchmarks/bench_cpu.json``, ``benchmarks/h200_9de9874/bench_gpu.json``) and the earlier cells of
``results/switches/results.csv``. The hypotheses and commands are this module's :data:`GAPS`; each gap's outcome and
status (explained / partly explained / not explained) come from its evidence function, from those files alone.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

from mnp.tools.docgen.differences_gaps import GAPS, Context
from mnp.tools.report.report_records import read_runs
from mnp.tools.report.report_runs import read_results

ROOT = Path(__file__).resolve().parents[3]
OUT = Path("results/differences/gaps.csv")
FIELDS = ["dataset", "model", "metric", "paper", "ours", "ci95_low", "ci95_high", "n", "hypothesis", "experiment"]
FIELDS += ["outcome", "status"]
STATUSES = ("explained", "partly explained", "not explained")
PAPER_MODEL = {"mnp_official": "mnp"}  # the paper has one MNP; the authors' code is measured against it
FLIPS = (
    "cub_official",
    "scene15_etp",
    "mgp_cub_full",
    "mgp_pie_full",
    "mgp_scene15_full",
    "mgp_handwritten_weights",
)  # results/differences/
SCALE = {"test/acc": 100, "noise/acc_mean": 100}  # the paper prints accuracies in %


def paper_values(root: Path) -> dict[tuple[str, str, str], float]:
    """(model, dataset, metric) -> the paper's value in our units (fractions for accuracies)."""
    with open(root / "mnp/tools/report/paper_results.csv", newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["model"], r["dataset"], r["metric"]): float(r["value"]) / SCALE.get(r["metric"], 1) for r in rows}


def _optional_runs(path: Path):
    return read_runs(path) if path.is_file() else {}


def _tmc(path: Path) -> dict[tuple[str, str], list[float]]:
    """(dataset, definition) -> the ECE of each run (``tmc_ece.csv``)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    if path.is_file():
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                out[(r["dataset"], r["definition"])].append(float(r["ece"]))
    return dict(out)


def context(root: Path = ROOT) -> Context:
    """The committed files every evidence function reads."""
    diff = root / "results" / "differences"
    return Context(
        paper=paper_values(root),
        ours=read_results(root / "results/paper_main/results.csv"),
        runs=read_runs(root / "results/paper_main/runs.csv"),
        earlier=read_results(root / "results/switches/results.csv"),
        tmc=_tmc(diff / "tmc_ece.csv"),
        flips={n: _optional_runs(diff / n / "runs.csv") for n in FLIPS},
        tuned=_optional_runs(root / "results/paper_tuned/runs.csv"),
        bench={
            "cpu": json.loads((root / "benchmarks/bench_cpu.json").read_text())["ratios"],
            "h200": json.loads((root / "benchmarks/h200_9de9874/bench_gpu.json").read_text())["ratios"],
        },
    )


def _num(x: float | None, metric: str) -> str:
    if x is None:
        return ""
    return f"{x * SCALE.get(metric, 1):.2f}" if metric in SCALE or metric.startswith("speed") else f"{x:.3f}"


def rows(ctx: Context) -> list[dict]:
    """One row per gap of :data:`GAPS`: the paper's value, ours with its interval, and the evidence's verdict."""
    out = []
    for gap in GAPS:
        cell = ctx.ours.get((gap.model, "", gap.dataset, gap.metric)) or {}
        paper = ctx.paper.get((PAPER_MODEL.get(gap.model, gap.model), gap.dataset, gap.metric))
        ours = cell.get("mean")
        if gap.metric.startswith("speed-up/"):
            ours = ctx.speedup(gap.dataset, gap.metric.split("/")[1])
        outcome, status = gap.evidence(ctx, gap)
        if status not in STATUSES:
            raise ValueError(f"gap {gap.dataset}/{gap.model}/{gap.metric}: status '{status}' is not one of {STATUSES}")
        ci = cell.get("ci") or (None, None)
        out.append(
            {
                "dataset": gap.dataset,
                "model": gap.model,
                "metric": gap.metric,
                "paper": _num(paper, gap.metric),
                "ours": _num(ours, gap.metric),
                "ci95_low": _num(ci[0], gap.metric) if not gap.metric.startswith("speed") else "",
                "ci95_high": _num(ci[1], gap.metric) if not gap.metric.startswith("speed") else "",
                "n": cell.get("n", ""),
                "hypothesis": gap.hypothesis,
                "experiment": gap.experiment,
                "outcome": outcome,
                "status": status,
            }
        )
    return out


def write(path: Path, table: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(table)


def read(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.tools.docgen.differences", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / OUT, help=f"the CSV written (default {OUT})")
    args = ap.parse_args(argv)
    table = rows(context())
    write(args.out, table)
    counts = {s: sum(r["status"] == s for r in table) for s in STATUSES}
    print(f"{len(table)} gaps -> {args.out}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
