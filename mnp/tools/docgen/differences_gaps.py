"""The gaps of :mod:`mnp.tools.docgen.differences`: for each (dataset, model, metric), the hypothesis, the experiment's
command, and the evidence function that turns the committed files into its outcome and status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import mean

from scipy import stats

ACC, NOISY, ECE = "test/acc", "noise/acc_mean", "test/ece"
TRAIN = "MNP_DATA_DIR=../shared/data MNP_TORCH_THREADS=1 python train.py -m experiment=paper_main"


@dataclass
class Context:
    paper: dict  # (model, dataset, metric) -> value
    ours: dict  # results/paper_main/results.csv: (model, variant, dataset, metric) -> cell
    runs: dict  # results/paper_main/runs.csv: (experiment, model, dataset, variant, seed) -> {metric: value}
    earlier: dict  # results/switches/results.csv, as ours
    tmc: dict  # (dataset, definition) -> [ECE per run]
    flips: dict  # experiment name -> runs.csv records of its re-runs
    bench: dict  # machine -> {dataset: ratios}
    tuned: dict | None = None  # results/paper_tuned/runs.csv (issue 44's tables at the tuned defaults), as runs

    def speedup(self, dataset: str, kind: str) -> float | None:
        """MGP time / MNP time of the paper_main cells (the mean over their runs), as the report's Table 5."""
        key = "time/test_s" if kind == "test" else "time/train_epoch_s"
        a, b = (self.ours.get((m, "", dataset, key)) for m in ("mgp", "mnp"))
        return a["mean"] / b["mean"] if a and b else None

    def seeds(self, records: dict, model: str, dataset: str, variant: str | None, metric: str) -> dict[int, float]:
        return {s: x[metric] for (_, m, d, v, s), x in records.items() if (m, d, v) == (model, dataset, variant)
                and metric in x}  # fmt: skip


@dataclass
class Gap:
    dataset: str
    model: str
    metric: str
    hypothesis: str
    experiment: str
    evidence: Callable[[Context, Gap], tuple[str, str]]


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _paired(a: dict[int, float], b: dict[int, float]) -> str:
    """``Δ +x.xx points (p = ..., n seeds)`` of a − b over the seeds both have."""
    shared = sorted(set(a) & set(b))
    diff = [100 * (a[s] - b[s]) for s in shared]
    p = stats.ttest_rel([a[s] for s in shared], [b[s] for s in shared]).pvalue if len(shared) > 1 else float("nan")
    return f"Δ {mean(diff):+.2f} points (p = {p:.2g}, {len(shared)} seeds)" if diff else "no shared seeds"


# ---------------------------------------------------------------------------- evidence
def scene15(ctx: Context, gap: Gap) -> tuple[str, str]:
    """ETP with one data switch flipped against its committed cell's seeds: does any bring it to the paper's?"""
    runs = ctx.flips.get("scene15_etp") or {}
    if not runs:
        return "not run yet", "not explained"
    base = ctx.seeds(ctx.runs, "etp", "scene15", None, gap.metric)
    paper = ctx.paper[("etp", "scene15", gap.metric)]
    parts, near = [], []
    for variant in sorted({v for (_, _, _, v, _) in runs if v}):
        flip = ctx.seeds(runs, "etp", "scene15", variant, gap.metric)
        closed = (mean(base.values()) - mean(flip.values())) / (mean(base.values()) - paper)
        parts.append(f"{variant}: {_pct(mean(flip.values()))} ({_paired(flip, base)}; {closed:.0%} of the gap)")
        near.append(abs(mean(flip.values()) - paper) < abs(mean(base.values()) - paper) / 2)
    ruled_out = (
        ". Ruled out: the authors' test-only scaling, the scaling itself and the split (the index files against a "
        "stratified split from the seed) each move ETP by a fraction of the gap; not tested: other feature files, "
        "the baselines' training budgets in the authors' scripts"
    )
    return (
        ("" if gap.model == "etp" else "Measured on ETP, the cheapest baseline, for every model: ")
        + f"ETP ({gap.metric}; paper {_pct(paper)}, ours {_pct(mean(base.values()))} over {len(base)} seeds), one data switch "
        "flipped at a time: " + "; ".join(parts) + ("" if any(near) else ruled_out),
        "partly explained" if any(near) else "not explained",
    )


