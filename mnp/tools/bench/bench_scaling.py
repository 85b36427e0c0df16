"""``python -m mnp.tools.bench --scaling``: MNP's training step and test batch against the context size N^m
and the batch size N_T, with linear fits and plots."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from mnp.tools.bench.bench_cases import SHAPES, build_model, first_optimizer, synthetic_views
from mnp.tools.bench.bench_measure import autocast, clear_cache, manual_step, sync, tracked_peak_mb

log = logging.getLogger("mnp.tools.bench")


def _fit_line(x, y) -> dict:
    x, y = np.asarray(x, float), np.asarray(y, float)
    slope, intercept = np.polyfit(x, y, 1)
    pred = slope * x + intercept
    ss = float(((y - y.mean()) ** 2).sum())
    return {
        "slope": float(slope),
        "intercept": float(intercept),
        "r2": 1.0 - float(((y - pred) ** 2).sum()) / ss if ss > 0 else 1.0,
    }


def scaling(args, device: torch.device) -> dict:
    """MNP's training step and test batch against N^m (at N_T = 200) and N_T (at N^m = 400)."""
    dims, _, _ = SHAPES[args.scaling_shape]
    k = 10  # N^m divisible by K at every point
    n_ms = [100, 200, 400, 800, 1600, 3200] if not args.quick else [100, 200, 400]
    n_ts = [50, 100, 200, 400, 800, 1600] if not args.quick else [50, 100, 200]
    reps = 3 if not args.quick else 1
    views, y = synthetic_views(dims, k, max(n_ts) + max(n_ms))
    views = [torch.as_tensor(v, device=device) for v in views]
    y = torch.as_tensor(y, device=device)
    out = {"shape": {"dims": list(dims), "num_classes": k, "config": f"mnp_{args.scaling_shape}"}}

    def measure(n_m, n_t):
        torch.manual_seed(0)
        model = build_model(
            "mnp",
            args.scaling_shape,
            k,
            dims,
            {**args.model_extra["mnp"], "memory": {**args.model_extra["mnp"].get("memory", {}), "size": n_m}},
        ).to(device)
        model.init_memory([v[max(n_ts) :] for v in views], y[max(n_ts) :])
        opt = first_optimizer(model)
        tv, ty = [v[:n_t] for v in views], y[:n_t]
        manual_step(model, opt, tv, ty, args.precision, device)  # warm-up
        train, test = [], []
        for _ in range(reps):
            sync(device)
            t0 = time.perf_counter()
            manual_step(model, opt, tv, ty, args.precision, device)
            sync(device)
            train.append(time.perf_counter() - t0)
        train_mem = tracked_peak_mb(lambda: manual_step(model, opt, tv, ty, args.precision, device), device, model, opt)
        model.eval()
        with torch.inference_mode(), autocast(device, args.precision):
            for _ in range(reps + 1):
                clear_cache(model)
                sync(device)
                t0 = time.perf_counter()
                model.predict(tv)
                sync(device)
                test.append(time.perf_counter() - t0)

        def predict():
            clear_cache(model)
            with torch.no_grad(), autocast(device, args.precision):
                model.predict(tv)

        test_mem = tracked_peak_mb(predict, device, model)
        return {
            "n_m": n_m,
            "n_t": n_t,
            "train_step_s": statistics.median(train),
            "test_batch_s": statistics.median(test[1:]),
            "train_peak_mem_mb": train_mem,
            "test_peak_mem_mb": test_mem,
        }

    for key, points in (("n_m", [(n, 200) for n in n_ms]), ("n_t", [(400, n) for n in n_ts])):
        rows = [measure(*p) for p in points]
        xs = [r[key] for r in rows]
        out[key] = {
            "points": rows,
            "fits": {
                f: _fit_line(xs, [r[f] for r in rows])
                for f in ("train_step_s", "test_batch_s", "train_peak_mem_mb", "test_peak_mem_mb")
            },
        }
        log.info("scaling against %s done", key)
    return out


def plot_scaling(result: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for key, label in (("n_m", "context size $N^m$ (N_T = 200)"), ("n_t", "batch size $N_T$ (N^m = 400)")):
        rows = result[key]["points"]
        xs = np.array([r[key] for r in rows], float)
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
        for ax, fields, unit in (
            (axes[0], ("train_step_s", "test_batch_s"), "seconds"),
            (axes[1], ("train_peak_mem_mb", "test_peak_mem_mb"), "peak MiB"),
        ):
            for f in fields:
                ys = np.array([r[f] for r in rows], float)
                fit = result[key]["fits"][f]
                (dots,) = ax.plot(xs, ys, "o", label=f"{f} (R²={fit['r2']:.3f})")
                ax.plot(xs, fit["slope"] * xs + fit["intercept"], "-", alpha=0.6, color=dots.get_color())
            ax.set_xlabel(label)
            ax.set_ylabel(unit)
            ax.legend(fontsize=7)
        fig.suptitle(f"MNP scaling, shape {result['shape']['config']} (K = 10)", fontsize=9)
        fig.tight_layout()
        path = out_dir / f"scaling_{key}.png"
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths
