"""What an MNP checkpoint holds, by size, and what a run directory keeps on disk.

``python benchmarks/checkpoint_sizes.py [--out benchmarks/checkpoint_sizes.json] [--root <repo>]`` trains
``model=mnp`` with each dataset's own config for 3 epochs of one batch each (1 warm-up epoch, so the last
checkpoint is a main-stage one, as every finished run's is), then records the size of every file under
``checkpoints/`` and the bytes of each part of ``last.ckpt``: the weights and the context memory
(``state_dict``), the main optimiser's Adam moments, the warm-up optimiser's. ``--root`` runs another
checkout's ``train.py`` (the code before a change) and ``--label`` names the entry of ``--out`` it writes,
for a before/after comparison (the other entries are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("handwritten", "cub", "pie", "scene15")
SHORT = [
    "trainer.max_epochs=3",
    "model.warmup.epochs=1",
    "+trainer.limit_train_batches=1",
    "test=false",
    "logger=none",
    "trainer.enable_progress_bar=false",
]


def nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    return 0


def parts(path: Path) -> dict[str, int]:
    """Bytes of the tensors in each part of a checkpoint."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    main, *warm = ckpt["optimizer_states"]
    return {
        "weights_and_memory": nbytes(ckpt["state_dict"]),
        "main_adam": nbytes(main["state"]),
        "warmup_adam": nbytes([w["state"] for w in warm]),
        "other": nbytes({k: v for k, v in ckpt.items() if k not in ("state_dict", "optimizer_states")}),
    }


def measure(root: Path, dataset: str, run_dir: Path) -> dict:
    env = {**os.environ, "MNP_TORCH_THREADS": os.environ.get("MNP_TORCH_THREADS", "1"), "WANDB_MODE": "disabled"}
    cmd = [
        sys.executable,
        str(root / "train.py"),
        "model=mnp",
        f"dataset={dataset}",
        f"hydra.run.dir={run_dir}",
        *SHORT,
    ]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd[1:])} failed: {done.stderr.strip().splitlines()[-1:]}")
    files = {p.name: p.stat().st_size for p in sorted((run_dir / "checkpoints").iterdir())}
    return {
        "dataset": dataset,
        "files": files,
        "on_disk": sum(files.values()),
        "last_ckpt_parts": parts(run_dir / "checkpoints" / "last.ckpt"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "checkpoint_sizes.json"))
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose train.py runs")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--label", default="now", help="the entry of --out to write")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in args.datasets:
            rows.append(measure(Path(args.root), d, Path(tmp) / d))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    entries = json.loads(out.read_text()) if out.is_file() else {}
    entries[args.label] = {
        "command": "python benchmarks/checkpoint_sizes.py " + " ".join(argv or sys.argv[1:]),
        "runs": rows,
    }
    out.write_text(json.dumps(entries, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
