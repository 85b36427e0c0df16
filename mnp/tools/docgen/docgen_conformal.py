"""The conformal study's section of docs/results.md (issue 47), ``<!-- generated:conformal -->``, for
:mod:`mnp.tools.docgen` (which registers :data:`RENDERERS` and :func:`sources`).

From ``results/conformal/`` (the report of ``conf/experiment/conformal.yaml``'s sweep): the figure
(:mod:`mnp.tools.figures.conformal_figure`, which docgen rewrites where it differs from the results), then per dataset each
model's coverage and mean set size on the clean test rows, averaged over σ and averaged over the missing views
(mean [95 % t-interval] over seeds), a coverage below the finite-sample tolerance under 1 − α marked
(:func:`mnp.tools.report.report_conformal.coverage_floor`), then the claims "MNP's sets beat X's" with their p-values.
Before the study has run: one line saying so, with its two commands (the ``python`` lines of the config's header).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mnp.tools.docgen.docgen_results import ci_cell, claims_table
from mnp.tools.docgen.docgen_sources import reading
from mnp.tools.figures import conformal_figure
from mnp.tools.report.report_conformal import coverage_floor
from mnp.tools.report.report_records import claims, read_runs
from mnp.tools.report.report_runs import (
    DATASET_ORDER,
    MODEL_ORDER,
    dataset_label,
    markdown_table,
    model_label,
    order,
    read_cells,
    read_results,
)

STUDY = Path("conf") / "experiment" / "conformal.yaml"
OUT = Path("results") / "conformal"
FIGURE = Path("figures") / "conformal_curves.json"
COLUMNS = [
    ("conformal/test/coverage", "coverage %", 100, 2),
    ("conformal/test/size", "size", 1, 2),
    ("conformal/noise/coverage_mean", "noisy coverage %", 100, 2),
    ("conformal/noise/size_mean", "noisy size", 1, 2),
    ("conformal/missing/coverage_mean", "view missing: coverage %", 100, 2),
    ("conformal/missing/size_mean", "view missing: size", 1, 2),
]
MISS = " ✗"
LEGEND = (
    "✗: the mean lies below the floor, the 1 % quantile of a valid run's clean coverage given its validation and "
    "test rows (Beta-binomial; `mnp.tools.report.report_conformal.coverage_floor`): on clean rows a miss of the guarantee, "
    "under noise or with a view missing (no guarantee there) coverage lost."
)


def commands(root: Path) -> list[str]:
    """The study's commands: the ``#   python ...`` lines of its config's header."""
    with reading(root / STUDY):
        lines = (root / STUDY).read_text().splitlines()
    return [line.lstrip("#").strip() for line in lines if re.match(r"#\s+python ", line)]


def sources(root: Path) -> dict:
    """The study's results, claims on conformal metrics and figure data (empty before the study has run)."""
    d, src = root / OUT, {"conformal_commands": commands(root), "conformal": {}, "conformal_claims": []}
    if (d / "results.csv").is_file():
        with reading(d / "results.csv"):
            res, cells = read_results(d / "results.csv"), read_cells(d / "results.csv")
        with reading(d / "runs.csv"):
            records = read_runs(d / "runs.csv")
        found = [r for r in claims(records, cells) if r["metric"].startswith("conformal/")]
        src.update(conformal=res, conformal_claims=found)
    src["conformal_curves"] = conformal_figure.curves(src["conformal"])
    return src


def stale_figure(root: Path, src: dict) -> Path | None:
    """``figures/conformal_curves.json`` where it differs from the study's results (None: up to date, or no study)."""
    path = root / FIGURE
    if not src["conformal_curves"]:
        return None
    with reading(path):
        stale = not path.is_file() or json.loads(path.read_text()) != src["conformal_curves"]
    return path if stale else None


def floor(res: dict, model: str, dataset: str) -> float | None:
    """:func:`coverage_floor` of a model's runs (None where they do not record their rows)."""
    get = lambda k: res.get((model, "", dataset, k), {}).get("mean")  # noqa: E731
    alpha, n_cal, n_test = get("conformal/alpha"), get("conformal/n_cal"), get("conformal/n_test")
    if None in (alpha, n_cal, n_test):
        return None
    return coverage_floor(round(n_cal), round(n_test), alpha)


def render_conformal(src: dict) -> str:
    """The study's figure, table and claims; before it has run, the line that says so with its commands."""
    res = src["conformal"]
    if not res:
        if not (cmds := src["conformal_commands"]):
            raise ValueError(f"{STUDY} names no python command in its header")
        return (
            f"The study is declared (`{STUDY.as_posix()}`) and not yet run: there is no `{OUT.as_posix()}/`. Run "
            + ", then ".join(f"`{c}`" for c in cmds)
            + "; `python -m mnp.tools.docgen` then writes this section and the figure from the report."
        )
    rows = []
    for d in order({d for (_, _, d, _) in res}, DATASET_ORDER):
        least = None
        for m in order({m for (m, v, dd, k) in res if dd == d and k == COLUMNS[0][0] and v == ""}, MODEL_ORDER):
            n, least = res[(m, "", d, COLUMNS[0][0])]["n"], floor(res, m, d)
            cells = []
            for k, _, scale, digits in COLUMNS:
                c = res.get((m, "", d, k))
                miss = "coverage" in k and c is not None and least is not None and c["mean"] < least
                cells.append(ci_cell(c, scale, digits, count=c is not None and c["n"] != n) + MISS * miss)
            shown = "–" if least is None else f"{100 * least:.1f}"
            rows.append([dataset_label(d), model_label(m), *cells, shown, n])
    alphas = sorted({c["mean"] for (_, _, _, k), c in res.items() if k == "conformal/alpha"})
    header = ["dataset", "model", *(label for _, label, _, _ in COLUMNS), "floor %", "seeds"]
    figure = "![coverage and mean set size against σ for every model, beside accuracy](../figures/conformal_curves.png)"
    tests = (
        claims_table(src["conformal_claims"], "MNP's sets beat")
        if src["conformal_claims"]
        else "No claims: no MNP runs beside another model's."
    )
    return "\n\n".join(
        [
            figure,
            f"α = {', '.join(f'{a:g}' for a in alphas)}; mean [95 % t-interval] over seeds.",
            markdown_table(header, rows),
            LEGEND,
            tests,
        ]
    )


RENDERERS = {"conformal": render_conformal}
