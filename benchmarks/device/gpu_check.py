"""The GPU issue's checks in one device session (docs/gpu.md), in order of value, within a deadline.

    python3 benchmarks/device/gpu_check.py --out $OUT [--deadline 540]   # on the device, from the repo root
    python3 benchmarks/device/gpu_check.py --out /tmp/gc --cpu           # the same plumbing, small, on a CPU

1. ``graph_check.py``: captured against eager training inside Lightning, and no "AccumulateGrad node's
   stream does not match" warning; ``tests/test_step_graphs.py``;
2. whole runs of ``train.py model=mnp`` on Handwritten and PIE: the defaults (no accel key: ``auto``
   must choose the CUDA graph), the eager step (``accel.cuda_graph=false``), the defaults with TF32
   (``accel.matmul_precision=high``), and on Handwritten the noise protocol unbatched
   (``eval.noise_batch_rows=0``); metrics, times and which step ran (``accel/step``);
3. ``mnp.tools.bench`` (``mnp``, ``mnp_graph``, ``mgp``) on the seven cases: ``bench_gpu.json``;
4. ``benchmarks/noise_batching.py``: the test pass with the noise protocol unbatched and batched.

Writes ``gpu_check.json`` (every step's command, exit status, seconds and stream warnings in its log, the
runs' metrics, and ``checks``: the verdicts of the new defaults) after each step, and each step's log under
``logs/``. With ``--cpu`` the graph variants run the emulated path (``accel.cuda_graph=emulate``).
``.gpu/pylib`` (hydra, omegaconf, antlr4, entmax copied from a venv) and ``.gpu/data`` are used where
present, as benchmarks/device/run.sh does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_KEYS = (
    "test/acc",
    "test/ece",
    "noise/acc_mean",
    "time/total_s",
    "time/train_epoch_s",
    "time/test_s",
    "time/startup_s",
    "time/teardown_s",
    "epochs",
    "accel/step",
    "accel/eager_reason",
)
# every variant but eager leaves accel.cuda_graph at its default, auto, which must choose the graph on a GPU
VARIANTS = {
    "default": [],
    "eager": ["accel.cuda_graph=false"],
    "default_tf32": ["accel.matmul_precision=high"],
    "default_unbatched": ["eval.noise_batch_rows=0"],
}
ORDER = [
    ("handwritten", "default"),
    ("pie", "default"),
    ("handwritten", "eager"),
    ("handwritten", "default_tf32"),
    ("handwritten", "default_unbatched"),
    ("pie", "eager"),
    ("pie", "default_tf32"),
]
STREAM_WARNING = "AccumulateGrad node's stream does not match"


def environment() -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", WANDB_MODE="disabled", HYDRA_FULL_ERROR="1")
    lib, data = ROOT / ".gpu" / "pylib", ROOT / ".gpu" / "data"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(lib) if lib.is_dir() else "", str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    if data.is_dir():
        env.setdefault("MNP_DATA_DIR", str(data))
    return env


class Session:
    """Runs the steps as subprocesses, each within its own limit and the session's deadline."""

    def __init__(self, out: Path, deadline: float):
        self.out, self.t0, self.deadline = out, time.time(), deadline
        (out / "logs").mkdir(parents=True, exist_ok=True)
        self.record: dict = {"steps": [], "runs": []}

    def left(self) -> float:
        return self.deadline - (time.time() - self.t0)

    def step(self, name: str, cmd: list[str], limit: float) -> dict | None:
        limit = min(limit, self.left() - 5)
        if limit < 20:
            print(f"[{name}] skipped: {self.left():.0f} s left", flush=True)
            self.record["steps"].append({"name": name, "skipped": True})
            self.save()
            return None
        log = self.out / "logs" / f"{name}.log"
        t = time.time()
        with log.open("w") as f:
            try:
                rc = subprocess.run(
                    cmd, cwd=ROOT, env=environment(), stdout=f, stderr=subprocess.STDOUT, timeout=limit
                ).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        entry = {
            "name": name,
            "command": " ".join(cmd),
            "rc": rc,
            "seconds": round(time.time() - t, 1),
            "stream_warnings": log.read_text(errors="replace").count(STREAM_WARNING),
        }
        self.record["steps"].append(entry)
        tail = log.read_text(errors="replace").splitlines()[-3:]
        print(f"[{name}] rc={rc} {entry['seconds']} s | " + " / ".join(tail), flush=True)
        self.save()
        return entry

    def save(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.record, indent=1) + "\n")


