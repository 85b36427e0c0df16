"""The figures of one run: its reliability diagram and its noise curve (matplotlib, Agg backend).

Drawn for the run's wandb summary (:mod:`mnp.cli.wandb_utils`) and reused by the reports
(``mnp.tools.report.plots`` draws its multi-run panels with the same pieces).
"""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from mnp.eval.metrics import reliability  # noqa: E402

NOISE_KEY = re.compile(r"^noise/acc@(.+)$")
FEW_SAMPLES = 10  # reliability bins with fewer samples are drawn faded
FADED = 0.3


def noise_series(metrics: dict) -> tuple[np.ndarray, np.ndarray]:
    """σ levels and accuracies (fractions) from a metrics dict's ``noise/acc@<σ>`` keys, σ ascending."""
    pairs = sorted((float(m.group(1)), float(v)) for k, v in metrics.items() if (m := NOISE_KEY.match(k)))
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def ece_title(title: str, rel: dict) -> str:
    """``title`` and the bins' ECE, the very number reported as ``test/ece`` (:func:`mnp.eval.metrics.reliability`
    computes both), with the rows left out of the bins as not finite."""
    k = rel["nonfinite"]
    bad = f" ({k} row{'s' * (k > 1)} not finite)" if k else ""
    return f"{title}\nECE = {rel['ece']:.3f}{bad}"


def draw_reliability(ax, ax_count, rel: dict, title: str) -> None:
    """Per-bin accuracy bars, a gap bar from accuracy to mean confidence, the mean confidence at its
    own height, the diagonal, and the bin counts in ``ax_count``; bins under FEW_SAMPLES samples faded."""
    n_bins = len(rel["count"])
    width = 1 / n_bins
    count = rel["count"].numpy()
    used = count > 0
    left = np.linspace(0, 1, n_bins + 1)[:-1][used]
    acc, conf, count = rel["accuracy"].numpy()[used], rel["confidence"].numpy()[used], count[used]
    alpha = np.where(count < FEW_SAMPLES, FADED, 1.0)
    ax.bar(
        left,
        acc,
        width,
        align="edge",
        color=[to_rgba("C0", a) for a in alpha],
        edgecolor=[to_rgba("k", a) for a in alpha],
        lw=0.5,
    )
    ax.bar(
        left,
        conf - acc,
        width,
        bottom=acc,
        align="edge",
        color=[to_rgba("C3", 0.3 * a) for a in alpha],
        edgecolor=[to_rgba("C3", a) for a in alpha],
        hatch="//",
        lw=0,
    )
    ax.hlines(conf, left, left + width, colors="k", lw=1.5)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set(xlim=(0, 1), ylim=(0, 1), ylabel="accuracy", title=ece_title(title, rel))
    ax.tick_params(labelbottom=False)
    ax_count.bar(left, count, width, align="edge", color=[to_rgba("0.5", a) for a in alpha], edgecolor="k", lw=0.5)
    for x, c in zip(left + width / 2, count):
        ax_count.text(x, c, f" {int(c)}", ha="center", va="bottom", rotation=90, fontsize=6)
    ax_count.set(xlim=(0, 1), ylim=(0, 2.2 * count.max(initial=1)), xlabel="confidence", ylabel="samples")


def reliability_axes(n: int, size: float = 3.2):
    """A figure with ``n`` (reliability, count) axis pairs, four pairs per row."""
    cols = min(n, 4)
    nrows = -(-n // cols)
    fig = plt.figure(figsize=(size * cols, 1.35 * size * nrows), layout="constrained")
    gs = fig.add_gridspec(2 * nrows, cols, height_ratios=[3, 1] * nrows)
    pairs = []
    for k in range(n):
        r, c = divmod(k, cols)
        ax = fig.add_subplot(gs[2 * r, c])
        pairs.append((ax, fig.add_subplot(gs[2 * r + 1, c], sharex=ax)))
    return fig, pairs


def reliability_legend(fig) -> None:
    """One legend below all panels, clear of the data."""
    handles = {
        "accuracy": Patch(facecolor="C0", edgecolor="k", lw=0.5),
        "gap to mean confidence": Patch(facecolor=to_rgba("C3", 0.3), edgecolor="C3", hatch="//", lw=0),
        "mean confidence": Line2D([], [], color="k", lw=1.5),
        "perfect calibration": Line2D([], [], color="k", ls="--", lw=0.8),
        f"bin with < {FEW_SAMPLES} samples (faded)": Patch(
            facecolor=to_rgba("C0", FADED), edgecolor=to_rgba("k", FADED), lw=0.5
        ),
    }
    ncol = 3 if len(fig.axes) > 2 else 2
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=ncol, fontsize=7, frameon=False)


def reliability_figure(probs: np.ndarray, labels: np.ndarray, title: str, n_bins: int = 15):
    """A reliability diagram (with bin counts below) of one run's test predictions."""
    fig, [(ax, ax_count)] = reliability_axes(1, size=4)
    draw_reliability(ax, ax_count, reliability(torch.as_tensor(probs), torch.as_tensor(labels).long(), n_bins), title)
    reliability_legend(fig)
    return fig


def noise_figure(metrics: dict, title: str):
    """Accuracy against the noise σ of one run, or None when the run has no noise results."""
    sig, acc = noise_series(metrics)
    if len(sig) == 0:
        return None
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(sig, 100 * acc, marker="o")
    ax.set(xscale="log", xlabel="noise σ", ylabel="accuracy (%)", title=title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
