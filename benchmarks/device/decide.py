"""Stage 1's decision records, on the device after the selection sweep (benchmarks/device/run.sh with STAGE=select).

    python3 benchmarks/device/decide.py logs/select --out $OUT/decisions [--datasets handwritten]

Each one-at-a-time candidate of jobs.CANDIDATES is decided against the defaults by val/nll, then eq. 8′'s view
weighting by val/noise/acc_mean on the defaults' checkpoints: results/decisions/mnp_<dataset>.csv, to commit.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import CANDIDATES  # noqa: E402
from mnp.tools import select  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", help="the selection sweep's directory (logs/select)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--datasets",
        nargs="+",
        choices=list(CANDIDATES),
        default=list(CANDIDATES),
        help="only these datasets' decisions (a CPU session runs one dataset's sweep)",
    )
    args = ap.parse_args()
    failed = 0
    for dataset in args.datasets:
        candidates = CANDIDATES[dataset]
        out = str(args.out / f"mnp_{dataset}.csv")
        common = [args.runs, "--model", "mnp", "--dataset", dataset, "--out", out]
        for c in filter(None, candidates):
            key = c.split("=")[0].removeprefix("model.")
            failed += select.main(["decide", *common, "--decision", key, "--match", c.split()[0]]) != 0
        failed += (
            select.main(
                ["infer", *common, "--decision", "view_weighting", "--criterion", "val/noise/acc_mean", "--higher"]
            )
            != 0
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
