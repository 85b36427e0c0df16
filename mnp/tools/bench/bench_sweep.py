"""``python -m mnp.tools.bench --sweep``: the ``experiment=paper_main`` MNP sweep's time, estimated from
measured parts."""

from __future__ import annotations

import logging
import statistics
import sys
import time

import pytorch_lightning as pl
import torch

from mnp.eval.eval_protocol import EvalProtocol
from mnp.runs.migrations import nest_flat
from mnp.tools.bench.bench_cases import CONF, REAL, compose_cfg, load_case, merged
from mnp.tools.bench.bench_measure import train_epoch

log = logging.getLogger("mnp.tools.bench")


def startup_s() -> float:
    """Seconds for a fresh Python process to import the training pipeline (each sweep job pays it)."""
    import subprocess

    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import mnp.cli.pipeline, datamodules.features, baselines.mgp"],
        check=True,
        cwd=str(CONF.parent),
        capture_output=True,
    )
    return time.perf_counter() - t0


def sweep_estimate(args, device: torch.device, cases: list[dict]) -> dict:
    """The ``experiment=paper_main`` MNP sweep on the real datasets (5 seeds each, run as 2 parallel
    one-thread jobs on 2 cores), from measured parts per dataset: a warm-up epoch, a main epoch (the
    benchmark's), the test with the noise protocol, and the process start-up."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    epoch_s = {c["dataset"]: c["train_epoch_s"] for c in cases if c["model"] == "mnp"}
    out = {"datasets": {}, "seeds": 5, "parallel_jobs": 2, "startup_s": startup_s()}
    for name in REAL:
        case = load_case(name, None, None, args.data_dir)
        if case is None or name not in epoch_s:
            continue
        cfg = compose_cfg("mnp", name)
        node = dict(cfg["model"])
        node.pop("name", None)
        node = nest_flat(merged(node, args.model_extra["mnp"]))
        epochs, warm = int(cfg["trainer"]["max_epochs"]), int(node["warmup"].get("epochs") or 0)
        torch.manual_seed(0)
        model = instantiate(
            OmegaConf.create(node), num_classes=case.dm.num_classes, view_dims=case.dm.view_dims, _convert_="all"
        )
        warm_s = (
            statistics.median(train_epoch(model, case.dm, device, None, args.precision) for _ in range(3))
            if warm
            else 0.0
        )
        model.configure_evaluation(EvalProtocol.from_config(cfg["eval"]))
        trainer = pl.Trainer(
            accelerator=device.type,
            devices=1,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            enable_checkpointing=False,
        )
        t0 = time.perf_counter()
        trainer.test(model, datamodule=case.dm, verbose=False)
        test_s = time.perf_counter() - t0
        job = out["startup_s"] + warm * warm_s + (epochs - warm) * epoch_s[name] + test_s
        out["datasets"][name] = {
            "epochs": epochs,
            "warmup_epochs": warm,
            "warmup_epoch_s": warm_s,
            "epoch_s": epoch_s[name],
            "test_with_noise_s": test_s,
            "job_s": job,
        }
        log.info("sweep estimate: %s done", name)
    out["total_s"] = out["seeds"] * sum(d["job_s"] for d in out["datasets"].values()) / out["parallel_jobs"]
    return out
