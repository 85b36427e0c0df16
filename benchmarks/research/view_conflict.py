"""View-weighting signals on validation rows (issue 31, the Scene15 dip): eq. 8, eq. 8′ over a wide q × p grid,
and three conflict signals, on experiment=select checkpoints only (no test row is read).

Conflict signals of view m for target i, each referenced as eq. 8′'s distance is, to a quantile of its value over
the training rows, κᶜ = min(1, (c_ref / c)^p), alone and multiplied with eq. 8′'s κ (``d+…``):
- ``loo``: view m's unimodal posterior N(μ_m, σ²_m) against the MBA posterior of the other views,
  c = mean_d (μ_m − μ_−m)² / (σ²_m + σ²_−m);
- ``pair``: the same against the closest single other view (a view that agrees with one other is not the odd one);
- ``pred``: the squared Hellinger distance between the class probabilities decoded from the views' posterior means,
  to the closest other view.
With two views each is symmetric and leaves eq. 8′'s weights as they were. The ``oracle`` row removes the noised
views (the missing-view ceiling); ``distance_ratio`` records the median d² / d²_ref of noised and clean views.

    MNP_DATA_DIR=../shared/data python benchmarks/research/view_conflict.py <select run dir>... --out out.json

Each variant is scored with one noise draw per (σ, subset) over the whole validation set (the routine draws per
batch), so the numbers are this script's own: compare variants with each other, not with the decision records.
Findings: docs/diagnosis.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mnp.cli.run_loading import load_finished_run  # noqa: E402
from mnp.eval.protocols import add_noise, default_noise_levels, sigma_key  # noqa: E402
from mnp.model.aggregation import mba_posterior, unimodal_posteriors  # noqa: E402
from mnp.model.decoder import sample_logits  # noqa: E402
from mnp.model.view_weighting import log_proximity, nearest_sq_dist  # noqa: E402

SIGMAS = tuple(default_noise_levels())  # the evaluation protocol's σ, labelled as its metrics are (sigma_key)
CHUNK = 1024
D_QUANTILES = (0.5, 0.75, 0.9, 0.99, 1.0)  # eq. 8′'s grid, wider than mnp.tools.select's (lower q, higher p)


def conflict(r_star, s_star, u, q) -> torch.Tensor:
    """c (M, B): each view's unimodal posterior against the MBA posterior of the others (leave-one-out)."""
    mu_m, var_m = unimodal_posteriors(r_star, s_star, u, q)
    m_views = r_star.shape[0]
    out = []
    for m in range(m_views):
        keep = torch.ones(r_star.shape[1], m_views, device=r_star.device)
        keep[:, m] = 0
        mu_o, var_o = mba_posterior(r_star, s_star, u, q, keep)
        out.append(((mu_m[m] - mu_o) ** 2 / (var_m[m] + var_o)).mean(-1))
    return torch.stack(out)


def pair_conflict(r_star, s_star, u, q) -> torch.Tensor:
    """c (M, B): each view's smallest conflict with any single other view (a view that agrees with one other is
    not the odd one out)."""
    mu, var = unimodal_posteriors(r_star, s_star, u, q)
    return closest_other(((mu[:, None] - mu[None]) ** 2 / (var[:, None] + var[None])).mean(-1))


def pred_conflict(decoder, r_star, s_star, u, q) -> torch.Tensor:
    """c (M, B): each view's smallest squared Hellinger distance 1 − Σ_k √(p_m p_m′) to any other view, p_m the class
    probabilities decoded from view m's posterior mean (the views' latents need not be aligned; their classes are)."""
    mu, _ = unimodal_posteriors(r_star, s_star, u, q)
    p = decoder(mu)[0].float().softmax(-1)  # (M, B, K)
    return closest_other((1.0 - (p[:, None] * p[None]).clamp_min(0).sqrt().sum(-1)).clamp_min(1e-12))


def closest_other(pair: torch.Tensor) -> torch.Tensor:
    """(M, B): each view's smallest value of a pairwise (M, M, B) table over the other views."""
    eye = torch.eye(pair.shape[0], dtype=torch.bool, device=pair.device)[..., None]
    return pair.masked_fill(eye, float("inf")).min(1).values


@torch.no_grad()
def signals(model, views):
    """(d² (M, B), c (M, B), (r*, s*, u, q)) in chunks of rows."""
    d2s, cs, parts = [], [], []
    amp = model.view_weighting.amplitude()
    for i in range(0, views[0].shape[0], CHUNK):
        _, scores, _, r_star, s_star, u, q = model._attend_scores([v[i : i + CHUNK] for v in views])
        u = u.expand_as(r_star) if u.shape[1] == 1 else u
        q = q.expand_as(r_star) if q.shape[1] == 1 else q
        d2s.append(nearest_sq_dist(scores, amp))
        cs.append(
            torch.stack(
                [
                    conflict(r_star, s_star, u, q),
                    pair_conflict(r_star, s_star, u, q),
                    pred_conflict(model.decoder, r_star, s_star, u, q),
                ]
            )
        )
        parts.append((r_star, s_star, u, q))
    cat = [torch.cat([p[k] for p in parts], 1) for k in range(4)]
    return torch.cat(d2s, 1), torch.cat(cs, 2), cat


def reference(values: torch.Tensor, quantile: float) -> torch.Tensor:
    """(M,) quantile of each view's values over rows, rows at 0 (in the memory) left out."""
    return torch.stack([torch.quantile(row[row > 0], quantile) for row in values.flatten(0, -2)]).view(
        values.shape[:-1]
    )


