"""Captured against eager MNP training inside Lightning, on a GPU (``accel.cuda_graph``, docs/gpu.md).

    python3 benchmarks/device/graph_check.py [--cpu] [--json OUT]

Trains the same small MNP (3 views, warm-up, a schedule step, a short last batch, the modality mask)
for 4 epochs twice, eager and with its step and DCM update replayed as CUDA graphs, and prints the step
counts, the largest parameter difference, whether every parameter is finite, each fit's seconds, and how
often torch warned "AccumulateGrad node's stream does not match" (0 expected: the short batch's pair is a
second pair per phase, whose eager first step met the first pair's kept autograd graph on the H200 before
the pairs kept their outputs detached, mnp.model.step_graphs._outputs).
The Monte Carlo draws of a graph come from other philox offsets than eager ones, so on a GPU the runs
agree within ``--tol``; ``--cpu`` compares the emulated path, which must agree bit for bit. Exit 1 when
they do not agree.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch

from datamodules import TensorDataModule
from mnp.model import MNP

DIMS = (5, 7, 4)
STREAM_WARNING = "AccumulateGrad node's stream does not match"


def datamodule() -> TensorDataModule:
    """70 training rows in batches of 16: four full batches and a short one of 6 per epoch."""
    rng = np.random.default_rng(0)
    y = np.arange(90) % 3
    views = [rng.normal(size=(90, d)) + y[:, None] for d in DIMS]
    return TensorDataModule(views, y, np.arange(70), np.arange(70, 90), batch_size=16)


def train(graph, accelerator: str, epochs: int = 4) -> tuple[int, dict[str, torch.Tensor], float, int]:
    pl.seed_everything(0, verbose=False)
    torch.manual_seed(0)
    model = MNP(
        3,
        list(DIMS),
        encoder={"d_e": 16, "projection": "linear"},
        memory={"size": 9},
        warmup={"epochs": 1, "lr": 1e-2},
        loss={"l2": 1e-3},
        aggregation={"modality_mask": True},
        optim={"lr": 1e-2, "schedule": "piecewise", "milestones": [2], "values": [1e-2, 1e-3], "clip_norm": 0.5},
    )
    model.cuda_graph = graph
    trainer = pl.Trainer(
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        accelerator=accelerator,
        devices=1,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule())
    state = {k: v.detach().cpu() for k, v in model.state_dict().items() if v.is_floating_point()}
    streams = sum(STREAM_WARNING in str(w.message) for w in caught)
    return trainer.global_step, state, time.perf_counter() - t, streams


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="the emulated path on the CPU (bit for bit)")
    ap.add_argument("--tol", type=float, default=0.05, help="largest parameter difference accepted on a GPU")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    accel, graph = ("cpu", "emulate") if args.cpu else ("gpu", True)
    steps_e, eager, secs_e, _ = train(False, accel)
    steps_g, captured, secs_g, streams = train(graph, accel)
    diff = max((captured[k] - v).abs().max().item() for k, v in eager.items())
    finite = all(torch.isfinite(v).all().item() for v in captured.values())
    ok = steps_e == steps_g and finite and streams == 0 and (diff == 0.0 if args.cpu else diff <= args.tol)
    out = {
        "device": "cpu" if args.cpu else torch.cuda.get_device_name(),
        "global_steps": [steps_e, steps_g],
        "max_abs_param_diff": diff,
        "finite": finite,
        "seconds": [round(secs_e, 2), round(secs_g, 2)],
        "stream_warnings": streams,
        "ok": ok,
    }
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
