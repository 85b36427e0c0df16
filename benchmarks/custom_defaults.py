"""Every model's defaults on your own data, on four small scikit-learn sets split into views.

``python benchmarks/custom_defaults.py [--out benchmarks/custom_defaults.json]`` writes wine (2 views: 7 + 6
columns), iris (2 + 2), breast_cancer (3 views of 10: means, standard errors, worst values) and digits (the
left and right halves of each 8×8 image) as ``.npz`` files (the ``dataset=custom`` format), trains every model
on each with nothing but ``dataset=custom dataset.path=<file>`` (a run sized by optimiser steps), and with
``--before`` also with the fixed epochs those defaults replaced (60 for mnp, 20 for the others), and records
test accuracy, ECE, noisy accuracy, epochs and wall time. One thread per run (``MNP_TORCH_THREADS=1``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["mnp", "mnp_official", "mlp", "mcd", "de_ef", "de_lf", "sngp", "etp", "tmc", "mgp"]
BEFORE = {"mnp": 60, "mnp_official": 60}  # the fixed trainer.max_epochs on custom data before; 20 for the others


def wine() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_wine

    d = load_wine()
    return {"x1": d.data[:, :7], "x2": d.data[:, 7:], "y": d.target}


def iris() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_iris

    d = load_iris()
    return {"x1": d.data[:, :2], "x2": d.data[:, 2:], "y": d.target}


def breast_cancer() -> dict[str, np.ndarray]:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    return {"x1": d.data[:, :10], "x2": d.data[:, 10:20], "x3": d.data[:, 20:], "y": d.target}


def digits_two_views() -> dict[str, np.ndarray]:
    """scikit-learn's 8×8 digits, the left and right halves of each image as two views."""
    from sklearn.datasets import load_digits

    d = load_digits()
    img = d.images.reshape(len(d.images), 8, 8)
    return {"x1": img[:, :, :4].reshape(-1, 32), "x2": img[:, :, 4:].reshape(-1, 32), "y": d.target}


DATASETS = {
    "wine_2view_3class_178": wine,
    "iris_2view_3class_150": iris,
    "breast_cancer_3view_2class_569": breast_cancer,
    "digits_2view_10class_1797": digits_two_views,
}


def run(model: str, path: Path, out_dir: Path, overrides: tuple[str, ...] = ()) -> dict:
    """``python train.py model=<model> dataset=custom dataset.path=<path>`` in a subprocess; its metrics."""
    import os
    import subprocess

    t0 = time.perf_counter()
    cmd = [
        sys.executable,
        str(ROOT / "train.py"),
        f"model={model}",
        "dataset=custom",
        f"dataset.path={path}",
        f"hydra.run.dir={out_dir}",
        "logger=none",
        "trainer.enable_progress_bar=false",
        *overrides,
    ]
    env = {**os.environ, "MNP_TORCH_THREADS": os.environ.get("MNP_TORCH_THREADS", "1"), "WANDB_MODE": "disabled"}
    done = subprocess.run(cmd, capture_output=True, cwd=ROOT, env=env, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed: {done.stderr.strip().splitlines()[-1:]}")
    m = json.loads((out_dir / "metrics.json").read_text())
    return {
        "acc": m["test/acc"],
        "ece": m["test/ece"],
        "noisy_acc": m.get("noise/acc_mean"),
        "epochs": m["epochs"],
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "custom_defaults.json"))
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--before", action="store_true", help="also the fixed epochs of the defaults before")
    ap.add_argument("--override", action="append", default=[], help="extra train.py override for every run")
    ap.add_argument(
        "--update",
        action="store_true",
        help="replace only the --models' rows of --out, keep the others (the command is added to updated_by)",
    )
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in DATASETS.items():
            path = Path(tmp) / f"{name}.npz"
            np.savez(path, **make())
            for model in args.models:
                variants = {"defaults": ()}
                if args.before:
                    variants["before"] = (f"trainer.max_epochs={BEFORE.get(model, 20)}",)
                for label, extra in variants.items():
                    res = run(model, path, Path(tmp) / f"{name}_{model}_{label}", (*extra, *args.override))
                    rows.append({"dataset": name, "model": model, "config": label, **res})
                    print(json.dumps(rows[-1]), flush=True)
    command = "python benchmarks/custom_defaults.py " + " ".join(argv or sys.argv[1:])
    result = {"command": command, "overrides": args.override, "runs": rows}
    if args.update and Path(args.out).is_file():
        result = updated(json.loads(Path(args.out).read_text()), rows, args.models, command)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def updated(previous: dict, rows: list[dict], models: list[str], command: str) -> dict:
    """``previous`` with the rows of ``models`` replaced by ``rows``, in dataset then model order."""
    kept = [r for r in previous["runs"] if r["model"] not in models] + rows
    order = {name: i for i, name in enumerate(DATASETS)}
    rank = {name: i for i, name in enumerate(MODELS)}
    kept.sort(key=lambda r: (order.get(r["dataset"], len(order)), rank.get(r["model"], len(rank))))
    return {**previous, "runs": kept, "updated_by": [*previous.get("updated_by", []), command]}


if __name__ == "__main__":
    raise SystemExit(main())
