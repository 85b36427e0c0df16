"""The owned ECE (mnp.eval.metrics.ece) against torchmetrics' on the stored predictions of real runs (issue 33).

``python benchmarks/ece_owned.py [--out benchmarks/ece_owned.json] [ROOT ...]`` reads every ``predictions.npz`` under the roots (default
/work/runs) and prints, per run directory with test (else validation) probabilities: the stored ``test/ece``
(``val/ece``) of its metrics.json,
torchmetrics' ECE (15 bins, as runs computed it before), the owned ECE, their difference, the rows of confidence
exactly 1 (torchmetrics' 16th bin) and the probabilities' range; then the largest absolute difference, and whether
the owned accuracy equals torchmetrics' bit for bit everywhere. ``--out`` writes that summary as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_calibration_error

from mnp.eval import metrics


def main(roots: list[str], out: str | None = None) -> None:
    worst, same_acc, n = (0.0, ""), True, 0
    for path in sorted(p for r in roots for p in Path(r).rglob("predictions.npz")):
        with np.load(path) as z:
            split = next((s for s in ("test", "val") if f"{s}/probs" in z), None)
            if split is None:
                continue
            probs, labels = torch.as_tensor(z[f"{split}/probs"]), torch.as_tensor(z[f"{split}/labels"]).long()
        js = path.parent / "metrics.json"
        stored = json.loads(js.read_text()).get(f"{split}/ece", float("nan")) if js.is_file() else float("nan")
        k = probs.shape[-1]
        old = multiclass_calibration_error(probs.float(), labels, num_classes=k, n_bins=15, norm="l1").item()
        new = metrics.ece(probs, labels)
        same_acc &= (
            metrics.accuracy(probs, labels) == multiclass_accuracy(probs, labels, num_classes=k, average="micro").item()
        )
        ones = int((probs.max(-1).values == 1).sum())
        print(
            f"{path.parent} {split}  stored {stored:.6f}  torchmetrics {old:.6f}  owned {new:.6f}  diff {new - old:+.2e}  "
            f"conf=1: {ones}/{len(labels)}  range [{probs.min().item():.3g}, {probs.max().item():.9g}]"
        )
        worst, n = max(worst, (abs(new - old), str(path.parent))), n + 1
    print(
        f"{n} runs; largest |owned - torchmetrics| = {worst[0]:.3e} ({worst[1]}); "
        f"accuracy bit-identical to torchmetrics: {same_acc}"
    )
    if out:
        Path(out).write_text(
            json.dumps(
                {
                    "runs": n,
                    "max_abs_diff": worst[0],
                    "worst_run": Path(worst[1]).name,
                    "accuracy_bit_identical": same_acc,
                    "roots": roots,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="*", default=["/work/runs"])
    ap.add_argument("--out", default=None, help="write the summary as JSON")
    a = ap.parse_args()
    main(a.roots, a.out)
