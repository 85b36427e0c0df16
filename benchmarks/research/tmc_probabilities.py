"""TMC's ECE under each probability a Dirichlet opinion can be read as (issue 46: the paper's 0.072 on PIE
against our 0.724), from the test predictions a run archived, ``predictions.npz`` (no retraining, no choice made).

    python benchmarks/research/tmc_probabilities.py <tmc run dir>... --out results/differences/tmc_ece.csv

A run stores the fused opinion's Dirichlet mean p = α/S and its uncertainty u = K/S, so S = K/u and α = p·S; every
reading follows from them: ``dirichlet_mean`` α/S (ours, TMC's own prediction); ``belief`` the belief masses
b = (α − 1)/S (summing to 1 − u, top-label confidence max b); ``belief_normalised`` b/Σb, the evidence's share
e/Σe; ``softmax_evidence`` softmax(e) with e = α − 1; ``softmax_alpha_log`` softmax(log α), which is α/S again,
left out. The argmax, hence the accuracy, is the same for all. Findings: docs/results.md (Differences from the paper).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mnp.eval.metrics import accuracy, ece  # noqa: E402

FIELDS = ["dataset", "seed", "definition", "ece", "acc", "rows"]


def readings(probs: np.ndarray, uncertainty: np.ndarray) -> dict[str, np.ndarray]:
    """Each probability reading of the fused Dirichlet opinion (rows × K) from p = α/S and u = K/S."""
    k = probs.shape[-1]
    s = (k / uncertainty.astype(np.float64))[:, None]
    alpha = probs.astype(np.float64) * s
    evidence = np.clip(alpha - 1, 0, None)
    soft = np.exp(evidence - evidence.max(-1, keepdims=True))
    return {
        "dirichlet_mean": alpha / s,
        "belief": evidence / s,
        "belief_normalised": evidence / np.clip(evidence.sum(-1, keepdims=True), 1e-12, None),
        "softmax_evidence": soft / soft.sum(-1, keepdims=True),
    }


def probe(run_dir: Path) -> list[dict]:
    """One row per reading of the run's test predictions."""
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    if cfg["model"]["name"] != "tmc":
        raise SystemExit(f"error: {run_dir} is a run of {cfg['model']['name']}, not tmc")
    z = np.load(run_dir / "predictions.npz")
    labels = torch.from_numpy(z["test/labels"])
    rows = []
    for name, p in readings(z["test/probs"], z["test/uncertainty"]).items():
        probs = torch.from_numpy(p)
        rows.append(
            {
                "dataset": cfg["dataset"]["name"],
                "seed": cfg["seed"],
                "definition": name,
                "ece": round(ece(probs, labels), 6),
                "acc": round(accuracy(probs, labels), 6),
                "rows": len(labels),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories of model=tmc")
    ap.add_argument("--out", type=Path, required=True, help="the CSV written")
    args = ap.parse_args()
    rows = [r for run in sorted(args.runs) for r in probe(run)]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        w = csv.DictWriter(f, FIELDS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    for r in rows:
        print(f"{r['dataset']} s{r['seed']} {r['definition']:>18}: ECE {r['ece']:.3f}  acc {r['acc']:.4f}")


if __name__ == "__main__":
    main()
