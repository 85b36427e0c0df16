"""Results tables and plots of finished sweeps: ``python -m mnp.tools.report <sweep_dir>... [--out <dir>]``
(default ``<first sweep dir>/report``), or from committed records: ``python -m mnp.tools.report --from-runs
results/paper_main/runs.csv``.

Reads every ``metrics.json`` under the given directories (plus the run's ``config.yaml`` for the
ablation ``variant``), lists the failed (``failed.json``) and skipped (``skipped.json``) jobs and those
whose record cannot be read (a truncated ``metrics.json``, one holding a list), and
writes, per experiment, the paper's tables as the mean and its 95 % t-interval over seeds with
the number of seeds per cell (a legacy aggregate: its mean, marked †), the best value of each column
in bold and the second underlined:
test accuracy (%), ECE, accuracy averaged over the noise levels (%), accuracy, ECE and OOD AUROC
per dataset with OOD sets, training time per epoch, test time, and the speed-up of MNP over MGP.

Notes (results.md's last section, and the console): runs evaluated on validation rows (``eval.split=val``) are
left out of these test tables (:mod:`mnp.tools.select` reads them); a void value (null, NaN, infinite, text, or
out of its range: :func:`mnp.tools.report.report_records.void_reason`) shows its cell as ``void``; a cell whose runs come
from different commits (metrics.json's ``code/commit``) is named. ``--out`` in a run's directory is refused.

Table numbers: the tables of ``results.md`` are numbered consecutively through the file (1, 2,
3, ..., across experiments), so a table without data leaves no gap and a number is never used
twice; the numbers match LaTeX's own numbering of ``results.tex``. Each caption names the paper
table it reproduces ("cf. paper Table 5"; paper: 1 accuracy, 2 ECE, 3 noisy accuracy,
4 CIFAR10-C OOD, 5 speed).

Outputs: ``runs.csv`` (one row per run), ``results.csv`` (one row per experiment × model × variant × dataset ×
metric, derived from runs.csv, with 95 % t-intervals), ``claims.csv`` (paired tests of "MNP beats X"; all three:
:mod:`mnp.tools.report.report_records`), ``results.md``, ``results.tex``, with ``--paper`` also ``paper_comparison.csv``
and a comparison section (:mod:`mnp.tools.report.report_paper`), and PNG plots under ``plots/`` (see
:mod:`mnp.tools.report.plots`; not with ``--from-runs`` alone); with ``--wandb-project NAME`` also a wandb run holding
the aggregate (:mod:`mnp.tools.report.report_wandb`).
"""

from __future__ import annotations

import argparse
import csv
import logging
from pathlib import Path

from mnp.tools.report.plots import all_plots, figure_formats
from mnp.tools.report.report_conformal import conformal_tables, with_conformal_means
from mnp.tools.report.report_paper import paper_comparison, paper_md
from mnp.tools.report.report_records import (
    claims,
    derive,
    read_runs,
    records_of,
    void_values,
    write_claims,
    write_results,
    write_runs,
)
from mnp.tools.report.report_runs import LEGACY, Cell, Job, Run, load, mixed_versions, read_cells, row_label
from mnp.tools.report.report_tables import experiment_tables, speedup_md, speedup_tex, speedups, table_md, table_tex
from mnp.tools.report.row_claims import add_row_tests, archive_predictions

STATUSES = ("failed", "skipped", "unreadable", "interrupted")  # of the jobs without metrics in the tables


def jobs_md(jobs: list[Job]) -> str:
    lines = []
    for status in STATUSES:
        sel = [j for j in jobs if j.status == status]
        if sel:
            lines += [f"## {status.capitalize()} jobs ({len(sel)})", ""] + [f"- {j.describe()}" for j in sel] + [""]
    return "\n".join(lines)


def previous_cells(out: Path) -> dict[tuple, Cell]:
    """The cells of ``out``'s results.csv (none if there is none); an error where cells derived from runs.csv
    lack that file, since they could be neither re-derived nor kept."""
    if not (out / "results.csv").is_file():
        return {}
    cells = read_cells(out / "results.csv")
    if not (out / "runs.csv").is_file() and any(c.source != LEGACY for c in cells.values()):
        raise ValueError(f"{out / 'results.csv'} holds cells derived from runs.csv, but {out / 'runs.csv'} is missing")
    return cells


def check_out(out: Path) -> None:
    """Refuse an ``out`` that is a run's directory (config.yaml beside metrics.json or checkpoints/) or lies inside
    one: a report never writes among a run's own files."""
    for d in [out.absolute(), *out.absolute().parents]:
        if (d / "config.yaml").is_file() and ((d / "metrics.json").exists() or (d / "checkpoints").is_dir()):
            raise ValueError(
                f"--out {out} is {'inside ' if d != out.absolute() else ''}the run directory {d} (config.yaml, "
                "metrics.json, checkpoints/), which a report never writes into; choose another --out"
            )


