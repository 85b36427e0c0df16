"""The tuning studies of one or more datasets, all at once on the device machine, within a deadline (docs/tuning.md).

    python3 benchmarks/device/tune_studies.py --datasets handwritten --out $OUT    # on the device, from the repo root
    python3 benchmarks/device/tune_studies.py --cpu --work /tmp/ts --out /tmp/ts/out   # the same plumbing, small, here
    python benchmarks/device/tune_studies.py --unpack tune_studies.tgz   # here: the records into results/tuning/studies/
    python benchmarks/device/tune_studies.py --pylib .gpu/pylib          # here: the packages the device's python lacks

Each study is one long-lived ``train.py -m experiment=tune`` process with ``hydra.sweeper.parallel_folds=true
launcher=joblib trainer=gpu hydra.sweeper.prune_after=0``: its loky workers, started once and reused by every trial,
train the folds, so a Python process's start-up (14-17 s on the device image, which has no .pyc) is paid once per
worker, not once per fold. S studies on C cores get max(1, C // S) workers each: one dataset's eight studies on the
16-core machine run 8 study processes (idle while their folds train) and 16 fold workers at once; two datasets run 16
and 16, with one worker per study.

Before the studies start, each one's records (``--records``, results/tuning/studies/<model>_<dataset>/) are copied into
its study dir: its ``study.db``, from which it resumes, and the folds in ``unfinished_folds.json``. At ``--deadline``
seconds every study process gets SIGTERM, which it passes on to its workers (mnp/runs/signals.py); whatever of its
process group is left after GRACE_S is killed. The trial a study was running stays ``running`` in study.db: resumed,
the study fails it and asks it again with the same settings, and the folds it had finished are found in their run
directories and not trained again. A study whose budget is spent runs its seed check (docs/tuning.md), a candidate's
fold runs at once; the check's runs whose scores study.db does not hold yet are unfinished folds too. Those folds
travel in ``unfinished_folds.json`` (each fold's config.yaml, metrics.json and .hydra/overrides.yaml: what
``skip_if_done`` reads), so a session on a fresh machine reuses them too. Then ``$OUT/tune_studies.tgz`` holds every
study's records (study.db, trials.csv, best.yaml, unfinished_folds.json; no run directories) and
``$OUT/tune_studies.json`` says per study: trials finished before and after, how its winner is chosen (its seed check
finished, or the runs it has to go), seconds, exit status, and the failed folds with the tail of their logs. The
command ends within about deadline + GRACE_S + 10 s.
``.gpu/pylib`` and ``.gpu/data`` are used where present, as by gpu_check.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpu_check import ROOT, environment

if (ROOT / ".gpu" / "pylib").is_dir():  # hydra and optuna for this process's own reading of the records
    sys.path.insert(0, str(ROOT / ".gpu" / "pylib"))
sys.path.insert(0, str(ROOT))

# the datasets whose studies run here, declared with this budget in benchmarks/tuning/studies.sh and docs/tuning.md
DEVICE_DATASETS = ("handwritten", "scene15")
DEVICE_OVERRIDES = ("hydra.sweeper.parallel_folds=true", "hydra.sweeper.prune_after=0", "launcher=joblib")
# --cpu: one small study, its folds one at a time (one worker) and ~15 s each on a busy 2-core machine, so that the
# 60 s deadline falls inside its second trial, after its first fold; its seed check: 2 candidates x 1 seed x 2 folds
CPU_OVERRIDES = (
    "hydra.sweeper.n_trials=2",
    "hydra.sweeper.folds=2",
    "hydra.sweeper.n_startup_trials=1",
    "hydra.sweeper.seed_check.seeds=[1]",
    "hydra.sweeper.seed_check.candidates=2",
    "trainer.max_epochs=1000",
)
PENDING = "unfinished_folds.json"
RECORDS = ("study.db", "trials.csv", "best.yaml", PENDING)
FOLD_FILES = ("config.yaml", "metrics.json", ".hydra/overrides.yaml")
PYLIB = (
    "hydra",
    "hydra_plugins",
    "omegaconf",
    "antlr4",
    "entmax",
    "optuna",
    "alembic",
    "sqlalchemy",
    "mako",
    "colorlog",
)
GRACE_S = 30.0  # for a study to pass SIGTERM on (its workers get mnp.runs.signals.GRACE_S) and end
STOP = threading.Event()  # set by SIGTERM or Ctrl-C to this process: the deadline is now


def declared_models() -> list[str]:
    """The eight tuned models, as benchmarks/tuning/studies.sh declares them (its queue ``all``)."""
    text = (ROOT / "benchmarks" / "tuning" / "studies.sh").read_text()
    return re.search(r'all\) models="([^"]+)"', text).group(1).split()


@dataclass
class Run:
    """One study's process and what the summary says of it."""

    model: str
    dataset: str
    study_dir: Path
    log: Path
    proc: subprocess.Popen | None = None
    seconds: float = 0.0
    stopped: bool = False
    before: int = 0
    summary: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.model}_{self.dataset}"


def finished(trials_csv: Path) -> tuple[int, int | None, str | None]:
    """A study's finished trials, its budget and how its winner is chosen, from its trials.csv (0, None and None where
    there is none)."""
    from mnp.tune.records import header, read_trials

    if not trials_csv.is_file():
        return 0, None, None
    text = trials_csv.read_text()
    _, done, budget = read_trials(text)
    return len(done), budget, header(text).get("chosen_by")


def carry_in(run: Run, records: Path) -> None:
    """The study's records into its study dir: study.db (unless the dir has one: it is as new) and its unfinished
    trials' finished folds."""
    src = records / run.name
    run.study_dir.mkdir(parents=True, exist_ok=True)
    if (src / "study.db").is_file() and not (run.study_dir / "study.db").exists():
        shutil.copy2(src / "study.db", run.study_dir / "study.db")
    if (src / PENDING).is_file():
        for fold, files in json.loads((src / PENDING).read_text()).items():
            if Path(fold).name != fold or fold in ("", ".", "..") or set(files) - set(FOLD_FILES):
                raise SystemExit(f"error: {src / PENDING} holds {fold!r} with {sorted(files)}, not a fold's records")
            for name, text in files.items():
                (run.study_dir / fold / name).parent.mkdir(parents=True, exist_ok=True)
                (run.study_dir / fold / name).write_text(text)
    run.before = finished(src / "trials.csv")[0]


def unfinished_folds(run: Run) -> dict[str, dict[str, str]]:
    """The finished folds of the trials the study left running, and its seed check's runs whose scores it has not
    stored, by run directory: each one's FOLD_FILES."""
    import optuna
    import yaml
    from optuna.trial import TrialState

    from mnp.tune.seedcheck import recorded

    db = run.study_dir / "study.db"
    if not db.is_file():
        return {}
    study = optuna.load_study(study_name=run.name, storage=f"sqlite:///{db.resolve()}")
    running = [set(t.user_attrs.get("overrides", [])) for t in study.trials if t.state == TrialState.RUNNING]
    folds = {}
    for fold in sorted(p for p in run.study_dir.iterdir() if all((p / f).is_file() for f in FOLD_FILES)):
        given = set(yaml.safe_load((fold / ".hydra" / "overrides.yaml").read_text()) or [])
        if any(trial and trial <= given for trial in running) or not recorded(study, given):
            folds[fold.name] = {f: (fold / f).read_text() for f in FOLD_FILES}
    return folds


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.is_file() else ""


def failures(run: Run) -> list[dict]:
    """The folds that failed in this session (their failed.json), each with its message and the tail of its log."""
    out = []
    for record in sorted(run.study_dir.glob("*/failed.json")):
        failed = json.loads(record.read_text())
        out.append(
            {"run": record.parent.name, "message": failed.get("message"), "log_tail": tail(record.parent / "train.log")}
        )
    return out