def pie_mnp(ctx: Context, gap: Gap) -> tuple[str, str]:
    """The legacy cell of the defaults chosen on the test split (results/switches) against the paper's."""
    legacy = ctx.earlier.get(("mnp", "", "pie", gap.metric))
    paper, ours = ctx.paper[(gap.model, "pie", gap.metric)], ctx.ours[(gap.model, "", "pie", gap.metric)]
    if legacy is None:
        return "no earlier cell", "not explained"
    before, after = 100 * (paper - ours["mean"]), 100 * (paper - legacy["mean"])
    return (
        f"The defaults chosen on the test split (the legacy {legacy['n']}-seed cell of results/switches) scored "
        f"{_pct(legacy['mean'])}, chosen on validation rows {_pct(ours['mean'])}, the paper {_pct(paper)}: choosing on "
        f"the test split takes the gap from {before:.2f} to {after:.2f} points. Not tested: the split (136 test rows, "
        "one row 0.74 points; the authors' split is unpublished)",
        "explained" if abs(after) < 0.5 else "partly explained",
    )


def official_eq8(ctx: Context, gap: Gap) -> tuple[str, str]:
    """mnp_official has eq. 8; `mnp` gains from eq. 8′: both against the paper, and the CUB switch flips."""
    runs = ctx.flips.get("cub_official") or {}
    if gap.dataset != "cub" or not runs:
        ours, ref = (
            ctx.ours[("mnp_official", "", gap.dataset, gap.metric)],
            ctx.ours[("mnp", "", gap.dataset, gap.metric)],
        )
        return (
            f"`mnp` (eq. 8′, chosen on validation rows) scores {_pct(ref['mean'])}, `mnp_official` (eq. 8) "
            f"{_pct(ours['mean'])}: both below the paper's; see `mnp`'s row for what is left",
            "partly explained",
        )
    base = {k: ctx.seeds(runs, "mnp_official", "cub", None, k) for k in (NOISY, "noise/acc@2.154", "noise/acc@10")}
    parts, moved = [], []
    for variant in sorted({v for (_, _, _, v, _) in runs if v}):
        flip = {k: ctx.seeds(runs, "mnp_official", "cub", variant, k) for k in base}
        short = variant.split(",")[0] if "view_weighting" in variant else variant
        parts.append(
            f"{short}: noisy acc {_paired(flip[NOISY], base[NOISY])}, at σ = 2.15 {_pct(mean(flip['noise/acc@2.154'].values()))}"
        )
        moved.append(mean(flip["noise/acc@2.154"].values()) - mean(base["noise/acc@2.154"].values()) > 0.1)
    return (
        f"The authors' configuration re-run (seeds {sorted(base[NOISY])}): noisy acc {_pct(mean(base[NOISY].values()))}, "
        f"{_pct(mean(base['noise/acc@2.154'].values()))} at σ = 2.15 and {_pct(mean(base['noise/acc@10'].values()))} at "
        "σ = 10 (the dip). One switch flipped at a time: "
        + "; ".join(parts)
        + ". The dip is eq. 8's: MBA keeps a noised "
        "view's weight (docs/diagnosis.md); eq. 8′ flattens it but costs clean accuracy here (the noisy mean stays), "
        "and none of the four quirks flipped causes it. Not tested: the authors' other switches (docs/switches.md). "
        "No setting reaches the paper's 88.96 %",
        "partly explained" if any(moved) else "not explained",
    )


MGP_STEPS = {"cub": (100, 0.75), "pie": (100, 0.30), "scene15": (30, 0.08)}


def mgp_budget(ctx: Context, gap: Gap) -> tuple[str, str]:
    """MGP at the authors' steps (seeds 0-2, against the cell's same seeds) and at its tuned defaults (issue 44,
    seeds 0-9): how much of the gap each closes; the status is the larger closure's."""
    epochs, share = MGP_STEPS[gap.dataset]
    found = [_mgp_full(ctx, gap), _mgp_tuned(ctx, gap)]
    found = [f for f in found if f]
    cut = f"MGP's epochs were cut for CPU time to {epochs}, {share:.0%} of the authors' steps"
    if not found:
        return f"Not run yet: {cut}; the tuning issue (44) re-runs MGP with up to 4x these epochs", "not explained"
    status = _closed_status(max(closed for _, closed in found))
    ruled_out = "; ruled out: the budget and the tuned settings, on these seeds" if status == "not explained" else ""
    return f"{cut}. " + "; ".join(text for text, _ in found) + ruled_out, status


