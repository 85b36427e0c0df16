"""Results tables and plots of finished sweeps: ``python -m mnp.tools.report <sweep_dir>... [--out <dir>]``
(default ``<first sweep dir>/report``).

Reads every ``metrics.json`` under the given directories (plus the run's ``config.yaml`` for the
ablation ``variant``), lists the failed (``failed.json``) and skipped (``skipped.json``) jobs and those
whose record cannot be read (a truncated ``metrics.json``, one holding a list), and
writes, per experiment, the paper's tables as mean ± std over seeds (sample std, ddof = 1) with
the number of seeds per cell, the best value of each column in bold and the second underlined:
test accuracy (%), ECE, accuracy averaged over the noise levels (%), accuracy, ECE and OOD AUROC
per dataset with OOD sets, training time per epoch, test time, and the speed-up of MNP over MGP.

Table numbers: the tables of ``results.md`` are numbered consecutively through the file (1, 2,
3, ..., across experiments), so a table without data leaves no gap and a number is never used
twice; the numbers match LaTeX's own numbering of ``results.tex``. Each caption names the paper
table it reproduces ("cf. paper Table 5"; paper: 1 accuracy, 2 ECE, 3 noisy accuracy,
4 CIFAR10-C OOD, 5 speed).

Outputs: ``results.md``, ``results.tex``, ``results.csv`` (one row per experiment × model ×
variant × dataset × metric), with ``--paper`` also ``paper_comparison.csv`` and a comparison
section (:mod:`mnp.tools.report_paper`), and PNG plots under ``plots/`` (see :mod:`mnp.tools.plots`); with
``--wandb-project NAME`` also a wandb run holding the aggregate (:mod:`mnp.tools.report_wandb`).
"""
from __future__ import annotations

import argparse
import csv
import logging
from pathlib import Path

from mnp.tools.plots import all_plots
from mnp.tools.report_paper import paper_comparison, paper_md
from mnp.tools.report_runs import Cell, Job, aggregate, load
from mnp.tools.report_tables import experiment_tables, speedup_md, speedup_tex, speedups, table_md, table_tex


STATUSES = ("failed", "skipped", "unreadable", "interrupted")  # of the jobs without metrics in the tables


def jobs_md(jobs: list[Job]) -> str:
    lines = []
    for status in STATUSES:
        sel = [j for j in jobs if j.status == status]
        if sel:
            lines += [f"## {status.capitalize()} jobs ({len(sel)})", ""] + [f"- {j.describe()}" for j in sel] + [""]
    return "\n".join(lines)


def write_csv(path: Path, agg: dict) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "dataset", "metric", "mean", "std", "n", "experiment", "variant"])
        for (e, m, v, d, k) in sorted(agg, key=lambda x: tuple("" if y is None else str(y) for y in x)):
            c = agg[(e, m, v, d, k)]
            w.writerow([m, d, k, repr(c.mean), repr(c.std), c.n, e, "" if v is None else v])


