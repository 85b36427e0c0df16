"""The results tables of docs/results.md and README.md (mean, 95 % t-interval over seeds, seeds per cell) and the
generated claims section, for :mod:`mnp.tools.docgen` (which registers :data:`RENDERERS`).

A cell is ``mean [low, high]`` from ``results/paper_main/results.csv``; a legacy aggregate (a cell from before
runs.csv) is its mean marked † and has neither interval nor test. Claims come from
:func:`mnp.tools.report.report_records.claims` over the committed runs.csv and results.csv.
"""

from __future__ import annotations

from mnp.tools.report.report_paper import paper_values
from mnp.tools.report.report_records import CLAIM_METRICS, UNTESTED
from mnp.tools.report.report_runs import LEGACY, dataset_label, markdown_table, model_label
from mnp.tools.report.stats import higher_is_better

DATASETS = ["handwritten", "cub", "pie", "scene15"]
MAIN = [("test/acc", "acc %", 100, 2), ("test/ece", "ECE", 1, 3), ("noise/acc_mean", "noisy acc %", 100, 2)]
BASELINES = ["mcd", "de_ef", "sngp", "etp", "de_lf", "tmc", "mgp"]
UNITS = {
    k: (label, scale, digits)
    for k, label, scale, digits in [
        *MAIN,
        ("test/nll", "NLL", 1, 3),
        ("cal/test/ece", "ECE, T-scaled", 1, 3),
        ("cal/test/nll", "NLL, T-scaled", 1, 3),
        ("conformal/noise/coverage_mean", "noisy coverage %", 100, 2),
        ("conformal/missing/coverage_mean", "view missing: coverage %", 100, 2),
        ("conformal/test/size", "set size", 1, 2),
    ]
}
LEGEND = (
    "† a legacy aggregate: a cell of results.csv from before per-run records (runs.csv), shown as its mean, "
    "with no interval and no test."
)
ZERO_WIDTH = "‡ every seed gave the same value: the interval has zero width, not an exact result."


def ci_cell(c: dict | None, scale: float, digits: int, count: bool = True) -> str:
    """``mean [low, high] (n)``; the mean alone for one seed, marked † for a legacy aggregate; ``count``: add n."""
    if c is None:
        return "–"
    f = lambda x: f"{x * scale:.{digits}f}"  # noqa: E731
    text = f(c["mean"])
    if c["source"] == LEGACY:
        text += "†"
    elif c["ci"]:
        text += f" [{f(c['ci'][0])}, {f(c['ci'][1])}]" + ("‡" if c["std"] <= 1e-9 * max(1.0, abs(c["mean"])) else "")
    return f"{text} ({c['n']})" if count else text


def _n(res: dict, model: str, dataset: str) -> int:
    c = res.get((model, "", dataset, "test/acc"))
    return c["n"] if c else 0


def with_notes(text: str) -> str:
    notes = [note for mark, note in (("†", LEGEND), ("‡", ZERO_WIDTH)) if mark in text]
    return "\n\n".join([text, *notes])


def _row_cells(res: dict, model: str, dataset: str, cols: list = MAIN) -> list[str]:
    """The ``cols`` cells of a row whose seeds are its test/acc seeds; a cell with another n says its n."""
    n = _n(res, model, dataset)
    out = []
    for k, _, s, g in cols:
        c = res.get((model, "", dataset, k))
        out.append(ci_cell(c, s, g, count=c is not None and c["n"] != n))
    return out


def render_paper_main(src: dict) -> str:
    """MNP and mnp_official against the paper, per dataset."""
    res, paper = src["paper_main"], paper_values()
    rows = []
    for d in DATASETS:
        rows += [[dataset_label(d), f"`{m}`", *_row_cells(res, m, d), _n(res, m, d)] for m in ("mnp", "mnp_official")]
        rows.append(["", "paper", *(f"{paper[('mnp', d, k)] * s:.{g}f}" for k, _, s, g in MAIN), 5])
    table = markdown_table(["dataset", "model", "acc %", "ECE", "noisy acc %", "seeds"], rows)
    return with_notes(table.replace("|  | paper |", "| | paper |"))  # the committed rows of the paper: "| |", unpadded


