"""Coverage and mean size of the conformal sets against the noise level σ, beside accuracy, for every model, per
dataset (issue 47, ``conf/experiment/conformal.yaml``).

``python -m mnp.tools.figures.conformal_figure`` (also run by ``python -m mnp.tools.docgen`` when the figure differs from its
source) reads the study's report, ``results/conformal/results.csv``, and writes ``figures/conformal_curves.json``
and ``figures/conformal_curves.png``: per dataset a row of three panels, accuracy %, coverage % (with the 1 − α
line) and mean set size, each σ of ``noise/acc@<σ>``, ``conformal/noise/coverage@<σ>`` and
``conformal/noise/size@<σ>``; each model's mean over seeds with its 95 % t-interval band where its cells have one
(:func:`mnp.tools.figures.noise_figure.series`). ``clean`` holds each model's values on the clean test rows.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mnp.tools.figures.noise_figure import series
from mnp.tools.report.report_runs import DATASET_ORDER, MODEL_ORDER, dataset_label, model_label, order, read_results

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results" / "conformal" / "results.csv"
# panel: (per-σ key, clean key, scale, axis label)
PANELS = {
    "acc": ("noise/acc@", "test/acc", 100, "test accuracy %"),
    "coverage": ("conformal/noise/coverage@", "conformal/test/coverage", 100, "coverage % of the sets"),
    "size": ("conformal/noise/size@", "conformal/test/size", 1, "mean set size"),
}


def curves(results: dict) -> dict:
    """{dataset: {"alpha", "models": {model: {panel: series, "clean": {panel: value}}}}} from the default variants'
    cells of :func:`mnp.tools.report.report_runs.read_results` that have sets, accuracies and coverage in %."""
    out = {}
    datasets = {d for (_, v, d, k) in results if v == "" and k == "conformal/test/coverage"}
    for d in order(datasets, DATASET_ORDER):
        models = {}
        for m in order({m for (m, v, dd, _) in results if v == "" and dd == d}, MODEL_ORDER):
            entry = {}
            for panel, (prefix, clean, scale, _) in PANELS.items():
                pts = sorted(
                    (float(k.removeprefix(prefix)), c)
                    for (mm, v, dd, k), c in results.items()
                    if (mm, v, dd) == (m, "", d) and k.startswith(prefix)
                )
                if pts:
                    entry[panel] = series(pts, panel, scale)
                if (c := results.get((m, "", d, clean))) is not None:
                    entry.setdefault("clean", {})[panel] = round(scale * c["mean"], 4)
            if "coverage" in entry:
                models[m] = entry
        if models:
            alpha = next(c["mean"] for (_, v, dd, k), c in results.items() if dd == d and k == "conformal/alpha")
            out[d] = {"alpha": alpha, "models": models}
    return out


def plot(data: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(data), 3, figsize=(13, 3.6 * len(data) + 0.8), squeeze=False)
    handles: dict = {}
    for row, (d, panel) in zip(axes, data.items()):
        for ax, (name, (_, _, _, label)) in zip(row, PANELS.items()):
            for m in order(panel["models"], MODEL_ORDER):
                c, mnp = panel["models"][m].get(name), m == "mnp"
                if c is None:
                    continue
                color = "k" if mnp else f"C{MODEL_ORDER.index(m) % 10 if m in MODEL_ORDER else 9}"
                kw = dict(lw=2.2 if mnp else 1.0, marker="o" if mnp else ".", ms=4, zorder=3 if mnp else 2)
                ax.plot(c["sigma"], c[name], color=color, label=model_label(m), **kw)
                if c["band"] is not None:
                    ax.fill_between(c["sigma"], c["band"]["low"], c["band"]["high"], color=color, alpha=0.12, lw=0)
            if name == "coverage":
                ax.axhline(100 * (1 - panel["alpha"]), color="0.3", ls=":", lw=1.4, label="1 − α")
            ax.set(xscale="log", ylabel=label, title=f"{dataset_label(d)}: {label}")
            ax.set_xlabel("noise σ on ⌊M/2⌋ views")
            ax.grid(alpha=0.3)
            for h, text in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(text, h)
    fig.tight_layout(rect=(0, 0.6 / (3.6 * len(data) + 0.8), 1, 1))
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


def write(results_csv: Path = RESULTS, out: Path = ROOT / "figures") -> dict:
    """Write conformal_curves.json and .png from ``results_csv``; returns the data."""
    data = curves(read_results(results_csv))
    if not data:
        raise ValueError(f"{results_csv} holds no conformal sets (conformal/test/coverage): nothing to plot")
    out.mkdir(parents=True, exist_ok=True)
    (out / "conformal_curves.json").write_text(json.dumps(data, indent=1) + "\n")
    plot(data, out / "conformal_curves.png")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mnp.tools.figures.conformal_figure", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--results", type=Path, default=RESULTS, help="the study's results.csv (default %(default)s)")
    ap.add_argument("--out", type=Path, default=ROOT / "figures")
    args = ap.parse_args(argv)
    if not args.results.is_file():
        print(f"error: {args.results} does not exist: run the study and its report (conf/experiment/conformal.yaml)")
        return 1
    try:
        write(args.results, args.out)
    except ValueError as e:
        print(f"error: {e}")
        return 1
    print(f"wrote {args.out / 'conformal_curves.json'} and conformal_curves.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
