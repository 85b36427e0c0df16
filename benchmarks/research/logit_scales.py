"""MNP's learned logit scales on validation rows (issue 31, calibration): how far above the floor f of eq. 11's
scale f + (1 - f)·softplus the decoder puts them, against the margin between the two largest logit means, on
experiment=select checkpoints only (no test row is read).

A floor acts only on the predictions whose scale would fall below it. The scale is the standard deviation of the
logit noise; it softens a prediction only where it is comparable to the top-2 margin of the logit means.

    MNP_DATA_DIR=../shared/data python benchmarks/research/logit_scales.py <select run dir>... --out out.json

Per run: quantiles of the scale over every validation row, class and z-sample of the multimodal prediction, and of
the top-2 margin. Findings: docs/diagnosis.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mnp.cli.run_loading import load_finished_run  # noqa: E402

QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)


def probe(run_dir: str) -> dict:
    """Quantiles of the logit scale and of the top-2 logit-mean margin on the run's validation rows."""
    _, _, _, dm, model, _ = load_finished_run(run_dir)
    if getattr(dm, "eval_split", "test") != "val":
        raise SystemExit(f"error: {run_dir} does not evaluate on validation rows (experiment=select runs only)")
    model.eval()
    seen: list = []
    hook = model.decoder.register_forward_hook(lambda _m, _i, out: seen.append(out))
    with torch.no_grad():
        model.predict(list(dm.val_views))
    hook.remove()
    loc, scale = seen[-1]  # the multimodal prediction's decoder call: (S, B, K) each
    top2 = loc.float().topk(2, dim=-1).values
    q = torch.tensor(QUANTILES)
    return {
        "run": Path(run_dir).name,
        "scale_floor": model.decoder.scale_floor,
        "rows": int(loc.shape[-2]),
        "scale_quantiles": [round(x, 4) for x in torch.quantile(scale.float().flatten(), q).tolist()],
        "margin_quantiles": [round(x, 4) for x in torch.quantile((top2[..., 0] - top2[..., 1]).flatten(), q).tolist()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="experiment=select run directories of mnp")
    ap.add_argument("--out", required=True, help="the JSON file written")
    args = ap.parse_args()
    rows = [probe(r) for r in args.runs]
    for r in rows:
        print(f"{r['run']}: scale {r['scale_quantiles']}  top-2 margin {r['margin_quantiles']}")
    Path(args.out).write_text(json.dumps({"quantiles": list(QUANTILES), "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
