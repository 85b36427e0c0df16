"""Issue 31's goals (MNP at the information ceiling and the best calibrated) against the committed runs, for
docs/results.md (:mod:`mnp.tools.docgen` registers :data:`RENDERERS`).

Each goal row gives MNP's mean, the target, met or missed, and the paired t-test (:mod:`mnp.tools.report.stats`, the
seeds both have) of MNP against the model the target comes from. A goal "within one point of X" is met when MNP's
mean is at least X's mean less 0.01; "the lowest or inside the lowest's interval" when MNP has the lowest mean or
its mean is at most the upper end of the lowest model's 95 % interval. Means per seed: a goal over several σ takes
each seed's mean over them.
"""

from __future__ import annotations

from statistics import mean

from mnp.tools.docgen.docgen_results import BASELINES, DATASETS, UNITS, test_text
from mnp.tools.report.report_records import Records, seed_values
from mnp.tools.report.report_runs import dataset_label, markdown_table, model_label
from mnp.tools.report.stats import higher_is_better, paired_test, t_interval

CEILING = "missing/acc_subsets_mean"  # the noised views removed (noise_figure's ceiling)
HIGH_SIGMAS = ("2.154", "4.642", "10")  # σ ≥ 2 of the noise protocol's logspace(-2, 1, 10)
POINT = 0.01  # one accuracy point


def per_seed(records: Records, experiment: str, model: str, dataset: str, metrics: list[str]) -> dict[int, float]:
    """seed -> mean of ``metrics`` (seeds that have every one) of ``model``'s default variant."""
    cols = [seed_values(records, (experiment, model, None, dataset), k) for k in metrics]
    seeds = set.intersection(*(set(c) for c in cols))
    return {s: mean(c[s] for c in cols) for s in sorted(seeds)}


def goal_row(dataset: str, goal: str, unit: str, ours: dict, rival: str, theirs: dict, target: float) -> list[str]:
    """One row: MNP's mean, the target (from ``rival``'s runs ``theirs``), met or missed by how much, the test;
    ``unit``, a metric of :data:`UNITS`, gives the direction and the format (accuracies in %)."""
    _, scale, digits = UNITS[unit]
    f = lambda x: f"{scale * x:.{digits}f}"  # noqa: E731
    ours_mean = mean(ours.values())
    gap = (target - ours_mean) if higher_is_better(unit) else (ours_mean - target)
    status = "**met**" if gap <= 0 else f"missed by {f(gap)}"
    t = paired_test(ours, theirs)
    test = test_text({"metric": unit, "difference": t.difference, "p_value": t.p_value, "n": t.n, "verdict": ""})
    rival = model_label(rival)
    return [dataset_label(dataset), goal, f(ours_mean), f"{f(target)} ({rival})", status, f"MNP − {rival}: {test}"]


def ceiling_rows(records: Records, ceiling: dict) -> list[list[str]]:
    """CUB's single views against MGP's and its noisy accuracy at σ ≥ 2 against the ceiling; Scene15's accuracy at
    σ = 1 and 2.15 against MGP's."""
    rows = []
    pm = lambda model, d, ks: per_seed(records, "paper_main", model, d, ks)  # noqa: E731
    for removed, alone in ((0, 1), (1, 0)):
        k = [f"missing/acc@v{removed}"]
        ours, mgp = pm("mnp", "cub", k), pm("mgp", "cub", k)
        if ours and mgp:
            goal = f"view {alone} alone at least MGP's"
            rows.append(goal_row("cub", goal, "test/acc", ours, "mgp", mgp, mean(mgp.values())))
    top = (ceiling.get("cub") or {}).get("ceiling")
    ours = pm("mnp", "cub", [f"noise/acc@{s}" for s in HIGH_SIGMAS])
    if top and ours and (theirs := pm(top["model"], "cub", [CEILING])):
        rows.append(
            goal_row("cub", "accuracy at σ ≥ 2 within 1 point of the ceiling", "test/acc", ours, top["model"],
                     theirs, mean(theirs.values()) - POINT)
        )  # fmt: skip
    for sigma, label in (("1", "1"), ("2.154", "2.15")):
        k = [f"noise/acc@{sigma}"]
        ours, mgp = pm("mnp", "scene15", k), pm("mgp", "scene15", k)
        if ours and mgp:
            goal = f"accuracy at σ = {label} within 1 point of MGP's"
            rows.append(goal_row("scene15", goal, "test/acc", ours, "mgp", mgp, mean(mgp.values()) - POINT))
    return rows


def ece_rows(records: Records, experiment: str, metric: str, goal: str, within_interval: bool) -> list[list[str]]:
    """Per dataset, MNP's ``metric`` against the lowest baseline mean: at most it, or (``within_interval``) MNP the
    lowest or inside the lowest's 95 % interval (the runner-up's test where MNP is the lowest)."""
    rows = []
    for d in DATASETS:
        ours = per_seed(records, experiment, "mnp", d, [metric])
        others = {m: v for m in BASELINES if (v := per_seed(records, experiment, m, d, [metric]))}
        if not ours or not others:
            continue
        best = min(others, key=lambda m: mean(others[m].values()))
        target = mean(others[best].values())
        if within_interval and mean(ours.values()) > target:
            target = (t_interval(list(others[best].values())) or (target, target))[1]
        rows.append(goal_row(d, goal, metric, ours, best, others[best], target))
    return rows


def render_ceiling_goals(src: dict) -> str:
    """Issue 31's goals, one row each (main table's runs, and experiment=calibration's for the T-scaled ECE)."""
    rows = ceiling_rows(src["records"], src["noise_curves"])
    rows += ece_rows(src["records"], "paper_main", "test/ece", "raw ECE at most the best baseline's", False)
    rows += ece_rows(
        src["calibration_records"],
        "calibration",
        "cal/test/ece",
        "T-scaled ECE the lowest or inside the lowest's interval",
        True,
    )
    return markdown_table(["dataset", "goal", "MNP", "target", "status", "paired test"], rows)


RENDERERS = {"ceiling_goals": render_ceiling_goals}
