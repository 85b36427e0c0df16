"""The report's figures: the speed figure's axes and error bars, the reliability diagram, plain log ticks."""

from __future__ import annotations

import numpy as np
import pytest

from mnp.tools.report.report_runs import model_label


def test_speed_figure_points_on_a_log_axis_with_plain_ticks_and_floorless_error_bars(tmp_path):
    from matplotlib.container import ErrorbarContainer
    from matplotlib.patches import Rectangle

    from mnp.tools.report.plots import speed_figure
    from mnp.tools.report.report_runs import Run

    # mgp on handwritten: mean − std < 0, which sent the old error bar to the axis floor
    times = {
        ("mnp", "handwritten"): [0.05, 0.06, 0.07],
        ("mgp", "handwritten"): [0.1, 0.1, 3.0],
        ("mnp", "cifar10c"): [20.0, 22.0, 24.0],
        ("mgp", "cifar10c"): [30.0, 33.0, 36.0],
    }
    runs = [
        Run(tmp_path, "paper_speed", m, d, s, None, {"time/train_epoch_s": t, "time/test_s": t / 2})
        for (m, d), ts in times.items()
        for s, t in enumerate(ts)
    ]
    fig = speed_figure(runs)
    fig.canvas.draw()
    assert len(fig.axes) == 2
    for ax, scale in zip(fig.axes, (1.0, 0.5)):
        assert ax.get_yscale() == "log"
        assert not [p for p in ax.patches if isinstance(p, Rectangle)]  # points, no bar lengths
        lo, hi = ax.get_ylim()
        assert [t.get_text() for t in ax.get_yticklabels() if lo <= t.get_position()[1] <= hi] == ["0.1", "1", "10"]
        assert all(t.get_text() == "" for t in ax.get_yticklabels(minor=True))
        bars = {}
        for c in ax.containers:
            assert isinstance(c, ErrorbarContainer)
            line, _, (segments,) = c.lines
            for x, mean, seg in zip(line.get_xdata(), line.get_ydata(), segments.get_segments()):
                bars[(c.get_label(), round(x))] = (mean, seg[0][1], seg[1][1])
        assert bars[("MGP", 0)] == pytest.approx((scale * 3.2 / 3, scale * 0.1, scale * 3.0))  # mean, slowest, fastest
        assert bars[(model_label("mnp"), 1)] == pytest.approx((scale * 22.0, scale * 20.0, scale * 24.0))
        assert min(low for _, low, _ in bars.values()) > lo > 0  # no bar reaches the bottom of the axis
        assert max(high for _, _, high in bars.values()) < hi
        assert not fig.legends[0].get_window_extent().overlaps(ax.get_window_extent())


def reliability_data():
    """253 predictions over 10 classes: (confidence, samples, correct) = (0.95, 200, 190), (0.75, 50, 30),
    (0.45, 2, 2), (0.25, 1, 0); 15 bins: bins 14, 11, 6 and 3."""
    conf, labels = [], []
    for c, n, k in [(0.95, 200, 190), (0.75, 50, 30), (0.45, 2, 2), (0.25, 1, 0)]:
        conf += [c] * n
        labels += [0] * k + [1] * (n - k)
    conf = np.array(conf)
    probs = np.repeat(((1 - conf) / 9)[:, None], 10, axis=1)
    probs[:, 0] = conf
    return probs.astype(np.float32), np.array(labels)


