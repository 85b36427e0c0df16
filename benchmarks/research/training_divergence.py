"""Where a run's training diverged: the first epoch whose training accuracy falls below half of the best it had
reached (after it had passed ``--reached``), its optimiser step, and the training loss and, where the model logs one,
its regulariser (``train/kl``) in the epochs around it, beside the steps the run trained in all. Reads only the runs'
``csv/metrics.csv`` and ``metrics.json``.

    python benchmarks/research/training_divergence.py <run dir>... --out benchmarks/etp_cub_divergence.json

Used for ETP's CUB collapse at its tuned defaults (docs/results.md, issue 44): which seeds collapse, at what epoch,
and whether the fold runs of its study, which chose those defaults (on 80 % of the rows: fewer steps an epoch), reach
as many steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

AROUND = 3  # epochs shown before the divergence and after it


def trace(run_dir: Path) -> list[dict]:
    """Per epoch: ``epoch``, ``step`` (the global step at its end), ``acc``, ``loss`` and ``kl`` (None where not
    logged) from the run's training rows."""
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/loss")]
    num = lambda r, k: float(r[k]) if r.get(k) else None  # noqa: E731
    keys = {"acc": "train/acc", "loss": "train/loss", "kl": "train/kl"}
    return [{"epoch": int(r["epoch"]), "step": int(r["step"]), **{k: num(r, c) for k, c in keys.items()}} for r in rows]


def divergence(epochs: list[dict], reached: float) -> int | None:
    """Index of the first epoch whose accuracy is below half the best so far, once the best has passed ``reached``."""
    best = -math.inf
    for i, e in enumerate(epochs):
        if best >= reached and e["acc"] < best / 2:
            return i
        best = max(best, e["acc"])
    return None


def summary(run_dir: Path, reached: float) -> dict:
    """The run's divergence epoch (None: trained without one), the epochs around it, its final score."""
    epochs = trace(run_dir)
    i = divergence(epochs, reached)
    out = {"run": run_dir.name, "epochs": len(epochs), "steps": epochs[-1]["step"] + 1 if epochs else 0}
    out["diverged_at"] = None if i is None else {"epoch": epochs[i]["epoch"], "step": epochs[i]["step"]}
    if i is not None:
        out["around"] = epochs[max(0, i - AROUND) : i + AROUND + 1]
        kls = [e["kl"] for e in epochs if e["kl"] is not None]
        out["kl_peak"] = max(kls) if kls else None
    if (run_dir / "metrics.json").is_file():
        final = json.loads((run_dir / "metrics.json").read_text())
        out["final"] = {k: final[k] for k in ("test/acc", "val/nll", "val/acc") if k in final}
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path, help="run directories (each with csv/metrics.csv)")
    p.add_argument("--reached", type=float, default=0.9, help="training accuracy a run must pass to count as trained")
    p.add_argument("--out", type=Path, help="write the JSON here (default: print it)")
    a = p.parse_args(argv)
    missing = [str(r) for r in a.runs if not (r / "csv" / "metrics.csv").is_file()]
    if missing:
        raise SystemExit(f"error: no csv/metrics.csv in {', '.join(missing)}")
    runs = [summary(r, a.reached) for r in sorted(a.runs)]
    diverged = [r for r in runs if r["diverged_at"] is not None]
    doc = {
        "command": "python benchmarks/research/training_divergence.py " + " ".join(map(str, a.runs)),
        "reached": a.reached,
        "diverged": len(diverged),
        "runs_n": len(runs),
        "first_divergence_step": min((r["diverged_at"]["step"] for r in diverged), default=None),
        "most_steps_without": max((r["steps"] for r in runs if r["diverged_at"] is None), default=None),
        "runs": runs,
    }
    text = json.dumps(doc, indent=1) + "\n"
    a.out.write_text(text) if a.out else print(text, end="")


if __name__ == "__main__":
    main()
