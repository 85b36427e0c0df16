"""Accuracy against the noise level σ for every model, per dataset, and each model's difference from MGP.

``python -m mnp.tools.figures.noise_figure`` (also run by ``python -m mnp.tools.docgen``) reads the committed
``results/paper_main/results.csv`` and ``runs.csv`` and writes ``figures/noise_curves.json`` (the curves),
``figures/noise_differences.json`` (the differences) and ``figures/noise_curves.png`` (per dataset, the curves above
and the differences below: a gap of 1-3 points cannot be read on a 0-100 axis).

The reference line ("noised views removed"): the accuracy of a model given only the views that the noise protocol
leaves clean, ``missing/acc_subsets_mean`` (each noised subset removed, averaged over the subsets as the noise
protocol averages them, docs/method.md §5), the best over the models, named in the legend. It is what those views
alone give, not an upper bound: at small σ the noised views still help and a model sits above it.

The differences: per σ, the mean over the seeds both runs have of (model − MGP) noisy accuracy, in points, with its
paired 95 % t-interval as a band (a paired test's interval, so a band clear of 0 is a difference the seeds show).

Each model's curve carries a shaded 95 % t-interval band (``ci95_low``/``ci95_high`` of results.csv) where its
cells are derived from per-run records (``source=runs``); a legacy aggregate has no interval and no band (marked †).
Where MNP logged per-view metrics (docs/method.md §5.5), its per-view curves are dashed: ``view/acc@v<k>@<σ>``,
view k's own prediction when view k is the noised one, mean over the runs.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from mnp.tools.report.report_records import read_runs
from mnp.tools.report.report_runs import read_results
from mnp.tools.report.stats import t_interval

ROOT = Path(__file__).resolve().parents[3]
DATASETS = ["handwritten", "cub", "pie", "scene15"]
MODELS = ["mnp", "mnp_official", "mcd", "de_ef", "sngp", "etp", "de_lf", "tmc", "mgp"]
CEILING = "missing/acc_subsets_mean"
SIGMA = re.compile(r"^noise/acc@(.+)$")
VIEW_SIGMA = re.compile(r"^view/acc@v(\d+)@(.+)$")
VIEW_COLORS = ("navy", "teal", "darkgoldenrod", "crimson")


def views(results: dict, model: str, dataset: str) -> dict:
    """{view k: {"sigma", "acc", "n"}} of ``view/acc@v<k>@<σ>`` cells (default variant), accuracies in %."""
    out: dict = {}
    for (m, v, d, key), c in results.items():
        if m == model and v == "" and d == dataset and (s := VIEW_SIGMA.match(key)):
            out.setdefault(s.group(1), []).append((float(s.group(2)), c))
    return {
        k: {
            "sigma": [p[0] for p in pts],
            "acc": [round(100 * p[1]["mean"], 4) for p in pts],
            "n": min(p[1]["n"] for p in pts),
        }
        for k, pts in ((k, sorted(out[k], key=lambda p: p[0])) for k in sorted(out, key=int))
    }


def series(pts: list[tuple[float, dict]], name: str, scale: float) -> dict:
    """{"sigma", ``name``, "std", "n", "band"} of (σ, :func:`mnp.tools.report.report_runs.read_results` cell) points, the
    values times ``scale``; ``band`` is {"low", "high"} (the cells' 95 % intervals) or None if a cell has none."""
    return {
        "sigma": [p[0] for p in pts],
        name: [round(scale * p[1]["mean"], 4) for p in pts],
        "std": [round(scale * p[1]["std"], 4) for p in pts],
        "n": min(p[1]["n"] for p in pts),
        "band": None
        if any(p[1]["ci"] is None for p in pts)
        else {
            "low": [round(scale * p[1]["ci"][0], 4) for p in pts],
            "high": [round(scale * p[1]["ci"][1], 4) for p in pts],
        },
    }


def curves(results: dict) -> dict:
    """{dataset: {"models": {model: {"sigma", "acc", "std", "n", "band"}}, "ceiling": {"acc", "model"} or None,
    "views": {k: {"sigma", "acc", "n"}}}} from :func:`mnp.tools.report.report_runs.read_results` rows (default variant
    only), accuracies in %; ``band`` is {"low", "high"} (the cells' 95 % intervals) or None if a cell has none."""
    out = {}
    for d in DATASETS:
        models, ceiling = {}, None
        for m in MODELS:
            pts = sorted(
                (float(s.group(1)), c)
                for (mm, v, dd, k), c in results.items()
                if mm == m and v == "" and dd == d and (s := SIGMA.match(k))
            )
            if pts:
                models[m] = series(pts, "acc", 100)
            c = results.get((m, "", d, CEILING))
            if c is not None and (ceiling is None or 100 * c["mean"] > ceiling["acc"]):
                ceiling = {"acc": round(100 * c["mean"], 4), "model": m, "n": c["n"]}
        if models:
            out[d] = {"models": models, "ceiling": ceiling, "views": views(results, "mnp", d)}
    return out


REFERENCE = "mgp"  # the differences' reference: the strongest baseline of the paper's noisy-view claims


def differences(records: dict, reference: str = REFERENCE) -> dict:
    """{dataset: {model: {"sigma", "diff", "low", "high", "n"}}}: per σ, the mean over shared seeds of (model −
    ``reference``) ``noise/acc@σ`` in points and its paired 95 % t-interval (None with fewer than 2 seeds), from
    runs.csv's records (paper_main, default variants)."""
    out: dict = {}
    for d in DATASETS:
        runs = {(m, s): r for (e, m, dd, v, s), r in records.items() if e == "paper_main" and dd == d and v is None}
        ref = {s: r for (m, s), r in runs.items() if m == reference}
        panel = {}
        for m in MODELS:
            if m == reference:
                continue
            keys = {k for (mm, _), r in runs.items() if mm == m for k in r if SIGMA.match(k)}
            pts = []
            for key in sorted(keys, key=lambda k: float(SIGMA.match(k).group(1))):
                seeds = sorted(s for (mm, s), r in runs.items() if mm == m and key in r and key in ref.get(s, {}))
                diffs = [100 * (runs[(m, s)][key] - ref[s][key]) for s in seeds]
                if diffs:
                    pts.append(
                        (float(SIGMA.match(key).group(1)), sum(diffs) / len(diffs), t_interval(diffs), len(diffs))
                    )
            if pts:
                panel[m] = {
                    "sigma": [p[0] for p in pts],
                    "diff": [round(p[1], 4) for p in pts],
                    "low": [None if p[2] is None else round(p[2][0], 4) for p in pts],
                    "high": [None if p[2] is None else round(p[2][1], 4) for p in pts],
                    "n": min(p[3] for p in pts),
                }
        if panel:
            out[d] = panel
    return out


def plot(data: dict, path: Path, diffs: dict | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mnp.tools.report.report_runs import dataset_label, model_label

    rows = (len(data) + 1) // 2
    fig = plt.figure(figsize=(10, 9.5 * rows))
    grid = fig.add_gridspec(2 * rows, 2, height_ratios=[2.2, 2.2] * rows, hspace=0.25, bottom=0.1, top=0.97)
    handles: dict = {}  # one legend for the figure: label -> line
    for i, (d, panel) in enumerate(data.items()):
        r, col = divmod(i, 2)
        ax, below = fig.add_subplot(grid[2 * r, col]), fig.add_subplot(grid[2 * r + 1, col])
        legacy = set()
        for i, (m, c) in enumerate(panel["models"].items()):
            mnp, color = m == "mnp", "k" if m == "mnp" else f"C{i}"
            if c["band"] is None:
                legacy.add(c["n"])
            ax.plot(
                c["sigma"],
                c["acc"],
                label=model_label(m) + (" †" if c["band"] is None else ""),
                color=color,
                lw=2.2 if mnp else 1.0,
                marker="o" if mnp else ".",
                ms=4,
                zorder=3 if mnp else 2,
            )
            if c["band"] is not None:
                ax.fill_between(
                    c["sigma"], c["band"]["low"], c["band"]["high"], color=color, alpha=0.15, lw=0, zorder=1
                )
        for j, (k, c) in enumerate(panel.get("views", {}).items()):
            ax.plot(
                c["sigma"],
                c["acc"],
                ls="--",
                lw=1.1,
                color=VIEW_COLORS[j % len(VIEW_COLORS)],
                marker="x",
                ms=3,
                zorder=3,
                label=f"MNP view {k} alone, view {k} noised",
            )
        if legacy:
            n = "/".join(str(n) for n in sorted(legacy))
            ax.plot([], [], ls="none", label=f"† no band: legacy {n}-seed aggregate")
        if ceil := panel["ceiling"]:
            ax.axhline(
                ceil["acc"],
                color="0.3",
                ls=":",
                lw=1.4,
                label=f"noised views removed ({model_label(ceil['model'])}; not an upper bound)",
            )
        ax.set(xscale="log", ylabel="test accuracy %", title=dataset_label(d))
        ax.grid(alpha=0.3)
        draw_differences(below, (diffs or {}).get(d, {}), list(panel["models"]), model_label)
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.savefig(path, dpi=110, metadata={"Software": None}, bbox_inches="tight")  # the legend's long labels inside
    plt.close(fig)
    return path


def draw_differences(ax, panel: dict, order: list[str], model_label) -> None:
    """Each model's noisy accuracy minus MGP's, in points, with its paired 95 % band; 0 is MGP."""
    for i, m in enumerate(order):
        if m not in panel:
            continue
        c, mnp = panel[m], m == "mnp"
        color = "k" if mnp else f"C{i}"
        ax.plot(c["sigma"], c["diff"], color=color, lw=2.2 if mnp else 1.0, marker="o" if mnp else ".", ms=4)
        if None not in c["low"]:
            ax.fill_between(c["sigma"], c["low"], c["high"], color=color, alpha=0.15 if mnp else 0.07, lw=0)
    ax.axhline(0, color="0.3", lw=1)
    near = [abs(v) for m in ("mnp", "mnp_official") if m in panel for k in ("low", "high", "diff") for v in panel[m][k]]
    span = max(3.0, 1.3 * max((v for v in near if v is not None), default=3.0))
    ax.set_ylim(-span, span)  # the MNP variants' scale: models that fall further leave the axis
    ax.set(xscale="log", xlabel="noise σ on ⌊M/2⌋ views", ylabel=f"minus {model_label(REFERENCE)}, points")
    ax.set_title("difference from MGP (paired 95 % bands; lines off the axis fell further)", fontsize=8)
    ax.grid(alpha=0.3)


def write(results_csv: Path = ROOT / "results" / "paper_main" / "results.csv", out: Path = ROOT / "figures") -> dict:
    """Write noise_curves.json and .png from ``results_csv``; returns the data."""
    data = curves(read_results(results_csv))
    diffs = differences(read_runs(results_csv.with_name("runs.csv")))
    out.mkdir(parents=True, exist_ok=True)
    (out / "noise_curves.json").write_text(json.dumps(data, indent=1) + "\n")
    (out / "noise_differences.json").write_text(json.dumps(diffs, indent=1) + "\n")
    plot(data, out / "noise_curves.png", diffs)
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.tools.figures.noise_figure", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "results" / "paper_main" / "results.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = ap.parse_args(argv)
    write(args.results, args.out)
    print(f"wrote {args.out / 'noise_curves.json'}, noise_differences.json and noise_curves.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
