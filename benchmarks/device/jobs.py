"""The jobs of a device sweep, one `train.py -m` argument list per line, longest and most needed first.

    python3 benchmarks/device/jobs.py select             # stage 1: the selection runs of the decisions still open
    python3 benchmarks/device/jobs.py screen DATASET     # one dataset's whole screen, as its selection script ran it
    python3 benchmarks/device/jobs.py final              # stage 2: paper_main, seeds 0-9, every model, seed by seed

Stage 1 trains, on validation rows (experiment=select, docs/method.md §5.4, five seeds each), the screen of every
dataset that results/decisions/open.csv still lists a training decision for, and mnp_official where its
`configuration` decision is open; a dataset whose decisions are all made has no jobs. `benchmarks/device/run.sh`
keeps their checkpoints and then writes the decision records on the device (benchmarks/device/decide.py). Stage 2
runs once the records are committed and conf/ holds the chosen settings: the reported runs, which read the test
split once.
"""

import csv
import sys
from pathlib import Path

OPEN = Path(__file__).resolve().parents[2] / "results" / "decisions" / "open.csv"
SEEDS_SELECT, SEEDS_FINAL = range(5), range(10)
MODELS = ("mnp", "mgp", "sngp", "etp", "mcd", "de_ef", "de_lf", "tmc", "mnp_official")
DATASETS = ("scene15", "pie", "handwritten", "cub")  # the longest first
RIVAL = "mnp_official"  # the decision `configuration`: the authors' whole configuration against mnp's defaults
# each dataset's one-at-a-time screen around its defaults: decision name (as in results/decisions/) -> candidate
SCREENS = {
    "scene15": {
        "modality_mask": "model.aggregation.modality_mask=false",
        "warmup_lr": "model.warmup.lr=0.001",
        "view_dropout": "model.aggregation.view_dropout=0.25",  # CUB's single-view fix (issue 31)
        "lengthscale_form": "model.attention.lengthscale_form=l2",
        "projection": "model.encoder.projection=none",
        "warmup_epochs": "model.warmup.epochs=0",
    },
    "pie": {
        "rbf_reduce": "model.loss.rbf_reduce=mean model.loss.lengthscale_penalty=norm model.loss.self_in_denominator=false",
        "warmup_lr": "model.warmup.lr=0.001",
        "modality_mask": "model.aggregation.modality_mask=true",
        "lengthscale_form": "model.attention.lengthscale_form=l2",
        "projection": "model.encoder.projection=none",
        "warmup_epochs": "model.warmup.epochs=0",
    },
    "handwritten": {
        "modality_mask": "model.aggregation.modality_mask=false",
        "warmup_lr": "model.warmup.lr=0.001",
        "lengthscale_form": "model.attention.lengthscale_form=l2",
        "projection": "model.encoder.projection=none",
        "warmup_epochs": "model.warmup.epochs=0",
    },
}


def open_decisions(path: Path = OPEN) -> dict[str, set[str]]:
    """MNP's decisions still open, per dataset (results/decisions/open.csv)."""
    found: dict[str, set[str]] = {}
    for row in csv.DictReader(path.open()) if path.exists() else ():
        if row["model"] == "mnp":
            found.setdefault(row["dataset"], set()).add(row["decision"])
    return found


def screen_jobs(dataset: str, seeds=SEEDS_SELECT) -> list[str]:
    """The dataset's whole screen: the defaults and each candidate of SCREENS, seed by seed."""
    return [
        f"experiment=select model=mnp dataset={dataset} seed={s} {c}".strip()
        for s in seeds
        for c in ("", *SCREENS[dataset].values())
    ]


def select_jobs(path: Path = OPEN) -> list[str]:
    """The screens of the datasets with an open training decision, and the rival's runs where `configuration` is."""
    still_open = open_decisions(path)
    screened = [d for d in SCREENS if still_open.get(d, set()) & set(SCREENS[d])]
    rivals = [d for d in SCREENS if "configuration" in still_open.get(d, set())]
    return [
        *[job for s in SEEDS_SELECT for d in screened for job in screen_jobs(d, [s])],
        *[f"experiment=select model={RIVAL} dataset={d} seed={s}" for s in SEEDS_SELECT for d in rivals],
    ]


def final_jobs() -> list[str]:
    return [
        f"experiment=paper_main model={m} dataset={d} seed={s}" for s in SEEDS_FINAL for m in MODELS for d in DATASETS
    ]


if __name__ == "__main__":
    stage = sys.argv[1] if len(sys.argv) > 1 else "final"
    if stage == "screen" and len(sys.argv) == 3 and sys.argv[2] in SCREENS:
        print("\n".join(screen_jobs(sys.argv[2])))
    elif stage in ("select", "final"):
        print("\n".join(select_jobs() if stage == "select" else final_jobs()))
    else:
        raise SystemExit(
            f"error: the stage is select, final or screen DATASET ({', '.join(SCREENS)}), got {sys.argv[1:]}"
        )