def start(run: Run, overrides: list[str], env: dict) -> None:
    run.log.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "train.py", "-m", "experiment=tune", f"model={run.model}", f"dataset={run.dataset}"]
    with run.log.open("w") as log:  # the child keeps its own descriptor
        run.proc = subprocess.Popen(
            [*cmd, *overrides], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    run.seconds = time.time()


def stop(runs: list[Run]) -> None:
    """SIGTERM to every study still running, then, after GRACE_S at most, SIGKILL to what is left of each one's
    process group (workers, resource trackers)."""
    for run in runs:
        if run.proc.poll() is None:
            run.stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.proc.pid, signal.SIGTERM)
    end = time.monotonic() + GRACE_S
    while time.monotonic() < end and any(r.proc.poll() is None for r in runs):
        time.sleep(0.5)
    for run in runs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()


def wait(runs: list[Run], deadline: float, t0: float) -> None:
    """Until every study has ended, the deadline is reached or this process is told to stop (SIGTERM, Ctrl-C: the
    studies are stopped and their records packed as at the deadline); one line as each study ends."""
    live = set(range(len(runs)))
    while live and time.time() - t0 < deadline and not STOP.is_set():
        time.sleep(1.0)
        for i in sorted(live):
            if runs[i].proc.poll() is not None:
                live.discard(i)
                runs[i].seconds = time.time() - runs[i].seconds
                print(f"[t={time.time() - t0:.0f}s] {runs[i].name} ended, status {runs[i].proc.returncode}", flush=True)
    for i in live:
        runs[i].seconds = time.time() - runs[i].seconds


def summarise(run: Run, pending: dict) -> dict:
    after, budget, chosen_by = finished(run.study_dir / "trials.csv")
    rc = run.proc.returncode
    entry = {
        "study": run.name,
        "trials_before": run.before,
        "trials_after": after,
        "budget": budget,
        "chosen_by": chosen_by,
        "seconds": round(run.seconds, 1),
        "exit": rc,
        "stopped_at_deadline": run.stopped,
        "unfinished_folds": len(pending),
        "failures": failures(run),
    }
    if rc != 0 and not run.stopped:  # the study itself failed: its own log says why
        entry["log_tail"] = tail(run.log, 30)
    return entry


def pack(runs: list[Run], out: Path) -> Path:
    """``tune_studies.tgz``: every study's records, <model>_<dataset>/<file>."""
    path = out / "tune_studies.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for run in runs:
            pending = unfinished_folds(run)
            (run.study_dir / PENDING).unlink(missing_ok=True)
            if pending:
                (run.study_dir / PENDING).write_text(json.dumps(pending, indent=1) + "\n")
            run.summary = summarise(run, pending)
            for name in RECORDS:
                if (run.study_dir / name).is_file():
                    tar.add(run.study_dir / name, arcname=f"{run.name}/{name}")
    return path


def unpack(archive: Path, records: Path) -> None:
    """A returned tune_studies.tgz into ``records``: each study's files replace its own, and a study with no
    unfinished folds any more loses its unfinished_folds.json."""
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        for m in members:
            parts = m.name.split("/")
            if not (m.isfile() and len(parts) == 2 and re.fullmatch(r"[a-z0-9_]+", parts[0]) and parts[1] in RECORDS):
                raise SystemExit(f"error: {archive} holds {m.name!r}, not a study record (<model>_<dataset>/<file>)")
        for study in sorted({m.name.split("/")[0] for m in members}):
            dst = records / study
            dst.mkdir(parents=True, exist_ok=True)
            got = {m.name.split("/")[1]: m for m in members if m.name.startswith(f"{study}/")}
            (dst / PENDING).unlink(missing_ok=True)
            for name, m in got.items():
                (dst / name).write_bytes(tar.extractfile(m).read())
            print(f"{dst}: {', '.join(sorted(got))}")


