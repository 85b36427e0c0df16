"""What a finished run or sweep got, and where: the lines printed (and logged to ``train.log``) at its end."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("mnp")

# (metrics.json key, label, format); percentages are stored as fractions
ROWS = [
    ("test/acc", "accuracy", "pct"),
    ("test/ece", "ECE", "f4"),
    ("test/nll", "NLL", "f4"),
    ("noise/acc_mean", "noisy accuracy", "pct"),
    ("cal/test/ece", "ECE, temperature-scaled", "f4"),
    ("calibration/temperature", "temperature T", "f4"),
]


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _fmt(value: float, kind: str) -> str:
    return f"{100 * value:.2f} %" if kind == "pct" else f"{value:.4f}"


def _size(path: Path) -> str:
    """``512 B``, ``3.4 KB``, ``50.1 MB``, ``1.2 GB``."""
    n, unit = float(path.stat().st_size), 0
    while n >= 1024 and unit < 3:
        n, unit = n / 1024, unit + 1
    return f"{n:.0f} B" if unit == 0 else f"{n:.1f} {('KB', 'MB', 'GB')[unit - 1]}"


def step_text(results: dict) -> str | None:
    """Which training step ran (``accel/step``, mnp.cli.accel): ``CUDA graph`` or ``eager (<why>)``."""
    step = results.get("accel/step")
    if step is None:
        return None
    if step == "eager":
        return f"eager ({results.get('accel/eager_reason', 'accel.cuda_graph=false')})"
    return "CUDA graph" + (" (emulated)" if step.endswith("emulated") else "")


def run_summary(results: dict, out_dir: Path) -> str:
    """A short table of the run's metrics and times, then its directory and the files in it; an evaluation
    (evaluate.py's results name their ``checkpoint``) is not called finished."""
    head = f"{results.get('model')} on {results.get('dataset')}, seed {results.get('seed')}"
    if results.get("epochs") is not None:
        head += f", {results['epochs']} epochs"
    lines = [f"Evaluated: {head} ({results['checkpoint']})" if "checkpoint" in results else f"Finished: {head}"]
    rows = [(label, _fmt(results[key], kind)) for key, label, kind in ROWS if key in results]
    rows += [
        (f"validation {label}", _fmt(results[f"val/{key.removeprefix('test/')}"], kind))
        for key, label, kind in ROWS
        if f"val/{key.removeprefix('test/')}" in results
    ]  # eval.split=val: the selection protocol
    rows += [
        (f"OOD AUROC ({k.split('/')[1]})", f"{v:.4f}")
        for k, v in sorted(results.items())
        if k.startswith("ood/") and k.endswith("/auroc")
    ]
    if "time/train_epoch_s" in results:
        rows.append(("train time / epoch", f"{results['time/train_epoch_s']:.2f} s" + _epochs_timed(results)))
    if "time/eval_s" in results:  # the evaluation protocols (noise, missing views, per view, T) included
        rows.append(("evaluation time", f"{results['time/eval_s']:.2f} s (the whole test, every protocol)"))
    if "time/test_s" in results:
        rows.append(("clean test pass", f"{results['time/test_s']:.2f} s (its predict calls)"))
    if "time/total_s" in results:
        rows.append(("total time", duration(results["time/total_s"])))  # every session of a resumed run
    if "time/startup_s" in results:
        rows.append(("start-up", f"{results['time/startup_s']:.1f} s (to the first training step)"))
    if "time/teardown_s" in results:
        rows.append(("teardown", f"{results['time/teardown_s']:.2f} s (test end to outputs written)"))
    if step := step_text(results):
        rows.append(("training step", step))
    width = max((len(r[0]) for r in rows), default=0)
    lines += [f"  {label:<{width}}  {value}" for label, value in rows]
    out_dir = Path(out_dir).resolve()
    lines.append(f"Run directory: {out_dir}")
    lines += [f"  {p.relative_to(out_dir)}  ({_size(p)})" for p in run_files(out_dir)]
    return "\n".join(lines)


def _epochs_timed(results: dict) -> str:
    """`` (median of N main epochs)``: MNP's warm-up epochs are not timed (nor counted here)."""
    n = results.get("time/train_epochs")
    if not n:
        return ""
    main = " main" if results.get("epochs") is not None and n < results["epochs"] else ""
    return f" (median of {n}{main} epoch{'s' if n > 1 else ''})"


def run_files(out_dir: Path) -> list[Path]:
    """The files of a run directory worth listing: not hidden (Hydra's ``.hydra/``), no empty log."""
    return sorted(
        p
        for p in out_dir.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(out_dir).parts)
        and not (p.suffix == ".log" and p.stat().st_size == 0)
    )


def log_run_summary(results: dict, out_dir: Path) -> None:
    """Print the summary through the ``mnp`` logger: the console and the run's ``train.log``."""
    log.info("\n%s", run_summary(results, out_dir))


# ---------------------------------------------------------------------------- sweeps
STATUS_ENV = "MNP_SWEEP_STATUS"  # a JSON-lines file every job of this sweep appends its outcome to


def record_job(status: str, out_dir: Path, message: str = "") -> None:
    """Append one job's start or outcome (ok, done before, skipped, failed, interrupted) to the sweep's status file."""
    path = os.environ.get(STATUS_ENV)
    if not path:
        return
    line = json.dumps({"status": status, "dir": str(Path(out_dir).resolve()), "message": message})
    with open(path, "a") as f:  # one short append per job: atomic on POSIX for lines this size
        f.write(line + "\n")


def _jobs(status_file: Path) -> list[dict]:
    """Each job's last record, in the order the jobs started; a job that started and recorded nothing more
    (its worker was killed) is interrupted."""
    if not status_file.exists():
        return []
    last: dict[str, dict] = {}
    for line in status_file.read_text().splitlines():
        if line.strip():
            job = json.loads(line)
            last[job["dir"]] = job
    return [
        j if j["status"] != "started" else {**j, "status": "interrupted", "message": "stopped before it finished"}
        for j in last.values()
    ]


def sweep_summary(status_file: Path) -> str:
    """One line per job of the sweep, and the report command that aggregates it."""
    jobs = _jobs(status_file)
    if not jobs:
        return ""
    counts: dict[str, int] = {}
    lines = []
    for j in jobs:
        counts[j["status"]] = counts.get(j["status"], 0) + 1
        lines.append(f"  {j['status']:<11} {Path(j['dir']).name}" + (f": {j['message']}" if j["message"] else ""))
    sweep_dirs = sorted({str(Path(j["dir"]).parent) for j in jobs})
    head = ("Sweep stopped: " if "interrupted" in counts else "Sweep finished: ") + ", ".join(
        f"{n} {s}" for s, n in counts.items()
    )
    tail = [f"Aggregate with: python -m mnp.tools.report {' '.join(sweep_dirs)}  (writes {sweep_dirs[0]}/report)"]
    return "\n".join([head, *lines, *tail])


def sweep_incomplete(status_file: Path) -> str:
    """``""`` when every job of the sweep has its metrics, else the sweep's error line: how many did not."""
    jobs = _jobs(status_file)
    missing = [j["status"] for j in jobs if j["status"] not in ("ok", "done before")]
    if not missing:
        return ""
    counts = ", ".join(f"{missing.count(s)} {s}" for s in dict.fromkeys(missing))
    return f"{len(missing)} of {len(jobs)} jobs of the sweep have no metrics ({counts}); the lines above say why"