def notes_of(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """The runs the tables read, and a line for each thing the tables cannot show: the runs evaluated on validation
    rows (left out: their ``val/`` metrics are the selection's, :mod:`mnp.tools.select`), each void value (its
    cell shows ``void``) and each cell whose runs come from more than one code version."""
    val = [r for r in runs if r.metrics.get("eval_split") == "val"]
    runs = [r for r in runs if r.metrics.get("eval_split") != "val"]
    notes = (
        [
            f"{len(val)} runs evaluated on validation rows (eval.split=val, experiment "
            f"{', '.join(sorted({r.experiment for r in val}))}) left out: they have no test metrics; "
            "python -m mnp.tools.select reads their val/ metrics"
        ]
        if val
        else []
    )
    groups: dict[tuple, list[Run]] = {}
    for r in runs:
        groups.setdefault((r.experiment, r.model, r.variant, r.dataset), []).append(r)
    mixed = [mixed_versions(rs, f"{row_label((m, v))} on {d} (experiment {e})") for (e, m, v, d), rs in groups.items()]
    return runs, notes + void_values(runs) + sorted(filter(None, mixed))


def report(
    dirs: list[str | Path],
    out: str | Path,
    paper: bool = False,
    plots: bool = True,
    models: list[str] | None = None,
    seeds: list[int] | None = None,
    relabel: bool = False,
    evaluations: bool = False,
    update: bool = False,
    from_runs: str | Path | None = None,
    figure_formats: tuple[str, ...] = ("png",),
) -> dict:
    """Write runs.csv, results.csv (derived from it), claims.csv, results.md/.tex (and plots) for the runs under
    ``dirs``; returns what was found. ``models`` / ``seeds`` keep only those runs (a switch against the defaults
    on the same seeds); ``relabel``: label runs by today's defaults (:mod:`mnp.tools.report.relabel`); ``evaluations``:
    evaluate.py's outputs under ``dirs`` count as their runs re-scored (:func:`mnp.tools.report.report_runs.load`); ``update``: the
    runs replace the rows of the same experiment, model, dataset, variant and seed in ``out``'s runs.csv and the
    other rows stay (re-running some jobs without the run directories of the rest); ``from_runs``: a runs.csv to
    derive everything from (no run directories). Both keep ``out``'s legacy cells (see
    :mod:`mnp.tools.report.report_records`). ``figure_formats``: each plot in these (png, pdf, svg)."""
    out = Path(out)
    check_out(out)
    runs, jobs = load(dirs, relabel=relabel, evaluations=evaluations) if dirs else ([], [])
    out.mkdir(parents=True, exist_ok=True)
    chosen = lambda model, seed: (models is None or model in models) and (seeds is None or seed in seeds)  # noqa: E731
    runs = [r for r in runs if chosen(r.model, r.seed)]
    # a job the filters leave out is not this report's (a job whose record names no run stays listed)
    jobs = [j for j in jobs if "model" not in j.record or chosen(j.record["model"], j.record.get("seed"))]
    runs, notes = notes_of(runs)
    records, previous = with_conformal_means(records_of(runs)), {}
    if from_runs is not None:
        records, previous = {**read_runs(Path(from_runs)), **records}, previous_cells(out)
    elif update:
        previous = previous_cells(out)
        if (out / "runs.csv").is_file():
            records = {**read_runs(out / "runs.csv"), **records}
    agg = derive(records, previous)
    new_groups = {(r.experiment, r.model, r.variant, r.dataset) for r in runs}
    kept = (
        f", with the rows of {len({k[:4] for k in agg} - new_groups)} other groups kept from the previous results"
        if update
        else ""
    )
    source = f" from {from_runs}" if from_runs is not None else ""
    legacy = len({k[:4] for k, c in agg.items() if c.source == LEGACY})
    legacy = (
        f"; {legacy} groups are legacy aggregates without per-run records (†): no interval, no test" if legacy else ""
    )
    md = [
        f"# Results ({len(records)} runs{source}{kept}"
        + (f", {len(jobs)} failed, skipped, unreadable or interrupted jobs" if jobs else "")
        + f"{legacy})",
        "",
    ]
    tex = ["% Generated by python -m mnp.tools.report; needs \\usepackage{booktabs,graphicx}."]
    speed = {}
    number = 0
    for e in sorted({key[0] for key in agg}):
        md += [f"## Experiment `{e}`", ""]
        tex.append(f"% ---- experiment {e}")
        for t in experiment_tables(agg, e) + conformal_tables(agg, e):
            number += 1
            md += [table_md(t, number), ""]
            tex += [table_tex(t, e), ""]
        s = speedups(agg, e)
        if s:
            number += 1
            speed[e] = s
            md += [speedup_md(s, number), ""]
            tex += [speedup_tex(s, e), ""]
    if jobs:
        md.append(jobs_md(jobs))
    if notes:
        md += [f"## Notes ({len(notes)})", ""] + [f"- {n}" for n in notes] + [""]
    write_runs(out / "runs.csv", records)
    write_results(out / "results.csv", agg)
    archive_predictions(runs, out)  # each run's test probabilities: the claims' test on the rows
    found = claims(records, agg)
    add_row_tests(found, out)
    write_claims(out / "claims.csv", found)
    comparison = []
    if paper:
        comparison = paper_comparison(agg)
        md += [paper_md(comparison, speed), ""]
        with open(out / "paper_comparison.csv", "w", newline="") as f:
            fields = ["experiment", "model", "dataset", "metric", "ours", "std", "n", "paper", "diff"]
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(comparison)
    written = all_plots(runs, out / "plots", figure_formats) if plots else []
    if written:
        md += ["## Plots", ""] + [f"- [{p.name}](plots/{p.name})" for p in written] + [""]
    (out / "results.md").write_text("\n".join(md).rstrip() + "\n")
    (out / "results.tex").write_text("\n".join(tex).rstrip() + "\n")
    return {
        "runs": runs,
        "jobs": jobs,
        "records": records,
        "aggregate": agg,
        "claims": found,
        "plots": written,
        "paper": comparison,
        "notes": notes,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.tools.report", description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="*", help="sweep directories (e.g. logs/paper_main/multiruns)")
    ap.add_argument(
        "--out",
        help="output directory for runs.csv, results.md/.tex/.csv, claims.csv and plots/ "
        "(default: <first dir>/report, with --from-runs the runs.csv's directory)",
    )
    ap.add_argument(
        "--from-runs",
        metavar="RUNS_CSV",
        help="derive results.csv, claims.csv and the tables from this runs.csv (plus any run directories "
        "given), keeping the legacy cells of --out's results.csv",
    )
    ap.add_argument(
        "--paper", action="store_true", help="add a comparison with the paper's numbers (docs/method.md §7)"
    )
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    ap.add_argument(
        "--figure-format",
        default="png",
        metavar="FMT[,FMT]",
        help="write each plot in these formats: png (110 dpi), pdf, svg (vector, for a paper); "
        "e.g. pdf,png (default png)",
    )
    ap.add_argument("--models", nargs="+", help="only these models' runs of the sweep directories")
    ap.add_argument("--seeds", nargs="+", type=int, help="only these seeds' runs of the sweep directories")
    ap.add_argument(
        "--update",
        action="store_true",
        help="merge these runs into --out's runs.csv (a run replaces the row of the same experiment, "
        "model, dataset, variant and seed; the other rows stay: a partial re-run), keeping the "
        "legacy cells of its results.csv",
    )
    ap.add_argument(
        "--relabel",
        action="store_true",
        help="label runs by today's defaults: variant = where the saved config differs from them, "
        "experiment = the directory that holds the run (mnp.tools.report.relabel)",
    )
    ap.add_argument(
        "--evaluations",
        action="store_true",
        help="count evaluate.py's outputs under the directories as their runs re-scored (e.g. +model.decoder."
        "eval_samples=10, a default decided after the run); left out otherwise",
    )
    ap.add_argument(
        "--wandb-project",
        metavar="NAME",
        help="also log the aggregate table to this wandb project as a run of its own (job_type=report; "
        "offline under <out>/wandb unless WANDB_MODE=online; mnp.tools.report.report_wandb)",
    )
    args = ap.parse_args(argv)
    if not args.dirs and not args.from_runs:
        ap.error("give sweep directories, --from-runs RUNS_CSV or both")
    # beside the runs, not in the repository's results/
    args.out = args.out or str(Path(args.from_runs).parent if args.from_runs else Path(args.dirs[0]) / "report")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        res = report(
            args.dirs,
            args.out,
            paper=args.paper,
            plots=not args.no_plots,
            models=args.models,
            seeds=args.seeds,
            relabel=args.relabel,
            evaluations=args.evaluations,
            update=args.update,
            from_runs=args.from_runs,
            figure_formats=figure_formats(args.figure_format),
        )
        if args.wandb_project:
            from mnp.tools.report.report_wandb import push

            print(f"wandb run: {push(res['aggregate'], args.out, args.wandb_project, args.dirs)}")
    except (OSError, ValueError) as e:  # a missing directory, an --out below a file, a foreign results.csv
        print(f"error: {e}")
        return 1
    counts = ", ".join(f"{sum(j.status == s for j in res['jobs'])} {s}" for s in STATUSES)
    print(
        f"{len(res['runs'])} runs, {counts} -> {Path(args.out) / 'results.md'} ({len(res['records'])} runs in "
        f"runs.csv, {len(res['claims'])} claims)"
    )
    for j in res["jobs"]:
        print(f"  {j.status}: {j.describe()}")
    for n in res["notes"]:
        print(f"  note: {n}")
    return 0