def render_glance(src: dict) -> str:
    """README: `mnp` against the paper, acc / ECE / noisy acc."""
    res, paper = src["paper_main"], paper_values()
    rows = []
    for d in DATASETS:
        theirs = " / ".join(f"{paper[('mnp', d, k)] * s:.{g}f}" for k, _, s, g in MAIN)
        rows.append([dataset_label(d), *_row_cells(res, "mnp", d), theirs, _n(res, "mnp", d)])
    return with_notes(markdown_table(["dataset", "`mnp` acc %", "ECE", "noisy acc %", "paper", "seeds"], rows))


def render_baselines(src: dict) -> str:
    """Every model here: one table per metric, model × dataset, each cell with its seeds."""
    res = src["paper_main"]
    models = [m for m in BASELINES + ["mnp", "mnp_official"] if any(_n(res, m, d) for d in DATASETS)]
    header, tables = ["model", *map(dataset_label, DATASETS)], []
    for k, label, s, g in MAIN:
        rows = [[model_label(m), *(ci_cell(res.get((m, "", d, k)), s, g) for d in DATASETS)] for m in models]
        tables.append(f"**{label}**\n\n" + markdown_table(header, rows))
    return with_notes("\n\n".join(tables))


def render_digits_c(src: dict) -> str:
    """Every model on digits_c, the offline stand-in for CIFAR10-C, with OOD AUROC against the photos set."""
    res = src["digits_c"]
    cols = [*MAIN, ("ood/photos/auroc", "OOD AUROC (photos)", 1, 3)]
    rows = [
        [model_label(m), *_row_cells(res, m, "digits_c", cols), n]
        for m in [*BASELINES, "mnp", "mnp_official", "mlp"]
        if (n := _n(res, m, "digits_c"))
    ]
    return with_notes(markdown_table(["model", *(label for _, label, _, _ in cols), "seeds"], rows))


def test_text(r: dict) -> str:
    """``p = 0.004; Δ +1.20, 5 seeds`` (``Δ +0.80`` for a legacy aggregate, ``Δ +0.80, 1 seed`` without a test)."""
    _, scale, digits = UNITS[r["metric"]]
    delta = f"Δ {r['difference'] * scale:+.{digits}f}"
    if r["verdict"] == UNTESTED:
        return delta
    seeds = f"{r['n']} seed{'s' if r['n'] != 1 else ''}"
    if r["p_value"] is None:
        return f"{delta}, {seeds}"
    p = p_text(r["p_value"])
    if r.get("p_holm") is not None and r.get("verdict_holm") != r["verdict"]:
        p += f", Holm {p_text(r['p_holm'])[2:]}"  # the family's correction changes the verdict
    return f"{p}; {delta}, {seeds}"


def p_text(p: float) -> str:
    return "p = 0" if p == 0 else "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def claim_text(r: dict) -> str:
    """``holds (p = 0.004; Δ +1.20, 5 seeds)``, ``untested (Δ +0.80)†``, ``too few seeds (Δ +0.80, 1 seed)``; a
    claim whose verdict the Holm correction changes: ``holds → not significant after Holm (p = 0.03, Holm 0.09; ...)``."""
    if r["verdict"] == UNTESTED:
        return f"untested ({test_text(r)})†"
    rows = f"; on the test rows: {r['verdict_rows']}" if r.get("verdict_rows") not in (None, r["verdict"]) else ""
    if r.get("verdict_holm", r["verdict"]) != r["verdict"]:
        return f"{r['verdict']} → {r['verdict_holm']} after Holm ({test_text(r)}{rows})"
    return f"{r['verdict']} ({test_text(r)}{rows})"


def render_claims(src: dict) -> str:
    """ "MNP beats X on M (dataset)" for every model X beside `mnp` in paper_main: each claim's verdict, p and Δ."""
    return claims_table([r for r in src["claims"] if r["experiment"] == "paper_main"])


