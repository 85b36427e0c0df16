"""Results tables and plots of finished sweeps: ``python -m mnp.report <sweep_dir>... --out <dir>``.

Reads every ``metrics.json`` under the given directories (plus the run's ``config.yaml`` for the
ablation ``variant``), lists the failed (``failed.json``) and skipped (``skipped.json``) jobs, and
writes, per experiment, the paper's tables as mean ± std over seeds (sample std, ddof = 1) with
the number of seeds per cell, the best value of each column in bold and the second underlined:

* Table 1: test accuracy (%), Table 2: ECE, Table 3: accuracy averaged over the noise levels (%);
* Table 4: accuracy, ECE and OOD AUROC per OOD set (one table per dataset with OOD sets);
* Table 5: training time per epoch, test time, and the speed-up of MNP over MGP.

Outputs: ``results.md``, ``results.tex``, ``results.csv`` (one row per experiment × model ×
variant × dataset × metric), with ``--paper`` also ``paper_comparison.csv`` and a comparison
section (SPEC §7), and PNG plots under ``plots/`` (see :mod:`mnp.plots`).
"""
from __future__ import annotations

import argparse
import csv
import json
import logging
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np
from omegaconf import OmegaConf

log = logging.getLogger(__name__)

MODEL_ORDER = ["mcd", "de_ef", "sngp", "etp", "de_lf", "tmc", "mgp", "mnp", "mnp_official", "mlp"]
MODEL_NAMES = {"mcd": "MCD", "de_ef": "DE (EF)", "sngp": "SNGP", "etp": "ETP", "de_lf": "DE (LF)", "tmc": "TMC",
               "mgp": "MGP", "mnp": "MNP", "mnp_official": "MNP (official)", "mlp": "MLP"}
DATASET_ORDER = ["handwritten", "cub", "pie", "caltech101", "scene15", "hmdb", "cifar10c", "digits_c", "synthetic",
                 "custom"]
DATASET_NAMES = {"handwritten": "Handwritten", "cub": "CUB", "pie": "PIE", "caltech101": "Caltech101",
                 "scene15": "Scene15", "hmdb": "HMDB", "cifar10c": "CIFAR10-C", "digits_c": "Digits-C",
                 "synthetic": "Synthetic", "custom": "Custom"}
OOD_ORDER = ["svhn", "cifar100", "heldout"]
OOD_NAMES = {"svhn": "SVHN", "cifar100": "CIFAR100", "heldout": "held-out classes"}
NON_METRICS = {"seed", "epochs"}


# ---------------------------------------------------------------------------- loading
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
    """A failed or skipped job, from its failed.json / skipped.json."""

    path: Path
    status: str
    record: dict

    def describe(self) -> str:
        r = self.record
        what = r.get("message") or r.get("reason") or ""
        err = f"{r['error']}: " if r.get("error") else ""
        return f"{r.get('model')} / {r.get('dataset')} / seed {r.get('seed')}: {err}{what} ({self.path.parent})"


def _read_config(run_dir: Path) -> dict:
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    return OmegaConf.to_container(OmegaConf.load(path)) or {}


