"""Default ``model=mnp`` against default ``model=mlp`` on your-own-data files of different shapes.

``python benchmarks/custom_defaults.py [--out benchmarks/custom_defaults.json]`` writes the four
tabular sets below as ``.npz`` files (the ``dataset=custom`` format), trains both models on each with
nothing but ``dataset=custom dataset.path=<file>``, and records test accuracy, ECE and time.
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


def blobs(n: int, k: int, dims: list[int], informative: list[float], seed: int) -> dict[str, np.ndarray]:
    """Views whose class means differ by ``informative[v]`` standard deviations on a few columns."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    arrays = {"y": y}
    for v, (d, sep) in enumerate(zip(dims, informative), 1):
        means = rng.normal(size=(k, d)) * sep * (rng.random(d) < 0.3)
        arrays[f"x{v}"] = means[y] + rng.normal(size=(n, d)) + rng.normal(size=d) * 5
    return arrays


def digits_two_views() -> dict[str, np.ndarray]:
    """scikit-learn's 8×8 digits, the left and right halves of each image as two views."""
    from sklearn.datasets import load_digits

    d = load_digits()
    img = d.images.reshape(len(d.images), 8, 8)
    return {"x1": img[:, :, :4].reshape(-1, 32), "x2": img[:, :, 4:].reshape(-1, 32), "y": d.target}


DATASETS = {
    "blobs_2view_3class_300": lambda: blobs(300, 3, [8, 5], [0.8, 0.6], seed=0),
    "blobs_4view_10class_1000": lambda: blobs(1000, 10, [2, 50, 12, 30], [1.0, 0.5, 0.8, 0.0], seed=1),
    "blobs_6view_5class_500": lambda: blobs(500, 5, [100, 100, 20, 20, 6, 6], [0.4, 0.4, 0.6, 0.6, 1.0, 0.0], seed=2),
    "digits_2view_10class_1797": digits_two_views,
}


def run(model: str, path: Path, out_dir: Path, overrides: tuple[str, ...] = ()) -> dict:
    """``python train.py model=<model> dataset=custom dataset.path=<path>`` in a subprocess; its metrics."""
    import os
    import subprocess

    t0 = time.perf_counter()
    cmd = [sys.executable, str(ROOT / "train.py"), f"model={model}", "dataset=custom", f"dataset.path={path}",
           f"hydra.run.dir={out_dir}", "logger=none", "trainer.enable_progress_bar=false", *overrides]
    env = {**os.environ, "MNP_TORCH_THREADS": os.environ.get("MNP_TORCH_THREADS", "1"), "WANDB_MODE": "disabled"}
    done = subprocess.run(cmd, capture_output=True, cwd=ROOT, env=env, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed: {done.stderr.strip().splitlines()[-1:]}")
    m = json.loads((out_dir / "metrics.json").read_text())
    return {"acc": m["test/acc"], "ece": m["test/ece"], "noisy_acc": m.get("noise/acc_mean"),
            "wall_s": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "custom_defaults.json"))
    ap.add_argument("--models", nargs="+", default=["mnp", "mlp"])
    ap.add_argument("--override", action="append", default=[], help="extra train.py override for every run")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in DATASETS.items():
            path = Path(tmp) / f"{name}.npz"
            np.savez(path, **make())
            for model in args.models:
                res = run(model, path, Path(tmp) / f"{name}_{model}", tuple(args.override))
                rows.append({"dataset": name, "model": model, **res})
                print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps({"command": "python benchmarks/custom_defaults.py " + " ".join(argv or sys.argv[1:]),
                                          "overrides": args.override, "runs": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
