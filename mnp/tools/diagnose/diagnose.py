"""Why a trained MNP is or is not robust to noisy views: attention and MBA under the noise protocol.

``python -m mnp.tools.diagnose <run dir or last.ckpt> [--sigmas ...] [--json PATH] [--plot PATH]``

For every noise level σ and every noised subset of ⌊M/2⌋ views (docs/method.md §5) it measures, on the clean
test split of the run's own data:

* ``acc``: the multimodal accuracy (eq. 12);
* ``acc_uniform``: the same with the noised views' attention set to uniform weights, which is what
  sparsemax gives when every RBF score is 0, the paper's picture of a far-away target (Section 3.3);
* ``uni_acc``: the unimodal accuracy of every view (eq. 8 with one term);
* ``support``: the mean number of context points with non-zero attention, per view;
* ``score_max``: the mean over targets of the largest similarity score, per view (G of eq. 9);
* ``precision``: the MBA precision 1/s*_m + 1/q_m of every view, averaged over targets and dimensions
  (eq. 8), and ``mba_weight``: the share of the total precision held by the noised views. Pooled rows
  give ``precision_ratio_noised``, the noised views' precision over their precision on clean inputs:
  1 means the noise does not lower a view's weight in the aggregation at all.

Rows pooled over the subsets, the per-subset rows, and the learned lengthscales go to the JSON; the
plot shows accuracies and the noised views' attention and MBA precision against σ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from mnp.eval.protocols import add_noise, noise_subsets
from mnp.model.decoder import sample_logits

DEFAULT_SIGMAS = (0.0, 0.1, 0.46, 1.0, 2.15, 10.0)


def _probs(model, r_star, s_star, u, q, weights=None, seed: int = 0):
    """p̂ (B, K) and the unimodal p̂^m (M, B, K) from target-specific representations (eqs. 8 or 8′ with
    ``weights`` (B, M), 11–13).

    The Monte Carlo draws come from ``seed`` in a forked RNG, so two calls compare paired samples.
    """
    mu, var = model.aggregation(r_star, s_star, u, q, weights)
    mu_m, var_m = model.aggregation.unimodal(r_star, s_star, u, q)
    mu_all = torch.cat([mu[None], mu_m])
    var_all = None if var is None else torch.cat([var[None], var_m])
    devices = [mu.device] if mu.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        logits = sample_logits(
            model.decoder, mu_all, var_all, model.spec.decoder.num_samples, model.spec.decoder.sigma_as_std
        )
    probs = logits.float().softmax(-1).mean(0)
    return probs[0], probs[1:]


@torch.no_grad()
def measure(model, views: list[torch.Tensor], y: torch.Tensor, subset: tuple[int, ...]) -> dict:
    """Diagnostics of one (noised) evaluation of ``views``; ``subset`` names the noised views."""
    e = model.explain(views)
    r_all, s_all, scores, attn = e.r, e.s, e.scores, e.attention
    r_star, s_star, u, q = e.r_star, e.s_star, e.u, e.q
    weights = e.view_weights  # eq. 8′ with view_weighting=distance, else None (eq. 8)
    p, p_m = _probs(model, r_star, s_star, u, q, weights)
    r_u, s_u = r_star.clone(), s_star.clone()
    for m in subset:  # uniform attention: the context mean of r and s
        r_u[m] = r_all[m].mean(0).to(r_u.dtype)
        s_u[m] = s_all[m].mean(0)
    p_u, _ = _probs(model, r_u, s_u, u, q, weights)
    precision = (1.0 / s_star + 1.0 / q).mean(-1)  # (M, B), eq. 8
    if weights is not None:
        precision = precision * weights.t()  # eq. 8′
    share = precision[list(subset)].sum(0) / precision.sum(0) if subset else torch.zeros_like(y, dtype=torch.float)
    mba = model.spec.aggregation.kind == "mba"
    return {
        "acc": (p.argmax(-1) == y).float().mean().item(),
        "acc_uniform": (p_u.argmax(-1) == y).float().mean().item(),
        "uni_acc": (p_m.argmax(-1) == y).float().mean(-1).tolist(),
        "support": (attn > 0).float().sum(-1).mean(-1).tolist(),
        "score_max": scores.max(-1).values.mean(-1).tolist(),
        "precision": precision.mean(-1).tolist() if mba else None,
        "mba_weight": share.mean().item() if mba else None,
    }


def _pool(rows: list[dict], num_views: int, clean_precision: list[float] | None) -> dict:
    """Average the per-subset rows of one σ; unimodal accuracy and support split into noised / clean views."""

    def mean(xs):
        xs = [x for x in xs if x is not None]
        return float(np.mean(xs)) if xs else None

    noised = [(r, m) for r in rows for m in range(num_views) if m in r["subset"]]
    clean = [(r, m) for r in rows for m in range(num_views) if m not in r["subset"]]
    return {
        "sigma": rows[0]["sigma"],
        "acc": mean([r["acc"] for r in rows]),
        "acc_uniform": mean([r["acc_uniform"] for r in rows]),
        "uni_acc_noised": mean([r["uni_acc"][m] for r, m in noised]),
        "uni_acc_clean": mean([r["uni_acc"][m] for r, m in clean]),
        "support_noised": mean([r["support"][m] for r, m in noised]),
        "support_clean": mean([r["support"][m] for r, m in clean]),
        "score_max_noised": mean([r["score_max"][m] for r, m in noised]),
        "precision_ratio_noised": None
        if clean_precision is None
        else mean([r["precision"][m] / clean_precision[m] for r, m in noised]),
    }


def diagnose(model, views: list[torch.Tensor], y: torch.Tensor, sigmas=DEFAULT_SIGMAS, seed: int = 0) -> dict:
    """Run :func:`measure` for every σ and noised subset; return per-subset and pooled rows."""
    from mnp.model import MNP

    if not isinstance(model, MNP):
        raise TypeError(f"mnp.tools.diagnose explains MNP's attention and MBA; got a {type(model).__name__}")
    model.eval()
    subsets = noise_subsets(len(views)) or [()]
    g = torch.Generator(device=views[0].device).manual_seed(seed)
    clean = measure(model, list(views), y, ())
    rows = []
    for sigma in sigmas:
        for subset in subsets:
            noisy = add_noise(views, subset, sigma, g) if sigma > 0 else list(views)
            rows.append({"sigma": float(sigma), "subset": list(subset), **measure(model, noisy, y, subset)})
    pooled = [_pool([r for r in rows if r["sigma"] == float(s)], len(views), clean["precision"]) for s in sigmas]
    ls = (
        [l.detach().cpu() for l in model.similarity.lengthscales()] if hasattr(model.similarity, "lengthscales") else []
    )
    return {
        "memory_size": int(model.memory.context()[1].numel()),
        "lengthscale": [{"mean": l.mean().item(), "min": l.min().item(), "max": l.max().item()} for l in ls],
        "pooled": pooled,
        "rows": rows,
    }


def table_md(result: dict) -> str:
    fmt = lambda x, d=3: "–" if x is None else f"{x:.{d}f}"  # noqa: E731
    lines = [
        f"context points N^m = {result['memory_size']}; lengthscale per view (mean [min, max]): "
        + ", ".join(f"{l['mean']:.2f} [{l['min']:.2f}, {l['max']:.2f}]" for l in result["lengthscale"]),
        "",
        "| σ | acc | acc, uniform attention on noised views | unimodal acc noised / clean | "
        "support noised / clean | max score noised | MBA precision of noised views / on clean input |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in result["pooled"]:
        lines.append(
            f"| {p['sigma']:g} | {fmt(p['acc'])} | {fmt(p['acc_uniform'])} | "
            f"{fmt(p['uni_acc_noised'])} / {fmt(p['uni_acc_clean'])} | "
            f"{fmt(p['support_noised'], 1)} / {fmt(p['support_clean'], 1)} | "
            f"{fmt(p['score_max_noised'])} | {fmt(p['precision_ratio_noised'])} |"
        )
    return "\n".join(lines)


def plot(result: dict, path: Path, title: str) -> Path:
    from mnp.tools.report.plots import _save, plt

    pooled = [p for p in result["pooled"] if p["sigma"] > 0]
    x = [p["sigma"] for p in pooled]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label in [
        ("acc", "multimodal"),
        ("acc_uniform", "multimodal, uniform attention on noised views"),
        ("uni_acc_clean", "unimodal, clean views"),
        ("uni_acc_noised", "unimodal, noised views"),
    ]:
        a.plot(x, [p[key] for p in pooled], marker="o", label=label)
    a.set(xscale="log", xlabel="noise σ", ylabel="test accuracy", title=title, ylim=(0, 1.02))
    a.legend(fontsize=7)
    if pooled and pooled[0]["precision_ratio_noised"] is not None:
        b.plot(
            x,
            [p["precision_ratio_noised"] for p in pooled],
            marker="o",
            label="MBA precision of noised views / on clean input",
        )
    n = result["memory_size"]
    b.plot(x, [p["support_noised"] / n for p in pooled], marker="s", label="attention support / N^m, noised views")
    b.plot(x, [p["score_max_noised"] for p in pooled], marker="^", label="largest score, noised views")
    b.set(xscale="log", xlabel="noise σ", ylim=(0, None), title="attention and MBA on the noised views")
    b.legend(fontsize=7)
    return _save(fig, path)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(
        prog="python -m mnp.tools.diagnose", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("run", help="a run directory of train.py (uses checkpoints/last.ckpt) or a checkpoint file")
    ap.add_argument("--sigmas", type=float, nargs="+", default=list(DEFAULT_SIGMAS), help="noise levels σ (0: clean)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the noise and the Monte Carlo samples")
    ap.add_argument("--data-dir", default=None, help="read the run's dataset from this directory instead")
    ap.add_argument("--json", type=Path, default=None, help="write the result here")
    ap.add_argument(
        "--plot", type=Path, default=None, help="write a PNG of accuracy, attention and MBA precision against σ"
    )
    args = ap.parse_args(argv)
    from mnp.cli.run_loading import load_run

    ckpt = Path(args.run)
    if ckpt.is_dir():
        ckpt = ckpt / "checkpoints" / "last.ckpt"
    _, model_name, dataset_name, dm, model, _ = load_run(ckpt, args.data_dir)
    from mnp.model import MNP

    if not isinstance(model, MNP):
        raise ValueError(f"{ckpt} is a run of {model_name}; mnp.tools.diagnose explains MNP's attention and MBA")
    dm.setup("test")
    views = [v.to(model.device, torch.float32) for v in dm.test_views]
    result = diagnose(model, views, dm.test_y.to(model.device), args.sigmas, args.seed)
    result.update(run=str(ckpt), model=model_name, dataset=dataset_name)
    print(table_md(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    if args.plot:
        print(f"plot: {plot(result, args.plot, f'{model_name} on {dataset_name}')}")
    return result


def cli(argv: list[str] | None = None) -> int:
    """``python -m mnp.tools.diagnose``: a refused or unreadable checkpoint, or a run of another model, is one
    ``error: ...`` line and status 1."""
    from mnp.cli.errors import USER_ERRORS

    try:
        main(argv)
    except USER_ERRORS as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    return 0