def claims_table(found: list[dict], beats: str = "MNP beats") -> str:
    """The verdict counts of the claims ``found`` (raw and after Holm), then a table of them: a row per dataset and
    baseline, a column per metric."""
    metrics = [k for k in CLAIM_METRICS if any(r["metric"] == k for r in found)]
    by = {(r["dataset"], r["baseline"], r["metric"]): r for r in found}
    rows = [
        [dataset_label(d), model_label(x), *(claim_text(by[(d, x, k)]) if (d, x, k) in by else "–" for k in metrics)]
        for d, x in dict.fromkeys((r["dataset"], r["baseline"]) for r in found)
    ]
    counts = {v: sum(r["verdict"] == v for r in found) for v in dict.fromkeys(r["verdict"] for r in found)}
    holm = {v: sum(r.get("verdict_holm") == v for r in found) for v in counts}
    summary = (
        f"{len(found)} claims: "
        + ", ".join(f"{v} {n}" for v, n in counts.items())
        + "; with Holm's correction over each (dataset, metric) family: "
        + ", ".join(f"{v} {n}" for v, n in holm.items())
        + "."
    )
    return with_notes(summary + "\n\n" + markdown_table(["dataset", beats, *(UNITS[k][0] for k in metrics)], rows))


QUESTIONS = [
    ("test/acc", "the most accurate"),
    ("test/ece", "the best calibrated (ECE)"),
    ("noise/acc_mean", "the most robust (noisy accuracy)"),
    ("test/nll", "the best NLL"),
]


def render_verdicts(src: dict) -> str:
    """Per dataset and question, `mnp` against the baseline with the best mean (the runner-up where `mnp` is best):
    the paired test of that claim decides the answer."""
    res, by = src["paper_main"], {(r["dataset"], r["baseline"], r["metric"]): r for r in src["claims"]}
    rows = []
    for d in DATASETS:
        for k, question in QUESTIONS:
            _, scale, digits = UNITS[k]
            sign = 1 if higher_is_better(k) else -1
            means = {m: res[(m, "", d, k)]["mean"] for m in BASELINES if (m, "", d, k) in res}
            if (mnp := res.get(("mnp", "", d, k))) is None or not means:
                continue
            best = max(means, key=lambda m: sign * means[m])
            claim = by.get((d, best, k))
            if claim is None:
                continue
            ahead = sign * (mnp["mean"] - means[best]) > 0
            answer = {
                "holds": "**yes**",
                "does not hold": f"**no**: {model_label(best)} is ahead",
                "not significant": f"level with {model_label(best)}",
            }.get(claim["verdict"], f"untested†: {'MNP' if ahead else model_label(best)} ahead by mean")
            rows.append(
                [dataset_label(d), question, ci_cell(mnp, scale, digits, count=False),
                 f"{model_label(best)} {ci_cell(res[(best, '', d, k)], scale, digits, count=False)}",
                 f"{answer} ({test_text(claim)})"]
            )  # fmt: skip
    return with_notes(markdown_table(["dataset", "is MNP …", "MNP", "best baseline", "answer"], rows))


CALIBRATION = [
    ("test/ece", "ECE", 1, 3),
    ("cal/test/ece", "ECE, T-scaled", 1, 3),
    ("test/nll", "NLL", 1, 3),
    ("cal/test/nll", "NLL, T-scaled", 1, 3),
    ("calibration/temperature", "T", 1, 2),
]


def render_calibration(src: dict) -> str:
    """experiment=calibration: raw and temperature-scaled ECE and NLL of each model, and MNP's paired tests."""
    res, found = src["calibration"], [r for r in src["calibration_claims"] if r["metric"].startswith("cal/")]
    datasets = sorted({d for (_, _, d, _) in res}, key=lambda d: (d not in DATASETS, d))
    rows = [
        [dataset_label(d), model_label(m), *(ci_cell(res.get((m, "", d, k)), sc, g) for k, _, sc, g in CALIBRATION)]
        for d in datasets
        for m in [*BASELINES, "mnp"]
        if (m, "", d, "test/ece") in res
    ]
    tests = "".join(
        f"\n- MNP against {model_label(r['baseline'])} on {r['metric']} ({dataset_label(r['dataset'])}): {claim_text(r)}"
        for r in found
    )
    return markdown_table(["dataset", "model", *(label for _, label, _, _ in CALIBRATION)], rows) + (
        "\n" + tests if tests else ""
    )


RENDERERS = {
    "paper_main": render_paper_main,
    "glance": render_glance,
    "baselines": render_baselines,
    "digits_c": render_digits_c,
    "claims": render_claims,
    "calibration": render_calibration,
    "verdicts": render_verdicts,
}
