"""The noise protocol one predict call per level × subset against batched calls (``eval.noise_batch_rows``).

    python benchmarks/noise_batching.py [--dataset handwritten] [--rows 0 4000 65536] [--out benchmarks/noise_batching_cpu.json]

Trains ``model=mnp`` for a few epochs (the defaults of the dataset otherwise), then times the whole test
pass (clean, noise protocol) once per ``--rows`` value on the same model, and records the time and the
noisy accuracy of each. On the CPU this is the measurement behind ``auto`` = 0 there; on a GPU, the
batching's speed-up.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

import pytorch_lightning as pl
import torch

from mnp.cli.builders import build_datamodule, build_model
from mnp.cli.validate import resolve_auto

ROOT = Path(__file__).resolve().parents[1]


def compose(dataset: str, epochs: int):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(
            "train",
            overrides=[
                "model=mnp",
                f"dataset={dataset}",
                f"trainer.max_epochs={epochs}",
                "model.warmup.epochs=1",
                "paths.output_dir=/nonexistent",
            ],
            return_hydra_config=False,
        )
    resolve_auto(cfg)
    return cfg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="handwritten")
    ap.add_argument("--rows", type=int, nargs="+", default=[0, 4000, 65536])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "noise_batching_cpu.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = compose(args.dataset, args.epochs)
    pl.seed_everything(0, verbose=False)
    _, dm = build_datamodule(cfg)
    _, model = build_model(cfg, dm)
    accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    trainer_kw = dict(
        accelerator=accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    pl.Trainer(max_epochs=args.epochs, num_sanity_val_steps=0, **trainer_kw).fit(model, datamodule=dm)
    runs = []
    for rows in args.rows:
        model.configure_evaluation(replace(model.protocol, noise_batch_rows=rows))
        t = time.perf_counter()
        pl.Trainer(**trainer_kw).test(model, datamodule=dm, verbose=False)
        seconds = time.perf_counter() - t
        runs.append(
            {
                "noise_batch_rows": rows,
                "test_pass_s": round(seconds, 2),
                "noise_acc_mean": model.test_results["noise/acc_mean"],
                "test_acc": model.test_results["test/acc"],
            }
        )
        print(json.dumps(runs[-1]), flush=True)
    device = (
        torch.cuda.get_device_name()
        if accelerator == "gpu"
        else f"cpu ({platform.processor() or 'x86_64'}, {args.threads} thread)"
    )
    args.out.write_text(
        json.dumps(
            {
                "dataset": args.dataset,
                "model": "mnp",
                "epochs": args.epochs,
                "device": device,
                "command": "python benchmarks/noise_batching.py",
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