def test_reliability_figure_shows_ece_counts_confidence_and_faded_small_bins():
    import torch

    from mnp.eval.figures import FADED, reliability_figure
    from mnp.eval.metrics import ece

    probs, labels = reliability_data()
    fig = reliability_figure(probs, labels, "mnp / pie / seed 0")
    fig.canvas.draw()
    ax, ax_count = fig.axes
    # ECE = (50 · |0.6 − 0.75| + 2 · |1 − 0.45| + 1 · |0 − 0.25|) / 253, the title's and test/ece's
    expected = (50 * 0.15 + 2 * 0.55 + 0.25) / 253
    assert ece(torch.as_tensor(probs), torch.as_tensor(labels)) == pytest.approx(expected, abs=1e-5)
    assert ax.get_title() == f"mnp / pie / seed 0\nECE = {expected:.3f}" == "mnp / pie / seed 0\nECE = 0.035"
    # one bar and one count label per non-empty bin
    acc_bars, gap_bars = ax.containers
    assert [round(p.get_x() * 15) for p in acc_bars] == [3, 6, 11, 14]
    assert [p.get_height() for p in acc_bars] == pytest.approx([0.0, 1.0, 0.6, 0.95])
    # the gap bar runs from the accuracy to the mean confidence, which sits at its own height
    assert [p.get_y() for p in gap_bars] == pytest.approx([0.0, 1.0, 0.6, 0.95], abs=1e-6)
    assert [p.get_y() + p.get_height() for p in gap_bars] == pytest.approx([0.25, 0.45, 0.75, 0.95], abs=1e-6)
    (confidence,) = ax.collections
    assert [seg[0][1] for seg in confidence.get_segments()] == pytest.approx([0.25, 0.45, 0.75, 0.95], abs=1e-6)
    assert [p.get_height() for p in ax_count.patches] == [1, 2, 50, 200]
    assert [t.get_text().strip() for t in ax_count.texts] == ["1", "2", "50", "200"]
    # bins of 1 and 2 samples are faded
    assert [p.get_facecolor()[3] for p in acc_bars] == pytest.approx([FADED, FADED, 1, 1])
    # the legend sits outside both panels, clear of every bar
    legend = fig.legends[0].get_window_extent()
    assert not legend.overlaps(ax.get_window_extent()) and not legend.overlaps(ax_count.get_window_extent())
    assert not any(legend.overlaps(p.get_window_extent()) for p in ax.patches + ax_count.patches)


def test_log_ticks_are_plain_numbers():
    from mnp.tools.report.plots import log_ticks, plain_number

    assert log_ticks(0.05, 50) == [0.1, 1, 10]
    assert log_ticks(0.3, 30) == [0.5, 1, 2, 5, 10, 20]
    assert log_ticks(2.1, 4.7) == [3, 4]
    assert [plain_number(t) for t in log_ticks(0.001, 2000)] == ["0.001", "0.01", "0.1", "1", "10", "100", "1000"]


def test_figures_are_written_in_each_format_asked_vector_ones_valid_and_undated(tmp_path, capsys):
    """A paper needs vector figures: `report --figure-format pdf,svg,png` writes each plot in each format."""
    import xml.etree.ElementTree as ET

    from mnp.tools.report.plots import figure_formats, speed_plots
    from mnp.tools.report.report import main
    from mnp.tools.report.report_runs import Run

    runs = [
        Run(tmp_path, "paper_speed", m, "cub", s, None, {"time/train_epoch_s": 1.0 + s, "time/test_s": 0.5})
        for m in ("mnp", "mlp")
        for s in range(2)
    ]
    assert figure_formats(" PDF, .svg,png,pdf") == ("pdf", "svg", "png")
    written = speed_plots(runs, tmp_path / "a", figure_formats("pdf,svg,png"))
    assert [p.name for p in written] == ["paper_speed_speed.pdf", "paper_speed_speed.svg", "paper_speed_speed.png"]
    pdf, svg, png = (p.read_bytes() for p in written)
    assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF") and b"/CreationDate" not in pdf
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.findall(".//{http://www.w3.org/2000/svg}path")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    again = speed_plots(runs, tmp_path / "b", ("pdf", "svg"))
    assert [p.read_bytes() for p in again] == [pdf, svg]  # the same runs, the same bytes
    assert [p.suffix for p in speed_plots(runs, tmp_path / "c")] == [".png"]  # the default
    with pytest.raises(ValueError, match=r"^unknown figure format jpg; choose one or more of png, pdf, svg"):
        figure_formats("png,jpg")
    assert main([str(tmp_path), "--figure-format", "eps"]) == 1
    assert capsys.readouterr().out.startswith("error: unknown figure format eps;")