def load(dirs: Iterable[str | Path]) -> tuple[list[Run], list[Job]]:
    """Every run (metrics.json) and every failed/skipped job under ``dirs``.

    ``metrics.json`` written by ``evaluate.py`` (it has a ``checkpoint`` key) is not a sweep job
    and is left out. A job found twice (the same experiment, model, variant, dataset and seed)
    counts once: the most recent file wins.
    """
    runs: dict[tuple, Run] = {}
    jobs: list[Job] = []
    for d in dirs:
        d = Path(d)
        if not d.is_dir():
            raise FileNotFoundError(f"{d} is not a directory")
        for mpath in sorted(d.rglob("metrics.json")):
            m = json.loads(mpath.read_text())
            if "checkpoint" in m or "model" not in m or "dataset" not in m:
                continue
            cfg = _read_config(mpath.parent)
            variant = cfg.get("variant")
            run = Run(mpath.parent, str(m.get("experiment") or cfg.get("experiment_name") or "default"),
                      str(m["model"]), str(m["dataset"]), int(m.get("seed", 0)),
                      None if variant is None else str(variant), m, cfg)
            key = (run.experiment, run.model, run.variant, run.dataset, run.seed)
            if key in runs:
                old = runs[key]
                log.warning("duplicate run %s and %s; keeping the newer", old.path, run.path)
                if old.path.joinpath("metrics.json").stat().st_mtime > mpath.stat().st_mtime:
                    continue
            runs[key] = run
        for status in ("failed", "skipped"):
            for p in sorted(d.rglob(f"{status}.json")):
                if not (p.parent / "metrics.json").exists():
                    jobs.append(Job(p, status, json.loads(p.read_text())))
    return list(runs.values()), jobs


# ---------------------------------------------------------------------------- aggregation
@dataclass(frozen=True)
class Cell:
    mean: float
    std: float
    n: int


def summarise(values: list[float]) -> Cell:
    """Mean and sample standard deviation (ddof = 1; 0 for a single seed)."""
    a = np.asarray(values, dtype=float)
    return Cell(float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0, len(a))


def aggregate(runs: list[Run]) -> dict[tuple, Cell]:
    """(experiment, model, variant, dataset, metric) -> Cell over seeds, for every numeric metric."""
    values: dict[tuple, list[float]] = defaultdict(list)
    for r in runs:
        for k, v in r.metrics.items():
            if k in NON_METRICS or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                continue
            values[(r.experiment, r.model, r.variant, r.dataset, k)].append(float(v))
    return {k: summarise(v) for k, v in values.items()}


def _order(items: Iterable[str], order: list[str]) -> list[str]:
    items = set(items)
    return [x for x in order if x in items] + sorted(items - set(order))


