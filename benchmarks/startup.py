"""Where a short run's time goes outside ``time/total_s``: the process's wall time against its metrics.

    MNP_DATA_DIR=../shared/data python benchmarks/startup.py [--before DIR --before-commit C] [--repeats 3] [--imports]
    MNP_DATA_DIR=../shared/data python benchmarks/startup.py --before-python ENV/bin/python --json OUT.json

Runs ``python train.py model=mnp dataset=handwritten trainer.max_epochs=1 model.warmup.epochs=0`` (one
thread, a fresh log directory each time) ``--repeats`` times and records, per run, the wall time of the
process, ``time/total_s`` (train() entry to the end of the test), and where the code writes them
``time/startup_s`` (process start to the first training step) and ``time/teardown_s`` (end of the test
to the outputs written). ``--before DIR``: a checkout of an earlier commit (``git archive C | tar -x -C
DIR``) runs the same command, alternating with this one, so both see the same load on a shared machine.
``--before-python``: the "before" leg runs this checkout (or ``--before``) with another interpreter, e.g. a
virtual environment with other packages installed (``torchvision``, which torchmetrics imports whenever it is
installed), recorded with the packages that differ. ``--imports`` also times ``python -c "import torch"`` and ``import pytorch_lightning`` alone, wall and CPU
seconds. Each
checkout's runs go into the JSON (``--json``, default benchmarks/startup_cpu.json) under ``after`` and
``before``, with the commit, the machine's load and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ["model=mnp", "dataset=handwritten", "trainer.max_epochs=1", "model.warmup.epochs=0"]
# --no-protocols: the noise and missing-view protocols off. Start-up and teardown lie outside time/total_s, so they do
# not change; the protocols over Handwritten's 63 view subsets make a one-thread run minutes long.
NO_PROTOCOLS = ["eval.noise=false", "eval.missing=false"]
KEYS = ("time/total_s", "time/startup_s", "time/teardown_s")
IMPORTS = ("torch", "pytorch_lightning")


def timed(cmd: list[str], env: dict, cwd: Path = ROOT) -> tuple[float, float]:
    """The command's wall seconds and CPU seconds (user + system, the child's own: far less sensitive than the
    wall time to other jobs on the machine)."""
    before, t = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds, after = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def one_run(root: Path, env: dict, python: str = sys.executable, run: list[str] = RUN) -> dict:
    with tempfile.TemporaryDirectory(prefix="mnp-startup-") as logs:
        seconds, cpu = timed([python, "train.py", *run, f"paths.log_dir={logs}"], env, cwd=root)
        metrics = json.loads(next(Path(logs).rglob("metrics.json")).read_text())
    run = {"wall_s": round(seconds, 3), **{k: round(metrics[k], 3) for k in KEYS if k in metrics}}
    run["wall_minus_total_s"] = round(seconds - metrics["time/total_s"], 3)
    run["cpu_s"] = round(cpu, 3)  # the whole process, user + system
    return run


def has_torchvision(python: str) -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torchvision') is None)"
    return subprocess.run([python, "-c", code]).returncode == 0


def commit() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return head + ("+changes" if dirty else "")


def summary(runs: list[dict], sha: str, run: list[str] = RUN) -> dict:
    return {
        "commit": sha,
        "command": "python train.py " + " ".join(run),
        "threads": 1,
        "cpus": os.cpu_count(),
        "runs": runs,
        "median": {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", type=Path, help="a checkout of an earlier commit, run alternately with this one")
    ap.add_argument("--before-commit", default="", help="the commit --before holds (recorded as given)")
    ap.add_argument("--before-python", help="the interpreter of the before leg (default: this one)")
    ap.add_argument("--imports", action="store_true", help="also time import torch and import pytorch_lightning")
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "startup_cpu.json")
    ap.add_argument("--no-protocols", action="store_true", help="the runs without the noise and missing-view protocols")
    args = ap.parse_args(argv)
    env = dict(os.environ, MNP_TORCH_THREADS="1", WANDB_MODE="disabled")
    if "MNP_DATA_DIR" not in env:
        ap.error("set MNP_DATA_DIR to the data directory")
    run = RUN + NO_PROTOCOLS if args.no_protocols else RUN
    before = args.before or args.before_python
    legs = {"after": (ROOT, sys.executable)}
    if before:
        legs["before"] = ((args.before or ROOT).resolve(), args.before_python or sys.executable)
    load = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {label: [] for label in legs}
    for _ in range(args.repeats):
        for label, (root, python) in legs.items():
            runs[label].append(one_run(root, env, python, run))
    data = {"after": summary(runs["after"], commit(), run)}
    if before:
        data["before"] = summary(runs["before"], args.before_commit or data["after"]["commit"], run)
    for label, (_, python) in legs.items():
        data[label]["python"] = python
        data[label]["torchvision"] = has_torchvision(python)
    data["loadavg"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    if args.imports:  # the legs alternate here too
        times: dict[str, dict[str, list]] = {label: {m: [] for m in IMPORTS} for label in legs}
        for _ in range(args.repeats):
            for m in IMPORTS:
                for label, (_, python) in legs.items():
                    times[label][m].append(timed([python, "-c", f"import {m}"], env))
        for label in legs:
            data[label]["imports_s"] = {
                m: round(statistics.median(w for w, _ in t), 3) for m, t in times[label].items()
            }
            data[label]["imports_cpu_s"] = {
                m: round(statistics.median(c for _, c in t), 3) for m, t in times[label].items()
            }
    args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: v["median"] if isinstance(v, dict) and "median" in v else v for k, v in data.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
