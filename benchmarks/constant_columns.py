"""Columns constant in the training split of the real datasets, per seed and view (MGP's lengthscale init).

``MNP_DATA_DIR=/work/shared/data python benchmarks/constant_columns.py [--out benchmarks/constant_columns.json]``
builds each dataset as ``python train.py experiment=paper_main model=mgp dataset=<d> seed=<s>`` would (train
split, train-fitted scaling) and lists, per view, the columns whose training values are all equal. Before
the fix in ``baselines/mgp.py:data_lengthscales`` those started at lengthscale 1e-3 and never trained, so
MGP runs on a dataset with any such column must be re-run (docs/method.md §3).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("handwritten", "cub", "pie", "scene15")


def view_report(x) -> dict:
    """One training view: its width, constant columns, how many the old init floored at 1e-3 and the
    smallest std of a varying column over the median std (near 0: a nearly constant column)."""
    varies = x.amax(0) > x.amin(0)
    std = x.std(0)
    floored = int(((std * math.sqrt(x.shape[1])) < 1e-3).sum())
    ratio = round(float(std[varies].min() / std[varies].median()), 3) if varies.any() else None
    return {
        "dim": int(x.shape[1]),
        "n_constant": int((~varies).sum()),
        "constant": (~varies).nonzero().ravel().tolist(),
        "n_floored_before": floored,
        "min_std_over_median": ratio,
    }


def dataset_report(name: str, seed: int) -> dict:
    """Train views of ``dataset=<name> seed=<seed>`` under paper_main, as train.py builds them."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from mnp.cli.builders import build_datamodule

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=paper_main", "model=mgp", f"dataset={name}", f"seed={seed}"])
    _, dm = build_datamodule(cfg)
    return {"n_train": len(dm.train_y), "views": [view_report(x) for x in dm.train_views]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "constant_columns.json"))
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(5)))
    args = ap.parse_args(argv)
    out = {}
    for name in args.datasets:
        seeds = {str(s): dataset_report(name, s) for s in args.seeds}
        affected = [int(s) for s, r in seeds.items() if any(v["n_constant"] for v in r["views"])]
        out[name] = {"rerun_mgp_seeds": affected, "seeds": seeds}
        print(
            name,
            "constant columns per view (seed 0):",
            [v["n_constant"] for v in seeds[str(args.seeds[0])]["views"]],
            "re-run seeds:",
            affected,
            flush=True,
        )
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