def order_rows(rows: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    rows = set(rows)
    models = _order({m for m, _ in rows}, MODEL_ORDER)

    def vkey(v):
        try:
            return (0, float(v), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(v))
    return [(m, v) for m in models for v in sorted({v for mm, v in rows if mm == m}, key=vkey)]


def row_label(row: tuple[str, str | None]) -> str:
    model, variant = row
    name = MODEL_NAMES.get(model, model)
    return name if variant is None else f"{name} ({variant})"


def dataset_label(d: str) -> str:
    return DATASET_NAMES.get(d, d)


# ---------------------------------------------------------------------------- tables
@dataclass(frozen=True)
class Metric:
    key: str
    higher_better: bool
    scale: float = 1.0
    digits: int = 3

    def fmt(self, x: float) -> str:
        return f"{x * self.scale:.{self.digits}f}"


ACC = Metric("test/acc", True, 100.0, 2)
ECE = Metric("test/ece", False)
NOISY_ACC = Metric("noise/acc_mean", True, 100.0, 2)
TRAIN_TIME = Metric("time/train_epoch_s", False, 1.0, 3)
TEST_TIME = Metric("time/test_s", False, 1.0, 3)


def auroc_metric(name: str) -> Metric:
    return Metric(f"ood/{name}/auroc", True)


@dataclass
class Table:
    """Rows × columns of Cells; each column has its own metric (and so its own 'best')."""

    number: str
    title: str
    label: str
    rows: list[tuple[str, str | None]]
    columns: list[tuple[str, str, Metric]]  # (header, dataset, metric)
    cells: dict[tuple[int, int], Cell]

    def ranks(self) -> dict[tuple[int, int], int]:
        """1 for the best value of each column, 2 for the second (ties share a rank, on shown digits)."""
        out = {}
        for j, (_, _, metric) in enumerate(self.columns):
            shown = {i: float(metric.fmt(c.mean)) for (i, jj), c in self.cells.items() if jj == j}
            distinct = sorted(set(shown.values()), reverse=metric.higher_better)
            for i, v in shown.items():
                rank = distinct.index(v) + 1
                if rank <= 2:
                    out[(i, j)] = rank
        return out


def make_table(number: str, title: str, label: str, agg: dict, experiment: str,
               columns: list[tuple[str, str, Metric]]) -> Table | None:
    rows = order_rows({(m, v) for (e, m, v, d, k) in agg if e == experiment
                       and any(d == cd and k == cm.key for _, cd, cm in columns)})
    cells = {}
    for i, (m, v) in enumerate(rows):
        for j, (_, d, metric) in enumerate(columns):
            c = agg.get((experiment, m, v, d, metric.key))
            if c is not None:
                cells[(i, j)] = c
    columns_used = sorted({j for _, j in cells})
    if not cells:
        return None
    columns = [columns[j] for j in columns_used]
    cells = {(i, columns_used.index(j)): c for (i, j), c in cells.items()}
    return Table(number, title, label, rows, columns, cells)


def experiment_tables(agg: dict, experiment: str) -> list[Table]:
    """The paper's Tables 1-5 for one experiment (those with data)."""
    datasets = _order({d for (e, _, _, d, _) in agg if e == experiment}, DATASET_ORDER)
    per_ds = lambda metric: [(dataset_label(d), d, metric) for d in datasets]  # noqa: E731
    tables = [
        make_table("1", "Test accuracy (%) ↑", "accuracy", agg, experiment, per_ds(ACC)),
        make_table("2", "Test ECE ↓", "ece", agg, experiment, per_ds(ECE)),
        make_table("3", "Test accuracy (%) averaged over the 10 noise levels ↑", "noisy-accuracy", agg, experiment,
                   per_ds(NOISY_ACC)),
    ]
    for d in datasets:
        oods = _order({k.split("/")[1] for (e, _, _, dd, k) in agg
                       if e == experiment and dd == d and k.startswith("ood/") and k.endswith("/auroc")}, OOD_ORDER)
        if oods:
            cols = [("Accuracy (%) ↑", d, ACC), ("ECE ↓", d, ECE)]
            cols += [(f"AUROC {OOD_NAMES.get(o, o)} ↑", d, auroc_metric(o)) for o in oods]
            tables.append(make_table("4", f"{dataset_label(d)}: accuracy, ECE and OOD AUROC", f"ood-{d}", agg,
                                     experiment, cols))
    tables += [
        make_table("5a", "Training time per epoch (s) ↓", "train-time", agg, experiment, per_ds(TRAIN_TIME)),
        make_table("5b", "Test time, one pass over the test set (s) ↓", "test-time", agg, experiment,
                   per_ds(TEST_TIME)),
    ]
    return [t for t in tables if t is not None]


def speedups(agg: dict, experiment: str, fast: str = "mnp", slow: str = "mgp") -> dict[str, dict[str, float]]:
    """Table 5: mean time of ``slow`` / mean time of ``fast`` per dataset (train and test)."""
    out: dict[str, dict[str, float]] = {}
    for (e, m, v, d, k) in agg:
        if e != experiment or m != fast or v is not None or k not in (TRAIN_TIME.key, TEST_TIME.key):
            continue
        ref = agg.get((e, slow, None, d, k))
        mine = agg[(e, m, v, d, k)]
        if ref is not None and mine.mean > 0:
            out.setdefault(d, {})["train" if k == TRAIN_TIME.key else "test"] = ref.mean / mine.mean
    return {d: out[d] for d in _order(out, DATASET_ORDER)}


# ---------------------------------------------------------------------------- rendering
def _cell_text(c: Cell, metric: Metric, pm: str) -> str:
    return f"{metric.fmt(c.mean)}{pm}{metric.fmt(c.std)}"


def table_md(t: Table) -> str:
    ranks = t.ranks()
    lines = [f"**Table {t.number}.** {t.title} (mean ± std over seeds; (n) = seeds)", "",
             "| Method | " + " | ".join(h for h, _, _ in t.columns) + " |",
             "|---|" + "---|" * len(t.columns)]
    for i, row in enumerate(t.rows):
        cells = []
        for j, (_, _, metric) in enumerate(t.columns):
            c = t.cells.get((i, j))
            if c is None:
                cells.append("–")
                continue
            s = _cell_text(c, metric, " ± ")
            s = {1: f"**{s}**", 2: f"<u>{s}</u>"}.get(ranks.get((i, j)), s)
            cells.append(f"{s} ({c.n})")
        lines.append(f"| {row_label(row)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#"),
                 ("↑", r"$\uparrow$"), ("↓", r"$\downarrow$"), ("×", r"$\times$")):
        s = s.replace(a, b)
    return s


