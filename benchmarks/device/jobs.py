"""The jobs of a device sweep, one `train.py -m` argument list per line, longest and most needed first.

    python3 benchmarks/device/jobs.py select   # stage 1: the selection runs of the decisions still open
    python3 benchmarks/device/jobs.py final    # stage 2: paper_main, seeds 0-9, every model on the four datasets, seed by seed

Stage 1 trains every candidate of results/decisions/open.csv's MNP decisions on validation rows
(experiment=select, docs/method.md §5.4), five seeds each; `benchmarks/device/run.sh` keeps their checkpoints and
then writes the decision records on the device (`mnp.tools.select decide` and `infer`). Stage 2 runs once the
records are committed and conf/ holds the chosen settings: the reported runs, which read the test split once.
"""

import sys

SEEDS_SELECT, SEEDS_FINAL = range(5), range(10)
MODELS = ("mnp", "mgp", "sngp", "etp", "mcd", "de_ef", "de_lf", "tmc", "mnp_official")
DATASETS = ("scene15", "pie", "handwritten", "cub")  # the longest first
# one-at-a-time candidates around today's defaults, per dataset: the decisions of results/decisions/open.csv
CANDIDATES = {
    "handwritten": [
        "",
        "model.aggregation.modality_mask=false",
        "model.warmup.lr=0.001",
        "model.attention.lengthscale_form=l2",
        "model.encoder.projection=none",
        "model.warmup.epochs=0",
    ],
    "pie": [
        "",
        "model.loss.rbf_reduce=mean model.loss.lengthscale_penalty=norm model.loss.self_in_denominator=false",
        "model.warmup.lr=0.001",
        "model.aggregation.modality_mask=true",
        "model.attention.lengthscale_form=l2",
        "model.encoder.projection=none",
        "model.warmup.epochs=0",
    ],
    "scene15": [
        "",
        "model.aggregation.modality_mask=false",
        "model.warmup.lr=0.001",
        "model.aggregation.view_dropout=0.25",  # CUB's single-view fix; Scene15's noisy accuracy is at its 2-view cap
        "model.attention.lengthscale_form=l2",
        "model.encoder.projection=none",
        "model.warmup.epochs=0",
    ],
}


def select_jobs() -> list[str]:
    return [
        f"experiment=select model=mnp dataset={d} seed={s} {c}".strip()
        for s in SEEDS_SELECT
        for d in CANDIDATES
        for c in CANDIDATES[d]
    ]


def final_jobs() -> list[str]:
    return [
        f"experiment=paper_main model={m} dataset={d} seed={s}" for s in SEEDS_FINAL for m in MODELS for d in DATASETS
    ]


if __name__ == "__main__":
    stage = sys.argv[1] if len(sys.argv) > 1 else "final"
    if stage not in ("select", "final"):
        raise SystemExit(f"error: the stage is select or final, got {stage!r}")
    print("\n".join(select_jobs() if stage == "select" else final_jobs()))
