"""Where a short run's time goes outside ``time/total_s``: the process's wall time against its metrics.

    MNP_DATA_DIR=../shared/data python benchmarks/startup.py [--before DIR --before-commit C] [--repeats 3] [--imports]

Runs ``python train.py model=mnp dataset=handwritten trainer.max_epochs=1 model.warmup.epochs=0`` (one
thread, a fresh log directory each time) ``--repeats`` times and records, per run, the wall time of the
process, ``time/total_s`` (train() entry to the end of the test), and where the code writes them
``time/startup_s`` (process start to the first training step) and ``time/teardown_s`` (end of the test
to the outputs written). ``--before DIR``: a checkout of an earlier commit (``git archive C | tar -x -C
DIR``) runs the same command, alternating with this one, so both see the same load on a shared machine.
``--imports`` also times ``python -c "import torch"`` and ``import pytorch_lightning`` alone. Each
checkout's runs go into the JSON (``--json``, default benchmarks/startup_cpu.json) under ``after`` and
``before``, with the commit, the machine's load and the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ["model=mnp", "dataset=handwritten", "trainer.max_epochs=1", "model.warmup.epochs=0"]
KEYS = ("time/total_s", "time/startup_s", "time/teardown_s")


def wall(cmd: list[str], env: dict, cwd: Path = ROOT) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def one_run(root: Path, env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="mnp-startup-") as logs:
        seconds = wall([sys.executable, "train.py", *RUN, f"paths.log_dir={logs}"], env, cwd=root)
        metrics = json.loads(next(Path(logs).rglob("metrics.json")).read_text())
    run = {"wall_s": round(seconds, 3), **{k: round(metrics[k], 3) for k in KEYS if k in metrics}}
    run["wall_minus_total_s"] = round(seconds - metrics["time/total_s"], 3)
    return run


def commit() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def summary(runs: list[dict], sha: str) -> dict:
    return {"commit": sha, "command": "python train.py " + " ".join(RUN), "threads": 1, "cpus": os.cpu_count(),
            "runs": runs, "median": {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, help="a checkout of an earlier commit, run alternately with this one")
    ap.add_argument("--before-commit", default="", help="the commit --before holds (recorded as given)")
    ap.add_argument("--imports", action="store_true", help="also time import torch and import pytorch_lightning")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "startup_cpu.json")
    args = ap.parse_args(argv)
    env = dict(os.environ, MNP_TORCH_THREADS="1", WANDB_MODE="disabled")
    if "MNP_DATA_DIR" not in env:
        ap.error("set MNP_DATA_DIR to the data directory")
    roots = {"after": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    load = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {label: [] for label in roots}
    for _ in range(args.repeats):
        for label, root in roots.items():
            runs[label].append(one_run(root, env))
    data = {"after": summary(runs["after"], commit())}
    if args.before:
        data["before"] = summary(runs["before"], args.before_commit)
    data["loadavg"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    if args.imports:
        data["imports_s"] = {m: round(statistics.median(wall([sys.executable, "-c", f"import {m}"], env)
                                                        for _ in range(args.repeats)), 3)
                             for m in ("torch", "pytorch_lightning")}
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v["median"] if isinstance(v, dict) and "median" in v else v for k, v in data.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