def read_csv(path: Path) -> dict[tuple, Cell]:
    """The cells of a results.csv written by :func:`write_csv`, keyed as :func:`aggregate` keys them; another
    file (other columns, not text) is a ValueError naming it."""
    try:
        with open(path, newline="") as f:
            return {(r["experiment"], r["model"], r["variant"] or None, r["dataset"], r["metric"]):
                    Cell(float(r["mean"]), float(r["std"]), int(r["n"])) for r in csv.DictReader(f)}
    except (KeyError, ValueError, TypeError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
        problem = f"it has no column {e}" if isinstance(e, KeyError) else " ".join(str(e).split())[:120]
        raise ValueError(f"{path} is not a results.csv written by mnp.tools.report ({problem}); move it away or "
                         "leave out --update") from None


def updated(previous: dict[tuple, Cell], new: dict[tuple, Cell]) -> dict[tuple, Cell]:
    """``previous`` with every (experiment, model, variant, dataset) group that ``new`` has replaced whole."""
    groups = {key[:4] for key in new}
    return {**{k: c for k, c in previous.items() if k[:4] not in groups}, **new}


def report(dirs: list[str | Path], out: str | Path, paper: bool = False, plots: bool = True,
           models: list[str] | None = None, seeds: list[int] | None = None, relabel: bool = False,
           update: bool = False) -> dict:
    """Write results.md/.tex/.csv (and plots) for the runs under ``dirs``; returns what was found.
    ``models`` / ``seeds`` keep only those runs (a switch against the defaults on the same seeds);
    ``relabel``: label runs by today's defaults (:mod:`mnp.tools.relabel`); ``update``: the runs' groups
    (experiment, model, variant, dataset) replace theirs in ``out``'s results.csv and the other rows stay
    (re-running some models' jobs without the run directories of the rest)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs, jobs = load(dirs, relabel=relabel)
    runs = [r for r in runs if (models is None or r.model in models) and (seeds is None or r.seed in seeds)]
    agg = aggregate(runs)
    if update and (out / "results.csv").is_file():
        agg = updated(read_csv(out / "results.csv"), agg)
    kept = f", with the rows of {len({k[:4] for k in agg} - {(r.experiment, r.model, r.variant, r.dataset) for r in runs})} " \
        "other groups kept from the previous results.csv" if update else ""
    md = [f"# Results ({len(runs)} runs{kept}"
          + (f", {len(jobs)} failed, skipped, unreadable or interrupted jobs" if jobs else "") + ")", ""]
    tex = ["% Generated by python -m mnp.tools.report; needs \\usepackage{booktabs,graphicx}."]
    speed = {}
    number = 0
    for e in sorted({key[0] for key in agg}):
        md += [f"## Experiment `{e}`", ""]
        tex.append(f"% ---- experiment {e}")
        for t in experiment_tables(agg, e):
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
    write_csv(out / "results.csv", agg)
    comparison = []
    if paper:
        comparison = paper_comparison(agg)
        md += [paper_md(comparison, speed), ""]
        with open(out / "paper_comparison.csv", "w", newline="") as f:
            fields = ["experiment", "model", "dataset", "metric", "ours", "std", "n", "paper", "diff"]
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(comparison)
    written = all_plots(runs, out / "plots") if plots else []
    if written:
        md += ["## Plots", ""] + [f"- [{p.name}](plots/{p.name})" for p in written] + [""]
    (out / "results.md").write_text("\n".join(md).rstrip() + "\n")
    (out / "results.tex").write_text("\n".join(tex).rstrip() + "\n")
    return {"runs": runs, "jobs": jobs, "aggregate": agg, "plots": written, "paper": comparison}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.tools.report", description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="sweep directories (e.g. logs/paper_main/multiruns)")
    ap.add_argument("--out", help="output directory for results.md/.tex/.csv and plots/ (default: <first dir>/report)")
    ap.add_argument("--paper", action="store_true", help="add a comparison with the paper's numbers (docs/method.md §7)")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    ap.add_argument("--models", nargs="+", help="only these models' runs")
    ap.add_argument("--seeds", nargs="+", type=int, help="only these seeds' runs")
    ap.add_argument("--update", action="store_true",
                    help="replace only the groups (experiment, model, variant, dataset) of these runs in --out's "
                         "results.csv, keeping its other rows (a partial re-run)")
    ap.add_argument("--relabel", action="store_true",
                    help="label runs by today's defaults: variant = where the saved config differs from them, "
                         "experiment = the directory that holds the run (mnp.tools.relabel)")
    ap.add_argument("--wandb-project", metavar="NAME",
                    help="also log the aggregate table to this wandb project as a run of its own (job_type=report; "
                         "offline under <out>/wandb unless WANDB_MODE=online; mnp.tools.report_wandb)")
    args = ap.parse_args(argv)
    args.out = args.out or str(Path(args.dirs[0]) / "report")  # beside the runs, not in the repository's results/
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        res = report(args.dirs, args.out, paper=args.paper, plots=not args.no_plots, models=args.models, seeds=args.seeds,
                     relabel=args.relabel, update=args.update)
        if args.wandb_project:
            from mnp.tools.report_wandb import push
            print(f"wandb run: {push(res['aggregate'], args.out, args.wandb_project, args.dirs)}")
    except (OSError, ValueError) as e:  # a missing directory, an --out below a file, a foreign results.csv
        print(f"error: {e}")
        return 1
    counts = ", ".join(f"{sum(j.status == s for j in res['jobs'])} {s}" for s in STATUSES)
    print(f"{len(res['runs'])} runs, {counts} -> {Path(args.out) / 'results.md'}")
    for j in res["jobs"]:
        print(f"  {j.status}: {j.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
