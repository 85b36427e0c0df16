"""Plots of finished runs (matplotlib, Agg backend), used by ``python -m mnp.tools.report``: PNG, or PDF and SVG
(vector, for a paper) with ``--figure-format pdf,png``.

One figure per experiment (and dataset) and kind:

* ``noise``: accuracy against the noise σ, one line per method, mean ± std over seeds;
* ``reliability``: reliability diagrams from predictions.npz, seeds pooled, ECE in the title and
  the bin counts below (bins with few samples faded);
* ``ood``: histograms of the uncertainty score of in-distribution vs OOD test samples;
* ``context``: metrics against a numeric ``variant`` (the context size N^m of the
  ``context_size`` sweep; the paper's Figures 4-10), mean and 95% confidence interval;
* ``speed``: training time per epoch and test time per method and dataset: points at the mean,
  bars from the fastest to the slowest seed, log axis with plain tick labels.

The pieces of one run's figures (noise series, reliability panels and legend) live in
:mod:`mnp.eval.figures`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # noqa: E402

from mnp.eval.figures import draw_reliability, noise_series, reliability_axes, reliability_legend  # noqa: E402
from mnp.eval.metrics import reliability  # noqa: E402
from mnp.tools.report.report_runs import DATASET_ORDER, Run, dataset_label, order, order_rows, row_label  # noqa: E402


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", s).strip("-")


FORMATS = ("png", "pdf", "svg")
# no creation date in a vector file (and fixed SVG ids): the same runs give the same bytes
UNDATED = {"pdf": {"CreationDate": None}, "svg": {"Date": None}, "png": None}


def figure_formats(text: str) -> tuple[str, ...]:
    """``"pdf,png"`` -> ``("pdf", "png")``: the formats each figure is written in (PDF and SVG are vector)."""
    fmts = tuple(dict.fromkeys(f.strip().lower().lstrip(".") for f in str(text).split(",") if f.strip()))
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        raise ValueError(
            f"unknown figure format {', '.join(bad) or repr(text)}; choose one or more of "
            f"{', '.join(FORMATS)}, comma-separated (e.g. pdf,png)"
        )
    return fmts


def _save(fig, path: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """``fig`` as ``path`` in each of ``formats`` (its suffix replaced); PNG at 110 dpi."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    written = [path.with_suffix(f".{fmt}") for fmt in formats]
    with plt.rc_context({"svg.hashsalt": "mnp"}):  # SVG ids from a fixed salt, not a random one
        for p, fmt in zip(written, formats):
            fig.savefig(p, dpi=110, format=fmt, metadata=UNDATED[fmt])
    plt.close(fig)
    return written


def _groups(runs: list[Run]) -> dict[tuple[str, str], list[Run]]:
    """(experiment, dataset) -> runs, datasets in paper order."""
    g: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        g[(r.experiment, r.dataset)].append(r)
    ds = order({d for _, d in g}, DATASET_ORDER)
    return {k: g[k] for k in sorted(g, key=lambda k: (k[0], ds.index(k[1])))}


def _by_row(runs: list[Run]) -> dict[tuple, list[Run]]:
    rows: dict[tuple, list[Run]] = defaultdict(list)
    for r in runs:
        rows[r.row].append(r)
    return {k: rows[k] for k in order_rows(rows)}