def _closed_status(closed: float) -> str:
    return "explained" if closed >= 0.8 else "partly explained" if closed >= 0.25 else "not explained"


def _mgp_full(ctx: Context, gap: Gap) -> tuple[str, float] | None:
    runs = ctx.flips.get(f"mgp_{gap.dataset}_full") or {}
    variants = sorted({v for (_, _, _, v, _) in runs if v})
    if not variants:
        return None
    base = ctx.seeds(ctx.runs, "mgp", gap.dataset, None, gap.metric)
    full = ctx.seeds(runs, "mgp", gap.dataset, variants[0], gap.metric)
    paper = ctx.paper[("mgp", gap.dataset, gap.metric)]
    shared = sorted(set(base) & set(full))
    before = mean(base[s] for s in shared)
    closed = (mean(full[s] for s in shared) - before) / (paper - before)
    return (
        f"At the authors' steps ({variants[0]}): {_pct(mean(full.values()))} against {_pct(before)} on the same "
        f"seeds ({_paired(full, base)}), {closed:.0%} of the gap to the paper's {_pct(paper)}",
        closed,
    )


def _mgp_tuned(ctx: Context, gap: Gap) -> tuple[str, float] | None:
    tuned = ctx.seeds(ctx.tuned or {}, "mgp", gap.dataset, None, gap.metric)
    if not tuned:
        return None
    base = list(ctx.seeds(ctx.runs, "mgp", gap.dataset, None, gap.metric).values())
    paper, before, after = ctx.paper[("mgp", gap.dataset, gap.metric)], mean(base), mean(tuned.values())
    closed = (after - before) / (paper - before)
    p = stats.ttest_ind(list(tuned.values()), base, equal_var=False).pvalue
    return (
        f"at its tuned defaults (experiment=paper_tuned: the same-budget study's epochs, learning rate, inducing "
        f"points, α_ε and KL weight; results/paper_tuned): {_pct(after)} over {len(tuned)} seeds against "
        f"{_pct(before)} (Welch p = {p:.2g}), {closed:.0%} of the gap",
        closed,
    )


def mgp_hw_ece(ctx: Context, gap: Gap) -> tuple[str, str]:
    """The training length (chosen on validation rows), MGP re-run at today's code and with each official test
    weighting (``mgp_handwritten_weights``, seeds 0-2, against the cell's same seeds), and the ECE a perfectly
    calibrated model with the re-run's confidences scores on the same 400 rows (``test/ece_floor``)."""
    length = (
        "MGP's epochs were chosen on validation rows (results/decisions/mgp_handwritten.csv): val ECE 0.013, 0.011, "
        "0.012, 0.015 at 10, 20, 50, 100 epochs, none near 0.006: the training length is ruled out as the cause"
    )
    runs = ctx.flips.get("mgp_handwritten_weights") or {}
    if not runs:
        return (
            f"{length}. The paper_main MGP rows predate the fix of the entropy weights; not re-run yet",
            "not explained",
        )
    base = ctx.seeds(ctx.runs, "mgp", gap.dataset, None, gap.metric)
    paper, parts = ctx.paper[("mgp", gap.dataset, gap.metric)], []
    for variant in sorted({v for (_, _, _, v, _) in runs}, key=lambda v: v or ""):
        found = ctx.seeds(runs, "mgp", gap.dataset, variant, gap.metric)
        shared = sorted(set(found) & set(base))
        if not shared:
            continue
        before, after = mean(base[s] for s in shared), mean(found[s] for s in shared)
        name = variant or "today's code (entropy weights by magnitude)"
        if all(found[s] == base[s] for s in shared):
            parts.append(f"{name}: {after:.3f}, the cell's ECE on every seed")
            continue
        p = stats.ttest_rel([found[s] for s in shared], [base[s] for s in shared]).pvalue if len(shared) > 1 else 1
        side = "closer to" if abs(after - paper) < abs(before - paper) else "farther from"
        parts.append(
            f"{name}: {after:.3f} against {before:.3f} (paired p = {p:.2g}, {len(shared)} seeds), {side} the paper"
        )
    floor = ctx.seeds(runs, "mgp", gap.dataset, None, "test/ece_floor")
    text = f"{length}. Re-run (seeds 0-2): " + "; ".join(parts) + "; ruled out: the test weighting"
    if floor and mean(floor.values()) > paper:
        return (
            f"{text}. A perfectly calibrated model with the re-run's confidences scores ECE {mean(floor.values()):.3f} "
            f"on these 400 test rows (test/ece_floor): most of ours is the binned estimator's bias, and the paper's "
            f"{paper:.3f} needs sharper confidences, not better calibration; why the paper's MGP is sharper is not known",
            "partly explained",
        )
    return text, "not explained"


