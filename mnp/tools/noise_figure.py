"""Accuracy against the noise level σ for every model, per dataset, with the information ceiling.

``python -m mnp.tools.noise_figure`` (also run by ``python -m mnp.tools.docgen``) reads the committed
``results/paper_main/results.csv`` and writes ``figures/noise_curves.json`` (the plotted numbers) and
``figures/noise_curves.png`` (one panel per dataset).

The ceiling: once noise has destroyed the noised views, the best any model can do is predict from the
other views. Each run's missing-view protocol measures exactly that, ``missing/acc_subsets_mean``: the
accuracy with each noised subset removed, averaged over the subsets as the noise protocol averages them
(docs/method.md §5). The line is the best of these over the models that report it, named in the legend.
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


def curves(results: dict) -> dict:
    """{dataset: {"models": {model: {"sigma", "acc", "std", "n"}}, "ceiling": {"acc", "model"} or None}} from
    :func:`mnp.tools.report_runs.read_results` rows (default variant only), accuracies in %."""
    out = {}
    for d in DATASETS:
        models, ceiling = {}, None
        for m in MODELS:
            pts = sorted((float(s.group(1)), c) for (mm, v, dd, k), c in results.items()
                         if mm == m and v == "" and dd == d and (s := SIGMA.match(k)))
            if pts:
                models[m] = {"sigma": [p[0] for p in pts], "acc": [round(100 * p[1]["mean"], 4) for p in pts],
                             "std": [round(100 * p[1]["std"], 4) for p in pts], "n": min(p[1]["n"] for p in pts)}
            c = results.get((m, "", d, CEILING))
            if c is not None and (ceiling is None or 100 * c["mean"] > ceiling["acc"]):
                ceiling = {"acc": round(100 * c["mean"], 4), "model": m, "n": c["n"]}
        if models:
            out[d] = {"models": models, "ceiling": ceiling}
    return out


def plot(data: dict, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mnp.tools.report_runs import dataset_label, model_label
    rows = (len(data) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(10, 3.8 * rows), squeeze=False)
    for ax in axes.flat[len(data):]:
        ax.set_visible(False)
    for ax, (d, panel) in zip(axes.flat, data.items()):
        for i, (m, c) in enumerate(panel["models"].items()):
            mnp = m == "mnp"
            ax.errorbar(c["sigma"], c["acc"], yerr=c["std"], label=model_label(m), color="k" if mnp else f"C{i}",
                        lw=2.2 if mnp else 1.0, marker="o" if mnp else ".", ms=4, capsize=2, zorder=3 if mnp else 2)
        if ceil := panel["ceiling"]:
            ax.axhline(ceil["acc"], color="0.3", ls="--", lw=1.2,
                       label=f"ceiling: noised views removed ({model_label(ceil['model'])})")
        ax.set(xscale="log", xlabel="noise σ on ⌊M/2⌋ views", ylabel="test accuracy %", title=dataset_label(d))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left", ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
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