def _grid(n: int, size: float = 3.2):
    cols = min(n, 4)
    nrows = -(-n // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(size * cols, size * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    return fig, axes.flat


def _predictions(run: Run) -> dict[str, np.ndarray] | None:
    path = run.path / "predictions.npz"
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


# ---------------------------------------------------------------------------- noise curves
def noise_curves(runs: list[Run], out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    written = []
    for (exp, ds), group in _groups(runs).items():
        fig, ax = plt.subplots(figsize=(6, 4))
        drawn = False
        for row, rs in _by_row(group).items():
            per_sigma: dict[float, list[float]] = defaultdict(list)
            for r in rs:
                for sigma, acc in zip(*noise_series(r.metrics)):
                    per_sigma[sigma].append(100 * acc)
            if not per_sigma:
                continue
            sig = np.array(sorted(per_sigma))
            mean = np.array([np.mean(per_sigma[s]) for s in sig])
            std = np.array([np.std(per_sigma[s], ddof=1) if len(per_sigma[s]) > 1 else 0.0 for s in sig])
            ax.plot(sig, mean, marker="o", ms=3, label=row_label(row))
            ax.fill_between(sig, mean - std, mean + std, alpha=0.2)
            drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set(
            xscale="log", xlabel="noise σ", ylabel="accuracy (%)", title=f"{dataset_label(ds)}: accuracy under noise"
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        written += _save(fig, out / f"{_safe(exp)}_noise_{_safe(ds)}.png", formats)
    return written


# ---------------------------------------------------------------------------- reliability
def reliability_diagrams(
    runs: list[Run], out: Path, n_bins: int = 15, formats: tuple[str, ...] = ("png",)
) -> list[Path]:
    written = []
    for (exp, ds), group in _groups(runs).items():
        panels = []
        for row, rs in _by_row(group).items():
            preds = [p for p in map(_predictions, rs) if p is not None and "test/probs" in p]
            if preds:
                probs = torch.as_tensor(np.concatenate([p["test/probs"] for p in preds]))
                labels = torch.as_tensor(np.concatenate([p["test/labels"] for p in preds])).long()
                panels.append((row, reliability(probs, labels, n_bins), len(preds)))
        if not panels:
            continue
        fig, axes = reliability_axes(len(panels))
        for (ax, ax_count), (row, rel, n) in zip(axes, panels):
            draw_reliability(ax, ax_count, rel, f"{row_label(row)}, {n} seed{'s' * (n > 1)} pooled")
        reliability_legend(fig)
        fig.suptitle(f"{dataset_label(ds)}: reliability")
        written += _save(fig, out / f"{_safe(exp)}_reliability_{_safe(ds)}.png", formats)
    return written


# ---------------------------------------------------------------------------- OOD histograms
def ood_histograms(runs: list[Run], out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    written = []
    for (exp, ds), group in _groups(runs).items():
        per_name: dict[str, list] = defaultdict(list)
        for row, rs in _by_row(group).items():
            preds = [p for p in map(_predictions, rs) if p is not None]
            names = sorted(
                {k.split("/")[1] for p in preds for k in p if k.startswith("ood/") and k.endswith("/uncertainty")}
            )
            for name in names:
                ps = [p for p in preds if f"ood/{name}/uncertainty" in p]
                score = np.concatenate([p[f"ood/{name}/uncertainty"] for p in ps])
                is_ood = np.concatenate([p[f"ood/{name}/is_ood"] for p in ps]).astype(bool)
                per_name[name].append((row, score, is_ood))
        for name, panels in per_name.items():
            fig, axes = _grid(len(panels))
            for ax, (row, score, is_ood) in zip(axes, panels):
                bins = np.histogram_bin_edges(score, bins=40)
                ax.hist(score[~is_ood], bins=bins, alpha=0.6, density=True, label="in-distribution")
                ax.hist(score[is_ood], bins=bins, alpha=0.6, density=True, label=f"OOD ({name})")
                ax.set(xlabel="uncertainty score", ylabel="density", title=row_label(row))
            axes[0].legend(fontsize=7)
            fig.suptitle(f"{dataset_label(ds)}: uncertainty of ID vs OOD ({name})")
            written += _save(fig, out / f"{_safe(exp)}_ood_{_safe(ds)}_{_safe(name)}.png", formats)
    return written


# ---------------------------------------------------------------------------- context size curves
def _numeric(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def context_curves(runs: list[Run], out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Metrics against a numeric variant (N^m), per dataset: mean and 95% CI over seeds."""
    written = []
    for (exp, ds), group in _groups(runs).items():
        xs = {_numeric(r.variant) for r in group}
        if None in xs or len(xs) < 2:
            continue
        keys = ["test/acc", "test/ece"] + sorted(
            {k for r in group for k in r.metrics if k.startswith("ood/") and k.endswith("/auroc")}
        )
        keys += ["time/train_epoch_s", "time/test_s"]
        keys = [k for k in keys if any(k in r.metrics for r in group)]
        fig, axes = _grid(len(keys))
        for ax, key in zip(axes, keys):
            for model in sorted({r.model for r in group}):
                vals: dict[float, list[float]] = defaultdict(list)
                for r in group:
                    if r.model == model and key in r.metrics:
                        vals[_numeric(r.variant)].append(float(r.metrics[key]))
                x = np.array(sorted(vals))
                mean = np.array([np.mean(vals[v]) for v in x])
                half = np.array(
                    [1.96 * np.std(vals[v], ddof=1) / np.sqrt(len(vals[v])) if len(vals[v]) > 1 else 0.0 for v in x]
                )
                ax.plot(x, mean, marker="o", ms=3, lw=2, label=row_label((model, None)))
                ax.fill_between(x, mean - half, mean + half, alpha=0.25)
            ax.set(xlabel="$N^m$ (context size)", ylabel=key, title=key)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"{dataset_label(ds)}: metrics against the context size (mean, 95% CI)")
        written += _save(fig, out / f"{_safe(exp)}_context_{_safe(ds)}.png", formats)
    return written


# ---------------------------------------------------------------------------- speed
def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis from ``lo`` to ``hi``: powers of ten, or 1-2-5 steps, or single
    digits, the first of these that gives at least 3 ticks."""
    ks = range(int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi))) + 1)
    options = [
        [float(f"{m}e{k}") for k in ks for m in mantissas if lo <= float(f"{m}e{k}") <= hi]
        for mantissas in ((1,), (1, 2, 5), range(1, 10))
    ]
    return next((t for t in options if len(t) >= 3), options[-1])


def plain_number(x: float, _pos=None) -> str:
    """0.1, 2, 50: a tick label without powers of ten."""
    return np.format_float_positional(x, trim="-")


def _times(rs: list[Run], row, dataset: str, key: str) -> list[float]:
    return [float(r.metrics[key]) for r in rs if r.row == row and r.dataset == dataset and r.metrics.get(key, 0) > 0]


def _speed_axis(ax, rs: list[Run], key: str, datasets: list[str], rows: list) -> None:
    step = 0.8 / len(rows)
    lows, highs = [], []
    for i, row in enumerate(rows):
        x, mean, low, high = [], [], [], []
        for j, d in enumerate(datasets):
            if v := _times(rs, row, d, key):
                x.append(j + (i - (len(rows) - 1) / 2) * step)
                mean.append(np.mean(v))
                low.append(min(v))
                high.append(max(v))
        if x:
            mean = np.array(mean)
            ax.errorbar(
                x,
                mean,
                yerr=[mean - low, np.array(high) - mean],
                fmt="o",
                ms=5,
                capsize=2,
                color=f"C{i % 10}",
                label=row_label(row),
            )
            lows += low
            highs += high
    lo, hi = min(lows) / 1.5, max(highs) * 1.5
    ax.set(
        yscale="log",
        ylim=(lo, hi),
        ylabel="seconds (log scale)",
        title={"time/train_epoch_s": "training time per epoch", "time/test_s": "test time"}[key]
        + "\n(mean over seeds; bar: fastest to slowest seed)",
    )
    ax.yaxis.set_major_locator(FixedLocator(log_ticks(lo, hi)))
    ax.yaxis.set_major_formatter(FuncFormatter(plain_number))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(range(len(datasets)), [dataset_label(d) for d in datasets], rotation=30)
    ax.set_xlim(-0.5, len(datasets) - 0.5)
    ax.grid(alpha=0.3, axis="y", which="both")


def speed_figure(rs: list[Run]):
    """Training time per epoch and test time per dataset of one experiment's runs: the mean over
    seeds as a point per method, a bar from the fastest to the slowest seed, on a log axis with
    plain tick labels; None when no run has a time."""
    datasets = order({r.dataset for r in rs}, DATASET_ORDER)
    rows = order_rows({r.row for r in rs})
    keys = [k for k in ("time/train_epoch_s", "time/test_s") if any(r.metrics.get(k, 0) > 0 for r in rs)]
    if not keys:
        return None
    width_in = max(5.0, 1.2 * len(datasets) * max(1, len(rows)) ** 0.5)
    fig, axes = plt.subplots(1, len(keys), figsize=(width_in * len(keys), 4), squeeze=False, layout="constrained")
    for ax, key in zip(axes[0], keys):
        _speed_axis(ax, rs, key, datasets, rows)
    handles = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=7)
    return fig


def speed_plots(runs: list[Run], out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    written = []
    for exp in sorted({r.experiment for r in runs}):
        fig = speed_figure([r for r in runs if r.experiment == exp])
        if fig is not None:
            written += _save(fig, out / f"{_safe(exp)}_speed.png", formats)
    return written


def all_plots(runs: list[Run], out: Path, formats: tuple[str, ...] = ("png",)) -> list[Path]:
    """Every plot above that the runs have data for, in each of ``formats``; returns the files written."""
    return (
        noise_curves(runs, out, formats)
        + reliability_diagrams(runs, out, formats=formats)
        + ood_histograms(runs, out, formats)
        + context_curves(runs, out, formats)
        + speed_plots(runs, out, formats)
    )