TMC_NAMES = {
    "dirichlet_mean": "Dirichlet mean α/S (ours)",
    "belief": "belief masses b",
    "belief_normalised": "normalised belief masses b/Σb",
    "softmax_evidence": "softmax of the evidence",
}


def tmc_ece(ctx: Context, gap: Gap) -> tuple[str, str]:
    """Which probability reading of TMC's fused opinion gives the paper's ECE (within 0.01 or 15 %)."""
    paper = ctx.paper[("tmc", gap.dataset, ECE)]
    found = {d: mean(v) for (ds, d), v in ctx.tmc.items() if ds == gap.dataset}
    if not found:
        return "not run on this dataset", "not explained"
    n = len(ctx.tmc[(gap.dataset, "dirichlet_mean")])
    match = [d for d, v in found.items() if abs(v - paper) <= max(0.01, 0.15 * paper)]
    text = f"ECE over {n} re-run seeds: " + ", ".join(f"{TMC_NAMES[d]} {v:.3f}" for d, v in found.items())
    if match:
        return (
            f"{text}; the paper's {paper:.3f} is matched by the {TMC_NAMES[match[0]]} (switch model.probability)",
            "explained",
        )
    lo, hi = min(found.values()), max(found.values())
    inside = lo <= paper <= hi
    acc = 100 * (ctx.ours[("tmc", "", gap.dataset, ACC)]["mean"] - ctx.paper[("tmc", gap.dataset, ACC)])
    return (
        f"{text}; no reading gives the paper's {paper:.3f}"
        + (" (it lies between them)" if inside else "")
        + f"; our accuracy is {acc:+.2f} points from the paper's, so its runs differ in more than the reading",
        "partly explained" if inside else "not explained",
    )


def test_time(ctx: Context, gap: Gap) -> tuple[str, str]:
    cpu = ctx.bench["cpu"].get(gap.dataset, {})
    gpu = ctx.bench["h200"].get(gap.dataset, {})
    paper = ctx.paper[("mnp", gap.dataset, gap.metric)]
    ok = gpu and paper / 2 <= gpu["mgp_over_mnp_test"] <= 2 * paper
    return (
        "The paper_main times come from runs on different machines and loads (docs/results.md, How the cells were "
        "made) and MNP's S of prediction is 10-20 on three datasets: not a controlled ratio. Controlled (the bench, same machine, same rounds): "
        f"CPU {cpu.get('mgp_over_mnp_test', float('nan')):.2f}x "
        f"({cpu.get('mgp_over_mnp_test_context_reused', float('nan')):.2f}x with the context reused), "
        f"H200 {gpu.get('mgp_over_mnp_test', float('nan')):.2f}x against the paper's {paper:.2f}x: the paper's "
        "ratio is a GPU's",
        "explained" if ok else "partly explained",
    )


ADDITIONS = {
    "handwritten": "eq. 8′ (q = 1, p = 2), S = 20 at prediction",
    "cub": "eq. 8′ (q = 0.9, p = 2), view dropout 0.25, N^m = 400 (paper 200), no warm-up, S = 10 at prediction",
    "pie": "eq. 8′ (q = 0.99, p = 1)",
    "scene15": "the authors' training settings, eq. 8′ (q = 0.99, p = 1), S = 20 at prediction",
}


