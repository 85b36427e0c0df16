"""Stage 1's decision records, on the device after the selection sweep (benchmarks/device/run.sh with STAGE=select).

    python3 benchmarks/device/decide.py logs/select --out $OUT/decisions [--datasets scene15]

For every dataset that jobs.select_jobs trained: each one-at-a-time candidate of jobs.SCREENS against the defaults
by val/nll, mnp_official's whole configuration (where its runs are there) by val/nll, then, on the defaults'
checkpoints, eq. 8′'s view weighting by val/noise/acc_mean and the prediction's S by val/nll, as the CPU selection
scripts (benchmarks/selection/) decide them: results/decisions/mnp_<dataset>.csv, to commit. A screen that picks
a variant leaves weighting and S to be re-run on its checkpoints (the scripts' CHOSEN argument).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import RIVAL, SCREENS  # noqa: E402

from mnp.tools.select import select  # noqa: E402


def decision_calls(runs: str, dataset: str, out: str, rival_ran: bool) -> list[list[str]]:
    """The `mnp.tools.select` argument lists that decide one dataset, in order."""
    common = [runs, "--model", "mnp", "--dataset", dataset, "--out", out]
    calls = [
        ["decide", *common, "--decision", name, "--match", candidate.split()[0].split("=")[0] + "="]
        for name, candidate in SCREENS[dataset].items()
    ]
    if rival_ran:
        calls.append(["decide", *common, "--decision", "configuration", "--rival", RIVAL])
    calls.append(["infer", *common, "--decision", "view_weighting", "--criterion", "val/noise/acc_mean", "--higher"])
    calls.append(
        ["infer", *common, "--decision", "eval_samples", "--samples", "5", "10", "20", "--criterion", "val/nll"]
    )
    return calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", help="the selection sweep's directory (logs/select)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", choices=list(SCREENS), help="only these (default: those with runs)")
    args = ap.parse_args()
    runs = Path(args.runs)
    trained = args.datasets or [d for d in SCREENS if any(runs.rglob(f"mnp_{d}_s*"))]
    failed = 0
    for dataset in trained:
        rival_ran = any(runs.rglob(f"{RIVAL}_{dataset}_s*"))
        for call in decision_calls(args.runs, dataset, str(args.out / f"mnp_{dataset}.csv"), rival_ran):
            failed += select.main(call) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
