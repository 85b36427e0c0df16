"""Are two sets of runs the same, bit for bit? Every non-timing metric of ``metrics.json`` and every array of
``predictions.npz``, run directory by run directory (those of the same name under both roots).

    python benchmarks/same_runs.py <runs of commit A> <runs of commit B> --out benchmarks/parts_bit_identity.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def metrics(run: Path) -> dict:
    data = json.loads((run / "metrics.json").read_text())
    return {k: v for k, v in data.items() if isinstance(v, (int, float)) and not k.startswith("time/")}


def compare(a: Path, b: Path) -> dict:
    ma, mb = metrics(a), metrics(b)
    pa, pb = np.load(a / "predictions.npz"), np.load(b / "predictions.npz")
    return {
        "run": a.name,
        "metrics": len(ma),
        "metrics_differing": sorted(k for k in ma.keys() | mb.keys() if ma.get(k) != mb.get(k)),
        "prediction_arrays": len(pa.files),
        "arrays_differing": sorted(
            k
            for k in set(pa.files) | set(pb.files)
            if k not in pa.files or k not in pb.files or not np.array_equal(pa[k], pb[k], equal_nan=True)
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--note", default="")
    args = ap.parse_args(argv)
    runs = sorted(p.name for p in args.a.iterdir() if (p / "metrics.json").is_file())
    if missing := [r for r in runs if not (args.b / r / "metrics.json").is_file()]:
        raise SystemExit(f"error: {args.b} has no run {missing[0]}")
    rows = [compare(args.a / r, args.b / r) for r in runs]
    for r in rows:
        print(
            f"{r['run']}: {r['metrics']} metrics, {len(r['metrics_differing'])} differ; "
            f"{r['prediction_arrays']} prediction arrays, {len(r['arrays_differing'])} differ"
        )
    same = all(not r["metrics_differing"] and not r["arrays_differing"] for r in rows)
    if args.out:
        args.out.write_text(json.dumps({"note": args.note, "identical": same, "runs": rows}, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