def run_overrides(dataset: str, variant: str, cpu: bool) -> list[str]:
    """train.py's overrides of one whole run; on a CPU the emulated graph and a short run."""
    over = VARIANTS[variant] + (["accel.cuda_graph=emulate"] if cpu and variant != "eager" else [])
    small = ["trainer.max_epochs=3", "model.warmup.epochs=1", "eval.noise_levels=[0.1,1.0]"] if cpu else []
    return [
        "model=mnp",
        f"dataset={dataset}",
        "seed=0",
        "logger=none",
        "callbacks.checkpoint.every_n_epochs=0",
        "skip_if_done=false",
        "ckpt_path=null",
        *over,
        *small,
    ]


def expected_step(variant: str, cpu: bool) -> str:
    """``accel/step`` a whole run must report: the graph wherever the defaults apply."""
    return "eager" if variant == "eager" else "cuda_graph_emulated" if cpu else "cuda_graph"


def verdicts(record: dict, cpu: bool) -> dict:
    """The new defaults checked in one place: every run took the expected step, no step's log has the stream
    warning, and the graph check passed (None: not run)."""
    runs, steps = record["runs"], [e for e in record["steps"] if not e.get("skipped")]
    graph = next((e for e in steps if e["name"] == "graph_check"), None)
    return {
        "runs_took_the_expected_step": all(r["accel/step"] == expected_step(r["variant"], cpu) for r in runs)
        if runs
        else None,
        "stream_warnings": sum(e["stream_warnings"] for e in steps),
        "graph_check_ok": None if graph is None else graph["rc"] == 0,
    }


def whole_run(s: Session, dataset: str, variant: str, cpu: bool, runs_dir: Path) -> None:
    name = f"run_{dataset}_{variant}"
    out_dir = runs_dir / name
    cmd = [
        sys.executable,
        "train.py",
        *run_overrides(dataset, variant, cpu),
        f"hydra.run.dir={out_dir}",
        f"paths.output_dir={out_dir}",
    ]
    entry = s.step(name, cmd, 240)
    metrics = out_dir / "metrics.json"
    if entry is not None and metrics.is_file():
        m = json.loads(metrics.read_text())
        s.record["runs"].append(
            {"dataset": dataset, "variant": variant, "wall_s": entry["seconds"], **{k: m.get(k) for k in RUN_KEYS}}
        )
        s.save()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, default=540, help="seconds for the whole session")
    ap.add_argument("--cpu", action="store_true", help="small runs, the emulated graph path, one bench case")
    args = ap.parse_args(argv)
    s = Session(args.out, args.deadline)
    import torch

    s.record["device"] = "cpu" if args.cpu else torch.cuda.get_device_name()
    s.record["torch"] = torch.__version__
    s.step(
        "graph_check",
        [
            sys.executable,
            "benchmarks/device/graph_check.py",
            *(["--cpu"] if args.cpu else []),
            "--json",
            str(args.out / "graph_check.json"),
        ],
        120,
    )
    s.step(
        "pytest_step_graphs",
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/test_step_graphs.py"],
        150,
    )
    runs_dir = Path("/tmp/gpu_check_runs")
    for dataset, variant in ORDER:
        whole_run(s, dataset, variant, args.cpu, runs_dir)
    bench = [sys.executable, "-m", "mnp.tools.bench", "--models", "mnp", "mnp_graph", "mgp", "--no-graph-breaks"]
    if args.cpu:
        s.step(
            "bench", [*bench, "--dataset", "handwritten", "--quick", "--json", str(args.out / "bench_gpu.json")], 300
        )
    else:
        s.step(
            "bench", [*bench, "--repeats", "2", "--no-step-metrics", "--json", str(args.out / "bench_gpu.json")], 240
        )
        s.step(
            "bench_step_metrics",
            [
                sys.executable,
                "-m",
                "mnp.tools.bench",
                "--dataset",
                "handwritten",
                "--models",
                "mnp",
                "--quick",
                "--no-graph-breaks",
                "--json",
                str(args.out / "step_metrics_cuda.json"),
            ],
            60,
        )
    if not args.cpu:  # the noise protocol's batching alone, on one trained model
        s.step(
            "noise_batching",
            [sys.executable, "benchmarks/noise_batching.py", "--out", str(args.out / "noise_batching_gpu.json")],
            90,
        )
    s.record["checks"] = verdicts(s.record, args.cpu)
    s.save()
    print(f"done in {time.time() - s.t0:.0f} s: {args.out / 'gpu_check.json'}; checks {s.record['checks']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
