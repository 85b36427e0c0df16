"""The diagnosis figures of docs/diagnosis.md at today's defaults, from one command.

``python -m mnp.tools.diagnose.diagnose_figures --logs <dir> [--only NAME ...] [--out figures]``

For each figure of :data:`FIGURES` it trains the run it needs (``train.py experiment=paper_main``, seed 0, today's
config plus the figure's overrides; a finished run in ``<dir>/<name>`` is reused), replays the noise protocol on it
with :mod:`mnp.tools.diagnose` and writes ``figures/diagnose_<name>.json`` and ``.png``. The JSON records the run's
saved config (its result groups), so ``tests/test_diagnose_figures.py`` fails once a default changes under a
committed figure: :func:`stale` compares that config with today's defaults as ``report --relabel`` does.
CPU time, one thread: about 15 s a CUB run, 6 min PIE's `mnp`, 3 min PIE's `mnp_official`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
# name -> the run it diagnoses: model, dataset, seed 0, and the overrides that make it the figure's variant
FIGURES = {
    "mnp_cub_s0": {"model": "mnp", "dataset": "cub", "overrides": []},
    "mnp_cub_eq8_s0": {"model": "mnp", "dataset": "cub", "overrides": ["model.aggregation.view_weighting.mode=none"]},
    "mnp_pie_s0": {"model": "mnp", "dataset": "pie", "overrides": []},
    "mnp_official_pie_s0": {"model": "mnp_official", "dataset": "pie", "overrides": []},
}
SEED = 0


def run_dir(logs: Path, name: str) -> Path | None:
    """The finished run (a ``metrics.json`` beside its ``config.yaml``) under ``logs/name``, if any."""
    done = sorted(p.parent for p in (logs / name).glob("**/metrics.json") if (p.parent / "config.yaml").is_file())
    return done[0] if done else None


def train(logs: Path, name: str) -> Path:
    """Train the figure's run with ``train.py`` (reused when finished); its run directory."""
    spec = FIGURES[name]
    if run_dir(logs, name) is None:
        cmd = [sys.executable, str(ROOT / "train.py"), "experiment=paper_main", f"model={spec['model']}"]
        cmd += [f"dataset={spec['dataset']}", f"seed={SEED}", f"paths.log_dir={logs / name}", *spec["overrides"]]
        subprocess.run(cmd, cwd=ROOT, check=True, env=os.environ | {"WANDB_MODE": "disabled"})
    found = run_dir(logs, name)
    if found is None:
        raise FileNotFoundError(f"train.py left no finished run under {logs / name}")
    return found


def stale(record: dict) -> str | None:
    """Where a figure's recorded run config differs from today's defaults plus the figure's overrides
    (``"k=v,..."`` of the run's values, as ``report --relabel`` labels a run), None when it is current."""
    from mnp.tools.report.relabel import variant_of

    spec = FIGURES[record["figure"]]
    variant = variant_of(record["config"], spec["model"], spec["dataset"], SEED, tuned=True)  # conf/ as it is today
    expected = ",".join(spec["overrides"]) or None
    return None if variant == expected else f"run differs from today's config: {variant or 'none'}"


def write(logs: Path, name: str, out: Path) -> Path:
    """Diagnose the figure's run; write ``out/diagnose_<name>.json`` (with the run's config) and ``.png``."""
    from mnp.tools.diagnose import diagnose
    from mnp.tools.report.relabel import RESULT_GROUPS

    run = train(logs, name)
    path = out / f"diagnose_{name}.json"
    diagnose.main([str(run), "--json", str(path), "--plot", str(path.with_suffix(".png"))])
    config = yaml.safe_load((run / "config.yaml").read_text())
    record = json.loads(path.read_text())
    record.update(figure=name, config={k: config[k] for k in (*RESULT_GROUPS, "tuned_from") if k in config})
    record["run"] = run.relative_to(logs).as_posix()  # not the machine's absolute path
    path.write_text(json.dumps(record, indent=1))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m mnp.tools.diagnose.diagnose_figures", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--logs", type=Path, required=True, help="log directory of the runs (reused when finished)")
    ap.add_argument("--only", nargs="+", choices=sorted(FIGURES), help="these figures only")
    ap.add_argument("--out", type=Path, default=ROOT / "figures", help="directory of the figures")
    args = ap.parse_args(argv)
    for name in args.only or FIGURES:
        print(f"wrote {write(args.logs.resolve(), name, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
