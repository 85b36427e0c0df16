"""The paper's tables of one experiment, as markdown and LaTeX, for :mod:`mnp.tools.report`.

Each table records the number of the paper table it reproduces (1 accuracy, 2 ECE, 3 noisy
accuracy, 4 CIFAR10-C OOD, 5 speed); the number shown is passed in at rendering time, so that the
report can number its tables consecutively (see :mod:`mnp.tools.report`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mnp.tools.report.report_runs import (
    DATASET_ORDER,
    LEGACY,
    VOID,
    Cell,
    dataset_label,
    markdown_table,
    order,
    order_rows,
    row_label,
)

OOD_ORDER = ["svhn", "cifar100", "heldout"]
OOD_NAMES = {"svhn": "SVHN", "cifar100": "CIFAR100", "heldout": "held-out classes"}


@dataclass(frozen=True)
class Metric:
    """A metrics.json key, its direction and how it is shown (``scale``: e.g. 100 for %)."""

    key: str
    higher_better: bool
    scale: float = 1.0
    digits: int = 3

    def fmt(self, x: float) -> str:
        return f"{x * self.scale:.{self.digits}f}"


ACC = Metric("test/acc", True, 100.0, 2)
ECE = Metric("test/ece", False)
# eval.calibration=temperature (mnp.eval.calibration): the same predictions, temperature-scaled on validation rows
CAL_ECE = Metric("cal/test/ece", False)
NLL = Metric("test/nll", False)
CAL_NLL = Metric("cal/test/nll", False)
NOISY_ACC = Metric("noise/acc_mean", True, 100.0, 2)
TRAIN_TIME = Metric("time/train_epoch_s", False, 1.0, 3)
TEST_TIME = Metric("time/test_s", False, 1.0, 3)


AURC = Metric("test/aurc", False, 1.0, 4)
ACC_COV90 = Metric("test/acc@cov90", True, 100.0, 2)
ECE_ADAPTIVE = Metric("test/ece_adaptive", False)


def auroc_metric(name: str) -> Metric:
    return Metric(f"ood/{name}/auroc", True)


def ood_metrics(name: str) -> list[tuple[str, Metric]]:
    """The OOD columns of one set (the model's own uncertainty as the score): AUROC, AUPR and FPR at 95 % TPR."""
    label = OOD_NAMES.get(name, name)
    return [
        (f"AUROC {label} ↑", auroc_metric(name)),
        (f"AUPR {label} ↑", Metric(f"ood/{name}/aupr", True)),
        (f"FPR95 {label} ↓", Metric(f"ood/{name}/fpr95", False)),
    ]


@dataclass
class Table:
    """Rows × columns of Cells; each column has its own metric (and so its own 'best')."""

    paper: str  # the number of the paper table it reproduces
    title: str
    label: str
    rows: list[tuple[str, str | None]]
    columns: list[tuple[str, str, Metric]]  # (header, dataset, metric)
    cells: dict[tuple[int, int], Cell]

    @property
    def legacy(self) -> bool:
        """Whether a cell is a legacy aggregate (shown without interval)."""
        return any(c.source == LEGACY for c in self.cells.values())

    @property
    def zero_width(self) -> bool:
        """Whether a cell's seeds all gave the same value (an interval of zero width, marked ‡)."""
        return any(_zero_width(c) for c in self.cells.values())

    def ranks(self) -> dict[tuple[int, int], int]:
        """1 for the best value of each column, 2 for the second (ties share a rank, on shown digits)."""
        out = {}
        for j, (_, _, metric) in enumerate(self.columns):
            shown = {i: float(metric.fmt(c.mean)) for (i, jj), c in self.cells.items() if jj == j and c.source != VOID}
            distinct = sorted(set(shown.values()), reverse=metric.higher_better)
            for i, v in shown.items():
                rank = distinct.index(v) + 1
                if rank <= 2:
                    out[(i, j)] = rank
        return out


def make_table(
    paper: str, title: str, label: str, agg: dict, experiment: str, columns: list[tuple[str, str, Metric]]
) -> Table | None:
    """The table of ``columns`` over the rows that have any of them; None when no cell has data."""
    rows = order_rows(
        {(m, v) for (e, m, v, d, k) in agg if e == experiment and any(d == cd and k == cm.key for _, cd, cm in columns)}
    )
    cells = {}
    for i, (m, v) in enumerate(rows):
        for j, (_, d, metric) in enumerate(columns):
            c = agg.get((experiment, m, v, d, metric.key))
            if c is not None:
                cells[(i, j)] = c
    if not cells:
        return None
    columns_used = sorted({j for _, j in cells})
    columns = [columns[j] for j in columns_used]
    cells = {(i, columns_used.index(j)): c for (i, j), c in cells.items()}
    return Table(paper, title, label, rows, columns, cells)


CAL_NOTE = "; T-scaled: after temperature scaling fitted on the validation rows (eval.calibration=temperature)"


def raw_and_calibrated(datasets: list[str], raw: Metric, cal: Metric) -> list[tuple[str, str, Metric]]:
    """Per dataset the raw column, then its temperature-scaled one (dropped by make_table where no run has it)."""
    return [col for d in datasets for col in ((dataset_label(d), d, raw), (f"{dataset_label(d)} T-scaled", d, cal))]


def experiment_tables(agg: dict, experiment: str) -> list[Table]:
    """The paper's Tables 1-5 for one experiment (those with data), in the paper's order."""
    datasets = order({d for (e, _, _, d, _) in agg if e == experiment}, DATASET_ORDER)
    per_ds = lambda metric: [(dataset_label(d), d, metric) for d in datasets]  # noqa: E731
    note = CAL_NOTE if any(e == experiment and k == CAL_ECE.key for (e, _, _, _, k) in agg) else ""
    tables = [
        make_table("1", "Test accuracy (%) ↑", "accuracy", agg, experiment, per_ds(ACC)),
        make_table("2", "Test ECE ↓" + note, "ece", agg, experiment, raw_and_calibrated(datasets, ECE, CAL_ECE)),
        make_table("2", "Test NLL ↓" + note, "nll", agg, experiment, raw_and_calibrated(datasets, NLL, CAL_NLL))
        if note
        else None,
        make_table(
            "3",
            "Test accuracy (%) averaged over the 10 noise levels ↑",
            "noisy-accuracy",
            agg,
            experiment,
            per_ds(NOISY_ACC),
        ),
    ]
    for d in datasets:
        oods = order(
            {
                k.split("/")[1]
                for (e, _, _, dd, k) in agg
                if e == experiment and dd == d and k.startswith("ood/") and k.endswith("/auroc")
            },
            OOD_ORDER,
        )
        if oods:
            cols = [("Accuracy (%) ↑", d, ACC), ("ECE ↓", d, ECE)]
            cols += [(h, d, m) for o in oods for h, m in ood_metrics(o)]
            tables.append(
                make_table(
                    "4", f"{dataset_label(d)}: accuracy, ECE and OOD detection", f"ood-{d}", agg, experiment, cols
                )
            )
    selective = [
        (f"{h} {dataset_label(d)}", d, m)
        for d in datasets
        for h, m in (("AURC ↓", AURC), ("acc@90% cov. ↑", ACC_COV90), ("adaptive ECE ↓", ECE_ADAPTIVE))
    ]
    tables += [
        make_table(
            "",
            "Selective classification (AURC, accuracy of the 90 % most confident rows) and equal-mass ECE",
            "selective",
            agg,
            experiment,
            selective,
        ),
        make_table("5", "Training time per epoch (s) ↓", "train-time", agg, experiment, per_ds(TRAIN_TIME)),
        make_table("5", "Test time, one pass over the test set (s) ↓", "test-time", agg, experiment, per_ds(TEST_TIME)),
    ]
    return [t for t in tables if t is not None]


def speedups(agg: dict, experiment: str, fast: str = "mnp", slow: str = "mgp") -> dict[str, dict[str, float]]:
    """Paper Table 5: mean time of ``slow`` / mean time of ``fast`` per dataset (train and test).

    Only where both cells come from the same kind of record: a legacy aggregate's time was measured on another
    machine or load than a per-run record's, so their ratio is not a speed-up."""
    out: dict[str, dict[str, float]] = {}
    for e, m, v, d, k in agg:
        if e != experiment or m != fast or v is not None or k not in (TRAIN_TIME.key, TEST_TIME.key):
            continue
        ref = agg.get((e, slow, None, d, k))
        mine = agg[(e, m, v, d, k)]
        if ref is not None and mine.mean > 0 and ref.source == mine.source:
            out.setdefault(d, {})["train" if k == TRAIN_TIME.key else "test"] = ref.mean / mine.mean
    return {d: out[d] for d in order(out, DATASET_ORDER)}


# ---------------------------------------------------------------------------- rendering
def _cell_text(c: Cell, metric: Metric, style: tuple) -> str:
    """``mean [low, high]``, the 95 % t-interval; one seed: its value alone; a legacy aggregate: its mean, marked."""
    interval, legacy = style[1], style[6]
    if c.source == LEGACY:
        return metric.fmt(c.mean) + legacy
    if c.ci is None:
        return metric.fmt(c.mean)
    text = interval.format(*map(metric.fmt, (c.mean, *c.ci)))
    return text + ("‡" if style is MD_STYLE else r"$^\ddagger$") * _zero_width(c)


def _zero_width(c: Cell) -> bool:
    """Every seed the same value (to float rounding of the std: ten equal floats give 1e-16)."""
    return c.source != LEGACY and c.ci is not None and c.n > 1 and c.std <= 1e-9 * max(1.0, abs(c.mean))


# how a cell is written: missing, interval, best, second best, the number of seeds (n = 1 said plainly), legacy mark
MD_STYLE = ("–", "{} [{}, {}]", "**{}**", "<u>{}</u>", "{} ({})", "{} (n = 1)", "†")
TEX_STYLE = (
    "--",
    r"{}\,[{}, {}]",
    r"\textbf{{{}}}",
    r"\underline{{{}}}",
    r"{}\,{{\scriptsize({})}}",
    r"{}\,{{\scriptsize($n = 1$)}}",
    r"$^\dagger$",
)
LEGACY_NOTE = "legacy aggregate without per-run records: no interval"
ZERO_WIDTH_NOTE = "every seed gave the same value: a zero-width interval, not an exact result"


def _row_cells(t: Table, i: int, ranks: dict, style: tuple) -> list[str]:
    """Row ``i``'s cells: mean [interval], the best of a column marked, the second best too, and the seed count."""
    missing, _, best, second, count, single, _ = style
    cells = []
    for j, (_, _, metric) in enumerate(t.columns):
        c = t.cells.get((i, j))
        if c is None or c.source == VOID:
            cells.append(missing if c is None else VOID)
            continue
        s = _cell_text(c, metric, style)
        s = {1: best, 2: second}.get(ranks.get((i, j)), "{}").format(s)
        cells.append(single.format(s) if c.n == 1 else count.format(s, c.n))
    return cells


def table_md(t: Table, number: int) -> str:
    ranks = t.ranks()
    note = (f"; † {LEGACY_NOTE}" if t.legacy else "") + (f"; ‡ {ZERO_WIDTH_NOTE}" if t.zero_width else "")
    cf = f"cf. paper Table {t.paper}; " if t.paper else "not in the paper; "
    rows = [[row_label(row), *_row_cells(t, i, ranks, MD_STYLE)] for i, row in enumerate(t.rows)]
    caption = f"**Table {number}.** {t.title} ({cf}mean [95 % t-interval] over seeds; (n) = seeds{note})"
    return caption + "\n\n" + markdown_table(["Method", *(h for h, _, _ in t.columns)], rows)


def tex_escape(s: str) -> str:
    for a, b in (
        ("\\", r"\textbackslash{}"),
        ("_", r"\_"),
        ("%", r"\%"),
        ("&", r"\&"),
        ("#", r"\#"),
        ("↑", r"$\uparrow$"),
        ("↓", r"$\downarrow$"),
        ("×", r"$\times$"),
    ):
        s = s.replace(a, b)
    return s


def latex_table(caption: str, label: str, header: list[str], rows: list[list[str]], resize: bool = False) -> str:
    """A booktabs table of ``rows`` under ``header`` (cells already escaped), the first column left-aligned;
    ``resize``: scaled to the text width."""
    tabular = r"\begin{tabular}{l" + "c" * (len(header) - 1) + "}"
    return "\n".join(
        [r"\begin{table}[!h]", r"\centering", rf"\caption{{{caption}}}", rf"\label{{{label}}}",
         rf"\resizebox{{\textwidth}}{{!}}{{{tabular}" if resize else tabular, r"\toprule", " & ".join(header) + r" \\",
         r"\midrule", *(" & ".join(r) + r" \\" for r in rows), r"\bottomrule", r"\end{tabular}" + "}" * resize,
         r"\end{table}"]
    )  # fmt: skip


def table_tex(t: Table, experiment: str) -> str:
    """A LaTeX table; LaTeX numbers it, in the same order as :func:`table_md`'s numbers."""
    ranks = t.ranks()
    note = (rf"; $^\dagger$ {LEGACY_NOTE}" if t.legacy else "") + (
        rf"; $^\ddagger$ {ZERO_WIDTH_NOTE}" if t.zero_width else ""
    )
    cf = rf"cf.\ paper Table {t.paper}" if t.paper else "not in the paper"
    caption = (
        rf"{tex_escape(t.title)} Mean and 95\% t-interval over seeds [low, high], number of seeds in parentheses "
        rf"({cf}){note}."
    )
    header = ["Method", *(tex_escape(h) for h, _, _ in t.columns)]
    rows = [[tex_escape(row_label(row)), *_row_cells(t, i, ranks, TEX_STYLE)] for i, row in enumerate(t.rows)]
    return latex_table(caption, f"table:{tex_escape(experiment)}-{t.label}", header, rows, resize=True)


def speedup_md(s: dict[str, dict[str, float]], number: int) -> str:
    rows = [[dataset_label(d), *(f"{v[k]:.2f}" if k in v else "–" for k in ("train", "test"))] for d, v in s.items()]
    return (
        f"**Table {number}.** Speed-up of MNP over MGP, MGP time / MNP time (cf. paper Table 5; ratio of "
        "the seed means)\n\n" + markdown_table(["Dataset", "Training", "Testing"], rows)
    )


def speedup_tex(s: dict[str, dict[str, float]], experiment: str) -> str:
    caption = (
        r"Speed-up ($\times$) of MNP over MGP: ratio of wall-clock time per epoch (MGP / MNP) (cf.\ paper Table 5)."
    )
    rows = [
        [tex_escape(dataset_label(d)), *(f"{v[k]:.2f}" if k in v else "--" for k in ("train", "test"))]
        for d, v in s.items()
    ]
    return latex_table(caption, f"table:{tex_escape(experiment)}-speed-up", ["Dataset", "Training", "Testing"], rows)
