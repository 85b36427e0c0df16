"""MNP's view weighting at test time on trained runs: eq. 8 against eq. 8′ (``view_weighting=distance``) over a
grid of ``distance_quantile`` × ``distance_power``.

The switch acts at inference only, so one trained checkpoint per seed serves every variant: each is
loaded (``mnp.cli.run_loading.load_run``), given the variant's settings and its reference distance from the
training set, and tested with the full protocol (clean, noise, missing views) by Lightning's test loop.

    MNP_DATA_DIR=../shared/data python benchmarks/view_weighting.py <run dir>... --out benchmarks/view_weighting_cub.json

Each run directory needs ``checkpoints/last.ckpt`` (``callbacks.checkpoint.every_n_epochs`` a divisor of the
run's epochs). The JSON holds every seed's metrics per variant; docs/switches.md is generated from it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mnp.cli.run_loading import load_finished_run  # noqa: E402
from mnp.tools.select.select import view_weighting_variants  # noqa: E402

KEPT = ("test/acc", "test/ece", "noise/acc_mean", "missing/acc_subsets_mean")


def variants() -> dict[str, dict]:
    """The grid of mnp.tools.select (eq. 8 and eq. 8′ over q × p), named as the committed JSONs name them."""
    return {name.removeprefix("view_weighting="): settings for name, settings in view_weighting_variants().items()}


def evaluate_variants(run_dir: Path) -> dict:
    """{variant: metrics} of one run's last.ckpt under every variant."""
    _, model_name, dataset, dm, model, _ = load_finished_run(run_dir)
    if model_name != "mnp":
        raise ValueError(f"{run_dir} is a {model_name} run; view_weighting is a switch of mnp")
    dm.setup("test")
    if not hasattr(model, "distance_ref"):
        model.register_buffer("distance_ref", torch.full((len(model.view_dims),), float("nan")))
    out = {}
    for name, settings in variants().items():
        model.spec = model.spec.replace("aggregation.view_weighting", **settings)
        if settings["mode"] == "distance":
            model.update_distance_reference(dm.train_views)
        trainer = pl.Trainer(
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            accelerator="cpu",
        )
        trainer.test(model, datamodule=dm, verbose=False)
        r = model.test_results
        out[name] = {k: v for k, v in r.items() if k in KEPT or k.startswith("noise/acc@")}
    return {
        "dataset": dataset,
        "seed": int(json.loads((run_dir / "metrics.json").read_text())["seed"]),
        "variants": out,
    }


def summary(runs: list[dict]) -> dict:
    """Mean over seeds of every kept metric, per variant."""
    names = runs[0]["variants"].keys()
    return {n: {k: float(np.mean([r["variants"][n][k] for r in runs])) for k in runs[0]["variants"][n]} for n in names}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of model=mnp (one dataset)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    runs = []
    for d in args.runs:
        runs.append(evaluate_variants(d))
        print(f"{d}: done", flush=True)
    if len({r["dataset"] for r in runs}) != 1:
        raise SystemExit("error: the runs are of several datasets; give one dataset's runs")
    result = {
        "dataset": runs[0]["dataset"],
        "seeds": sorted(r["seed"] for r in runs),
        "command": "python benchmarks/view_weighting.py " + " ".join(str(d) for d in args.runs),
        "mean": summary(runs),
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, m in result["mean"].items():
        print(
            f"{name:24s} acc {100 * m['test/acc']:.2f}  ECE {m['test/ece']:.3f}  noisy {100 * m['noise/acc_mean']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