def additions(ctx: Context, gap: Gap) -> tuple[str, str]:
    return (
        f"Labelled MNP (paper + eq. 8′, CUB: view dropout) in every table and figure; on this dataset: "
        f"{ADDITIONS[gap.dataset]} (docs/switches.md). `mnp_official` is labelled the authors' code",
        "explained",
    )


# ---------------------------------------------------------------------------- the gaps
H_SCENE15 = (
    "Every model gains alike, so the data pipeline, not the models: the paper's feature preprocessing or split "
    "differs from ours (standard scaling fitted on the training rows, Trust4Conflict's index files)"
)
X_SCENE15 = "bash benchmarks/differences/scene15_preprocessing.sh <logs>"
H_PIE = "The paper's defaults were chosen on the test split; ours on validation rows (and the split differs)"
X_PIE = "the legacy cell of results/switches/results.csv (defaults chosen on the test split, session 10)"
H_OFFICIAL = "The authors' eq. 8 keeps a noised view's weight in MBA; one of their quirks may add to it"
X_OFFICIAL = "bash benchmarks/differences/cub_official_noise.sh <logs>"
H_MGP = "MGP's epochs were cut for CPU time below the authors' steps"
H_MGP_ECE = (
    "MGP's training length, the entropy weights of its experts as the official code signs them, or the binned ECE's "
    "bias on 400 rows"
)
X_MGP_ECE = "bash benchmarks/selection/baselines.sh (epochs, done); bash benchmarks/differences/mgp_handwritten_weights.sh <logs>"
H_TMC = "The paper's evaluation read TMC's fused opinion as another probability than the Dirichlet mean"
X_TMC = (
    f"{TRAIN} model=tmc dataset=handwritten,cub,pie,scene15 seed=0,1,2; python "
    "benchmarks/research/tmc_probabilities.py <runs> --out results/differences/tmc_ece.csv"
)
H_TIME = "The paper timed a GPU; the table's times mix machines and loads"
X_TIME = "python -m mnp.tools.bench --models mnp mgp (benchmarks/bench_cpu.json; on an H200: benchmarks/h200_9de9874)"
SCENE15_MODELS = ["mcd", "de_ef", "sngp", "etp", "de_lf", "tmc", "mgp", "mnp", "mnp_official"]


def _mgp_cmd(d: str) -> str:
    epochs, share = MGP_STEPS[d]
    return (
        f"bash benchmarks/differences/mgp_full_steps.sh <logs> {d} {round(epochs / share)} (seeds 0-2); "
        f"python train.py -m experiment=paper_tuned model=mgp dataset={d} (seeds 0-9)"
    )


GAPS = [
    *[Gap("scene15", m, k, H_SCENE15, X_SCENE15, scene15) for m in SCENE15_MODELS for k in (ACC, NOISY)],
    *[Gap("pie", "mnp", k, H_PIE, X_PIE, pie_mnp) for k in (ACC, NOISY)],
    *[Gap("pie", "mnp_official", k, H_OFFICIAL, X_OFFICIAL, official_eq8) for k in (ACC, NOISY)],
    *[Gap("pie", "mgp", k, H_MGP, _mgp_cmd("pie"), mgp_budget) for k in (ACC, NOISY)],
    Gap("cub", "mnp_official", NOISY, H_OFFICIAL, X_OFFICIAL, official_eq8),
    Gap("cub", "mgp", ACC, H_MGP, _mgp_cmd("cub"), mgp_budget),
    Gap("handwritten", "mgp", ECE, H_MGP_ECE, X_MGP_ECE, mgp_hw_ece),
    *[Gap(d, "tmc", ECE, H_TMC, X_TMC, tmc_ece) for d in ("handwritten", "cub", "pie", "scene15")],
    *[Gap(d, "mnp", "speed-up/test", H_TIME, X_TIME, test_time) for d in ("handwritten", "cub", "pie", "scene15")],
    *[Gap(d, "mnp", "configuration", "`mnp` carries additions the paper does not have", "docs/switches.md",
          additions) for d in ("handwritten", "cub", "pie", "scene15")],
]  # fmt: skip
