"""Accuracy against the noise level σ for every model, per dataset, with the information ceiling.

``python -m mnp.tools.noise_figure`` (also run by ``python -m mnp.tools.docgen``) reads the committed
``results/paper_main/results.csv`` and writes ``figures/noise_curves.json`` (the plotted numbers) and
``figures/noise_curves.png`` (one panel per dataset).

The ceiling: once noise has destroyed the noised views, the best any model can do is predict from the
other views. Each run's missing-view protocol measures exactly that, ``missing/acc_subsets_mean``: the
accuracy with each noised subset removed, averaged over the subsets as the noise protocol averages them
(docs/method.md §5). The line is the best of these over the models that report it, named in the legend.

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

from mnp.tools.report_runs import read_results

ROOT = Path(__file__).resolve().parents[2]
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


def curves(results: dict) -> dict:
    """{dataset: {"models": {model: {"sigma", "acc", "std", "n", "band"}}, "ceiling": {"acc", "model"} or None,
    "views": {k: {"sigma", "acc", "n"}}}} from :func:`mnp.tools.report_runs.read_results` rows (default variant
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
                models[m] = {
                    "sigma": [p[0] for p in pts],
                    "acc": [round(100 * p[1]["mean"], 4) for p in pts],
                    "std": [round(100 * p[1]["std"], 4) for p in pts],
                    "n": min(p[1]["n"] for p in pts),
                    "band": None
                    if any(p[1]["ci"] is None for p in pts)
                    else {
                        "low": [round(100 * p[1]["ci"][0], 4) for p in pts],
                        "high": [round(100 * p[1]["ci"][1], 4) for p in pts],
                    },
                }
            c = results.get((m, "", d, CEILING))
            if c is not None and (ceiling is None or 100 * c["mean"] > ceiling["acc"]):
                ceiling = {"acc": round(100 * c["mean"], 4), "model": m, "n": c["n"]}
        if models:
            out[d] = {"models": models, "ceiling": ceiling, "views": views(results, "mnp", d)}
    return out


def plot(data: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mnp.tools.report_runs import dataset_label, model_label

    rows = (len(data) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(10, 5.2 * rows), squeeze=False)
    for ax in axes.flat[len(data) :]:
        ax.set_visible(False)
    for ax, (d, panel) in zip(axes.flat, data.items()):
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
                label=f"ceiling: noised views removed ({model_label(ceil['model'])})",
            )
        ax.set(xscale="log", xlabel="noise σ on ⌊M/2⌋ views", ylabel="test accuracy %", title=dataset_label(d))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def write(results_csv: Path = ROOT / "results" / "paper_main" / "results.csv", out: Path = ROOT / "figures") -> dict:
    """Write noise_curves.json and .png from ``results_csv``; returns the data."""
    data = curves(read_results(results_csv))
    out.mkdir(parents=True, exist_ok=True)
    (out / "noise_curves.json").write_text(json.dumps(data, indent=1) + "\n")
    plot(data, out / "noise_curves.png")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mnp.tools.noise_figure", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "results" / "paper_main" / "results.csv")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = ap.parse_args(argv)
    write(args.results, args.out)
    print(f"wrote {args.out / 'noise_curves.json'} and {args.out / 'noise_curves.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