def table_tex(t: Table, experiment: str) -> str:
    ranks = t.ranks()
    lines = [r"\begin{table}[!h]", r"\centering",
             rf"\caption{{{_tex_escape(t.title)} Mean $\pm$ std over seeds, number of seeds in parentheses.}}",
             rf"\label{{table:{_tex_escape(experiment)}-{t.label}}}",
             r"\resizebox{\textwidth}{!}{\begin{tabular}{l" + "c" * len(t.columns) + "}", r"\toprule",
             "Method & " + " & ".join(_tex_escape(h) for h, _, _ in t.columns) + r" \\", r"\midrule"]
    for i, row in enumerate(t.rows):
        cells = []
        for j, (_, _, metric) in enumerate(t.columns):
            c = t.cells.get((i, j))
            if c is None:
                cells.append("--")
                continue
            s = _cell_text(c, metric, r"$\pm$")
            s = {1: rf"\textbf{{{s}}}", 2: rf"\underline{{{s}}}"}.get(ranks.get((i, j)), s)
            cells.append(rf"{s}\,{{\scriptsize({c.n})}}")
        lines.append(f"{_tex_escape(row_label(row))} & " + " & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", r"\end{table}"]
    return "\n".join(lines)


def speedup_md(s: dict[str, dict[str, float]]) -> str:
    lines = ["**Table 5.** Speed-up of MNP over MGP (MGP time / MNP time, ratio of the seed means)", "",
             "| Dataset | Training | Testing |", "|---|---|---|"]
    for d, v in s.items():
        cells = [f"{v[k]:.2f}" if k in v else "–" for k in ("train", "test")]
        lines.append(f"| {dataset_label(d)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup_tex(s: dict[str, dict[str, float]], experiment: str) -> str:
    lines = [r"\begin{table}[!h]", r"\centering",
             r"\caption{Speed-up ($\times$) of MNP over MGP: ratio of wall-clock time per epoch (MGP / MNP).}",
             rf"\label{{table:{_tex_escape(experiment)}-speed-up}}", r"\begin{tabular}{lcc}", r"\toprule",
             r"Dataset & Training & Testing \\", r"\midrule"]
    for d, v in s.items():
        lines.append(f"{_tex_escape(dataset_label(d))} & " + " & ".join(f"{v[k]:.2f}" if k in v else "--"
                                                                      for k in ("train", "test")) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- paper (SPEC §7)
_PAPER_MAIN = {  # model -> dataset -> (accuracy %, ECE, noisy accuracy %)
    "mcd": [(99.25, .009, 82.15), (92.33, .069, 76.08), (91.32, .299, 64.65), (92.95, .017, 73.45),
            (71.75, .181, 48.97), (71.68, .388, 42.63)],
    "de_ef": [(99.20, .007, 82.16), (93.16, .054, 76.94), (91.76, .269, 65.53), (92.99, .036, 73.99),
              (72.70, .089, 49.45), (71.67, .095, 41.92)],
    "sngp": [(98.85, .023, 72.46), (89.50, .200, 61.27), (87.06, .852, 56.52), (91.24, .442, 56.57),
             (64.68, .111, 38.19), (67.65, .227, 37.49)],
    "etp": [(98.75, .020, 75.85), (92.33, .051, 73.99), (91.76, .287, 62.64), (92.08, .096, 66.62),
            (72.58, .045, 46.17), (67.43, .100, 38.28)],
    "de_lf": [(99.25, .292, 95.63), (92.33, .270, 76.16), (87.21, .567, 67.69), (92.97, .023, 81.85),
              (67.05, .319, 50.13), (69.98, .270, 43.01)],
    "tmc": [(98.10, .013, 82.44), (91.17, .141, 74.19), (91.18, .072, 62.18), (91.63, .068, 71.77),
            (67.68, .180, 42.52), (65.17, .594, 36.61)],
    "mgp": [(98.60, .006, 97.66), (92.33, .038, 85.48), (92.06, .079, 90.97), (93.00, .009, 92.68),
            (70.00, .062, 65.74), (72.30, .036, 67.02)],
    "mnp": [(99.50, .005, 98.58), (93.50, .049, 88.96), (95.00, .040, 93.80), (93.46, .017, 92.83),
            (77.90, .038, 74.14), (71.97, .028, 64.11)],
}
_PAPER_CIFAR = {  # model -> (accuracy %, ECE, AUROC SVHN, AUROC CIFAR100)
    "mcd": (74.76, .013, .788, .725), "de_ef": (72.95, .154, .769, .721), "sngp": (61.51, .020, .753, .705),
    "etp": (74.42, .032, .780, .695), "de_lf": (75.40, .095, .722, .693), "tmc": (72.42, .108, .681, .675),
    "mgp": (73.30, .018, .803, .748), "mnp": (74.92, .011, .872, .786),
}
PAPER_SPEEDUP = {"handwritten": (1.62, 2.66), "cub": (1.41, 2.12), "pie": (2.88, 5.37), "caltech101": (1.56, 3.30),
                 "scene15": (1.89, 2.63), "hmdb": (2.03, 3.27), "cifar10c": (1.17, 2.16)}


def paper_values() -> dict[tuple[str, str, str], float]:
    """(model, dataset, metrics.json key) -> the paper's mean, in metrics.json units (fractions)."""
    out = {}
    for model, rows in _PAPER_MAIN.items():
        for d, (acc, e, noisy) in zip(DATASET_ORDER[:6], rows):
            out[(model, d, ACC.key)], out[(model, d, ECE.key)] = acc / 100, e
            out[(model, d, NOISY_ACC.key)] = noisy / 100
    for model, (acc, e, svhn, c100) in _PAPER_CIFAR.items():
        out[(model, "cifar10c", ACC.key)], out[(model, "cifar10c", ECE.key)] = acc / 100, e
        out[(model, "cifar10c", "ood/svhn/auroc")], out[(model, "cifar10c", "ood/cifar100/auroc")] = svhn, c100
    return out


def _metric_for(key: str) -> Metric:
    return {m.key: m for m in (ACC, ECE, NOISY_ACC)}.get(key) or Metric(key, True)


def paper_comparison(agg: dict) -> list[dict]:
    """Rows (experiment, model, dataset, metric, ours, std, n, paper, diff) for every cell the paper reports."""
    paper = paper_values()
    out = []
    for (e, m, v, d, k), c in sorted(agg.items(), key=lambda kv: str(kv[0])):
        if v is None and (m, d, k) in paper:
            out.append({"experiment": e, "model": m, "dataset": d, "metric": k, "ours": c.mean, "std": c.std, "n": c.n,
                        "paper": paper[(m, d, k)], "diff": c.mean - paper[(m, d, k)]})
    return out


def paper_md(rows: list[dict], speed: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["## Comparison with the paper (SPEC §7)", "",
             "Ours (mean over seeds) / paper; Δ = ours − paper, in the table's units.", "",
             "| Experiment | Method | Dataset | Metric | Ours | Paper | Δ |", "|---|---|---|---|---|---|---|"]
    order = {m: i for i, m in enumerate(MODEL_ORDER)}
    dorder = {d: i for i, d in enumerate(DATASET_ORDER)}
    for r in sorted(rows, key=lambda r: (r["experiment"], order.get(r["model"], 99), dorder.get(r["dataset"], 99),
                                         r["metric"])):
        mt = _metric_for(r["metric"])
        lines.append(f"| {r['experiment']} | {MODEL_NAMES.get(r['model'], r['model'])} | {dataset_label(r['dataset'])} "
                     f"| {r['metric']} | {mt.fmt(r['ours'])} | {mt.fmt(r['paper'])} "
                     f"| {r['diff'] * mt.scale:+.{mt.digits}f} |")
    for e, s in speed.items():
        for d, v in s.items():
            if d in PAPER_SPEEDUP:
                for i, k in enumerate(("train", "test")):
                    if k in v:
                        p = PAPER_SPEEDUP[d][i]
                        lines.append(f"| {e} | MNP/MGP | {dataset_label(d)} | speed-up {k} | {v[k]:.2f} | {p:.2f} | "
                                     f"{v[k] - p:+.2f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
def jobs_md(jobs: list[Job]) -> str:
    if not jobs:
        return ""
    lines = []
    for status in ("failed", "skipped"):
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


def report(dirs: list[str | Path], out: str | Path, paper: bool = False, plots: bool = True) -> dict:
    """Write results.md/.tex/.csv (and plots) for the runs under ``dirs``; returns what was found."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs, jobs = load(dirs)
    agg = aggregate(runs)
    experiments = sorted({r.experiment for r in runs})
    md = [f"# Results ({len(runs)} runs" + (f", {len(jobs)} failed or skipped jobs" if jobs else "") + ")", ""]
    tex = ["% Generated by python -m mnp.report; needs \\usepackage{booktabs,graphicx}."]
    speed = {}
    for e in experiments:
        md += [f"## Experiment `{e}`", ""]
        tex.append(f"% ---- experiment {e}")
        for t in experiment_tables(agg, e):
            md += [table_md(t), ""]
            tex += [table_tex(t, e), ""]
        s = speedups(agg, e)
        if s:
            speed[e] = s
            md += [speedup_md(s), ""]
            tex += [speedup_tex(s, e), ""]
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
    written = []
    if plots:
        from mnp.plots import all_plots
        written = all_plots(runs, out / "plots")
        if written:
            md += ["## Plots", ""] + [f"- [{p.name}](plots/{p.name})" for p in written] + [""]
    (out / "results.md").write_text("\n".join(md).rstrip() + "\n")
    (out / "results.tex").write_text("\n".join(tex).rstrip() + "\n")
    return {"runs": runs, "jobs": jobs, "aggregate": agg, "plots": written, "paper": comparison}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.report", description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="sweep directories (e.g. logs/paper_main/multiruns)")
    ap.add_argument("--out", required=True, help="output directory for results.md/.tex/.csv and plots/")
    ap.add_argument("--paper", action="store_true", help="add a comparison with the paper's numbers (SPEC §7)")
    ap.add_argument("--no-plots", action="store_true", help="tables only")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        res = report(args.dirs, args.out, paper=args.paper, plots=not args.no_plots)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}")
        return 1
    n_failed = sum(j.status == "failed" for j in res["jobs"])
    n_skipped = sum(j.status == "skipped" for j in res["jobs"])
    print(f"{len(res['runs'])} runs, {n_failed} failed, {n_skipped} skipped -> {Path(args.out) / 'results.md'}")
    for j in res["jobs"]:
        print(f"  {j.status}: {j.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