def copy_pylib(dest: Path) -> None:
    """PYLIB, the packages the device's python lacks, from this interpreter's site-packages into ``dest`` (sources
    only: a compiled extension of this Python would not load there, and sqlalchemy runs without its own)."""
    import importlib.util

    for name in PYLIB:
        spec = importlib.util.find_spec(name)
        for src in (Path(p) for p in spec.submodule_search_locations):
            if ROOT not in src.parents:  # hydra_plugins: the installed launchers; the project's own travels with it
                shutil.copytree(
                    src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"), dirs_exist_ok=True
                )
    print(f"{dest}: {', '.join(PYLIB)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=None, help=f"of {', '.join(DEVICE_DATASETS)}")
    ap.add_argument("--models", nargs="+", default=None, help="default: the eight of benchmarks/tuning/studies.sh")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--work", type=Path, default=Path("/tmp/tune_studies"), help="the studies' log dir")
    ap.add_argument("--records", type=Path, default=ROOT / "results" / "tuning" / "studies")
    ap.add_argument("--deadline", type=float, default=None, help="seconds until the studies stop (540; --cpu: 60)")
    ap.add_argument("--jobs-per-study", type=int, default=None, help="fold workers per study (cores // studies)")
    ap.add_argument("--cpu", action="store_true", help="one small study of mlp on synthetic, on the CPU")
    ap.add_argument("--unpack", type=Path, help="a returned tune_studies.tgz: into --records, then exit")
    ap.add_argument("--pylib", type=Path, help="copy the packages the device lacks into this folder, then exit")
    args = ap.parse_args(argv)
    if args.unpack:
        unpack(args.unpack, args.records)
        return 0
    if args.pylib:
        copy_pylib(args.pylib)
        return 0
    datasets = args.datasets or (["synthetic"] if args.cpu else None)
    if not datasets or (not args.cpu and set(datasets) - set(DEVICE_DATASETS)):
        raise SystemExit(f"error: --datasets must be of {', '.join(DEVICE_DATASETS)} (CUB and PIE run on the CPU)")
    models = args.models or (["mlp"] if args.cpu else declared_models())
    deadline = args.deadline or (60.0 if args.cpu else 540.0)
    from mnp.cli.resources import cpu_count

    runs = [
        Run(m, d, args.work / "tune" / f"{m}_{d}", args.work / "logs" / f"{m}_{d}.log")
        for d in datasets
        for m in models
    ]
    jobs = args.jobs_per_study or (1 if args.cpu else max(1, cpu_count() // len(runs)))
    overrides = [
        f"paths.log_dir={args.work}",
        f"trainer={'cpu' if args.cpu else 'gpu'}",
        f"hydra.launcher.n_jobs={jobs}",
        *DEVICE_OVERRIDES,
        *(CPU_OVERRIDES if args.cpu else ()),
    ]
    env = {k: v for k, v in environment().items() if k != "HYDRA_FULL_ERROR"}  # the studies' one-line errors
    env.update(MNP_TORCH_THREADS="1")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: STOP.set())
    t0 = time.time()
    for run in runs:
        carry_in(run, args.records)
        start(run, overrides, env)
    print(f"{len(runs)} studies, {jobs} fold workers each, until {deadline:.0f} s: {' '.join(overrides)}", flush=True)
    wait(runs, deadline, t0)
    stop(runs)
    args.out.mkdir(parents=True, exist_ok=True)
    archive = pack(runs, args.out)
    summary = {
        "deadline_s": deadline,
        "jobs_per_study": jobs,
        "overrides": overrides,
        "studies": [r.summary for r in runs],
    }
    (args.out / "tune_studies.json").write_text(json.dumps(summary, indent=1) + "\n")
    for s in summary["studies"]:
        print(
            f"{s['study']}: trials {s['trials_before']} -> {s['trials_after']} of {s['budget']}, chosen by "
            f"{s['chosen_by']}, {s['seconds']} s, "
            f"exit {s['exit']}{' (stopped)' if s['stopped_at_deadline'] else ''}, {len(s['failures'])} failed folds"
        )
    print(f"done in {time.time() - t0:.0f} s: {archive} and {args.out / 'tune_studies.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