def weights(log_kappas: list[torch.Tensor]) -> torch.Tensor | None:
    """(B, M) relative weights from summed log κ (M, B) terms; None for eq. 8."""
    if not log_kappas:
        return None
    lk = sum(log_kappas).t()
    return (lk - lk.max(-1, keepdim=True).values).exp()


def accuracy(model, parts, w, y, generator) -> float:
    mu, var = mba_posterior(*parts, w)
    spec = model.spec.decoder
    logits = sample_logits(model.decoder, mu, var, spec.prediction_samples, spec.sigma_as_std, generator)
    return float((logits.float().softmax(-1).mean(0).argmax(-1) == y).float().mean())


def variants(d_ref, c_ref, settings):
    """name -> function (d², c) -> list of log κ terms."""
    q_d, p_d = settings
    out = {"none": lambda d2, c: []}
    for qd in D_QUANTILES:
        for pd in (1.0, 2.0, 4.0):
            out[f"distance q={qd:g} p={pd:g}"] = lambda d2, c, qd=qd, pd=pd: [log_proximity(d2, d_ref[qd], pd)]
    for k, kind in enumerate(("loo", "pair", "pred")):
        for qc in (0.9, 0.99):
            for pc in (1.0, 2.0):
                out[f"{kind} q={qc:g} p={pc:g}"] = lambda d2, c, k=k, qc=qc, pc=pc: [
                    log_proximity(c[k], c_ref[qc][k], pc)
                ]
                out[f"d+{kind} q={qc:g} p={pc:g}"] = lambda d2, c, k=k, qc=qc, pc=pc: [
                    log_proximity(d2, d_ref[q_d], p_d),
                    log_proximity(c[k], c_ref[qc][k], pc),
                ]
    return out


def evaluate(run_dir: Path) -> dict:
    _, _, dataset, dm, model, _ = load_finished_run(run_dir)
    if dm.eval_split != "val":
        raise SystemExit(f"error: {run_dir} is not an experiment=select run (it evaluates on test rows)")
    model.eval()
    vw = model.spec.aggregation.view_weighting
    setting = (vw.quantile, vw.power)
    train = [torch.as_tensor(v, dtype=torch.float32) for v in dm.train_views]
    d2_tr, c_tr, _ = signals(model, train)
    d_ref = {q: reference(d2_tr, q) for q in {*D_QUANTILES, setting[0]}}
    c_ref = {q: reference(c_tr, q) for q in (0.9, 0.99)}
    val = [torch.as_tensor(v, dtype=torch.float32) for v in dm.val_views]
    y = torch.as_tensor(dm.val_y)
    subsets = model.noise_subsets
    out: dict[str, dict[str, list[float]]] = {}
    diag: dict[str, dict[str, list[float]]] = {}
    cases = [("clean", None, 0.0)] + [(sigma_key(s), sub, s) for s in SIGMAS for sub in subsets]
    for label, sub, sigma in cases:
        g = torch.Generator().manual_seed(0)
        xs = val if sub is None else add_noise(val, sub, sigma, g)
        d2, c, parts = signals(model, xs)
        for name, fn in variants(d_ref, c_ref, setting).items():
            acc = accuracy(model, parts, weights(fn(d2, c)), y, torch.Generator().manual_seed(1))
            out.setdefault(name, {}).setdefault(label, []).append(acc)
        for q in (0.5, 0.99):  # where the rows sit against eq. 8′'s reference: median d²/d²_ref, noised and clean views
            ratio = d2 / d_ref[q][:, None]
            noised = [m for m in range(len(val)) if sub is not None and m in sub]
            clean = [m for m in range(len(val)) if m not in noised]
            for kind, views in (("noised", noised), ("clean", clean)):
                if views:
                    key = f"d2/ref q={q:g} {kind} views"
                    diag.setdefault(key, {}).setdefault(label, []).append(float(ratio[views].median()))
        oracle = torch.ones(len(y), len(val))  # the noised views removed: the missing-view ceiling
        if sub is not None:
            oracle[:, list(sub)] = 0
        acc = accuracy(model, parts, oracle, y, torch.Generator().manual_seed(1))
        out.setdefault("oracle (noised views removed)", {}).setdefault(label, []).append(acc)
    summary = {n: {k: float(np.mean(v)) for k, v in by.items()} for n, by in out.items()}
    for n in summary:
        summary[n]["noise_mean"] = float(np.mean([summary[n][sigma_key(s)] for s in SIGMAS]))
    where = {n: {k: float(np.mean(v)) for k, v in by.items()} for n, by in diag.items()}
    return {"run": str(run_dir), "dataset": dataset, "variants": summary, "distance_ratio": where}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    runs = []
    for d in args.runs:
        runs.append(evaluate(d))
        print(f"{d}: done", flush=True)
    names = runs[0]["variants"].keys()
    keys = ["clean", "1", "2.154", "10", "noise_mean"]
    mean = {n: {k: float(np.mean([r["variants"][n][k] for r in runs])) for k in keys} for n in names}
    command = (
        "python benchmarks/research/view_conflict.py " + " ".join(str(d) for d in args.runs) + f" --out {args.out}"
    )
    args.out.write_text(json.dumps({"command": command, "mean": mean, "runs": runs}, indent=1) + "\n")
    for n, m in mean.items():
        print(f"{n:24s} " + "  ".join(f"{k} {100 * m[k]:.2f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
