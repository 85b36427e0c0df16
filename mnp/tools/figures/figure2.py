"""The paper's Figure 2 on the two moons: ``python -m mnp.tools.figures.figure2 --out figures/``.

Trains three MNPs with the synthetic config (conf/model_dataset/mnp_synthetic.yaml) that differ only
in the attention: dot product (eq. 1), RBF without L_RBF (β = 0) and RBF with L_RBF (eq. 9 + eq. 10).
For each it draws the predictive probability of class 1 and the uncertainty (expected entropy) on the
100×100 mesh, and the attention weights that one OOD point puts on the context memory. Writes
``figure2.png`` and ``figure2.json`` (per variant: test accuracy, mean uncertainty in- vs
out-of-distribution, and how many context points the OOD point attends to).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402

from datamodules.synthetic import mesh  # noqa: E402
from mnp.cli.builders import build_datamodule, build_model  # noqa: E402

CONF = str(Path(__file__).resolve().parents[3] / "conf")
VARIANTS = {
    "dot product": ["model.attention.similarity=dot"],
    "RBF without L_RBF": ["model.loss.beta=0.0"],
    "RBF with L_RBF": [],
}
OOD_POINT = (-2.0, 2.0)  # far from both moons (top-left corner of the mesh)


def fit_variant(overrides: list[str], epochs: int | None, seed: int):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "model=mnp",
                "dataset=synthetic",
                f"seed={seed}",
                "paths.output_dir=.",
                *overrides,
                *([f"trainer.max_epochs={epochs}"] if epochs else []),
            ],
        )
    pl.seed_everything(seed, verbose=False)
    _, dm = build_datamodule(cfg)
    _, model = build_model(cfg, dm)
    pl.Trainer(
        max_epochs=cfg.trainer.max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    ).fit(model, dm)
    return model.eval(), dm


@torch.no_grad()
def variant_maps(model, dm) -> dict:
    grid = torch.as_tensor(mesh(), dtype=torch.float32)
    probs, unc = model.predict_tensors([grid])
    ood = torch.tensor([OOD_POINT], dtype=torch.float32)
    attn = model.explain([ood]).attention[0, 0]  # (N^m,) weights of the OOD point on the context
    ctx_x, ctx_y = model.memory.context()
    test_p, test_u = model.predict_tensors(dm.test_views)
    _, ood_u = model.predict_tensors([ood])
    return {
        "p1": probs[:, 1].numpy(),
        "unc": unc.numpy(),
        "attn": attn.numpy(),
        "ctx": ctx_x[0].numpy(),
        "ctx_y": ctx_y.numpy(),
        "acc": float((test_p.argmax(1) == dm.test_y).float().mean()),
        "unc_id": float(test_u.mean()),
        "unc_ood": float(ood_u[0]),
        "attended": int((attn > 0).sum()),
    }


def shared_scales(results: dict) -> dict[str, tuple[float, float]]:
    """One colour range per row across the variants' columns, so colours compare between them: p(class 1) on [0, 1],
    the uncertainty and the attention weights from 0 to their largest value in any column."""
    return {
        "p1": (0.0, 1.0),
        "unc": (0.0, max(float(r["unc"].max()) for r in results.values())),
        "attn": (0.0, max(float(r["attn"].max()) for r in results.values())),
    }


def draw(results: dict, train_x: np.ndarray, train_y: np.ndarray, path: Path) -> dict[str, list]:
    """The figure, each row on one colour scale (:func:`shared_scales`); returns each row's mappables."""
    grid = mesh()
    n = int(np.sqrt(len(grid)))
    gx, gy = grid[:, 0].reshape(n, n), grid[:, 1].reshape(n, n)
    scales = shared_scales(results)
    levels = {k: np.linspace(lo, hi if hi > lo else lo + 1e-9, 21) for k, (lo, hi) in scales.items()}
    fig, axes = plt.subplots(3, len(results), figsize=(4.2 * len(results), 11), squeeze=False)
    drawn: dict[str, list] = {"p1": [], "unc": [], "attn": []}
    for col, (name, r) in enumerate(results.items()):
        ax = axes[0, col]
        cs = ax.contourf(gx, gy, r["p1"].reshape(n, n), levels=levels["p1"], cmap="RdBu_r", vmin=0, vmax=1)
        ax.scatter(*train_x.T, c=train_y, cmap="coolwarm", s=3, edgecolors="none", alpha=0.5)
        ax.set_title(f"{name}\np(class 1), test acc {r['acc']:.3f}")
        fig.colorbar(cs, ax=ax)
        drawn["p1"].append(cs)
        ax = axes[1, col]
        cs = ax.contourf(gx, gy, r["unc"].reshape(n, n), levels=levels["unc"], cmap="viridis", vmin=scales["unc"][0],
                         vmax=scales["unc"][1])  # fmt: skip
        ax.set_title("uncertainty (expected entropy)")
        fig.colorbar(cs, ax=ax, format="%.2f")
        drawn["unc"].append(cs)
        ax = axes[2, col]
        ax.scatter(*train_x.T, c="lightgrey", s=3, edgecolors="none")
        sc = ax.scatter(*r["ctx"].T, c=r["attn"], cmap="magma_r", s=25, edgecolors="k", linewidths=0.3,
                        vmin=scales["attn"][0], vmax=scales["attn"][1])  # fmt: skip
        ax.scatter(*OOD_POINT, marker="*", c="red", s=200, label="OOD point")
        ax.set_title(f"attention of the OOD point\n{r['attended']} of {len(r['attn'])} context points attended")
        ax.legend(loc="lower right")
        fig.colorbar(sc, ax=ax)
        drawn["attn"].append(sc)
        for a in axes[:, col]:
            a.set_xlim(gx.min(), gx.max()), a.set_ylim(gy.min(), gy.max())
    fig.suptitle("each row on one colour scale across the three attentions", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="figures", help="output directory")
    ap.add_argument("--epochs", type=int, default=None, help="override the synthetic config's epochs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results, dm = {}, None
    for name, overrides in VARIANTS.items():
        model, dm = fit_variant(overrides, args.epochs, args.seed)
        results[name] = variant_maps(model, dm)
        print(
            f"{name}: test acc {results[name]['acc']:.3f}, uncertainty ID {results[name]['unc_id']:.3f} "
            f"vs OOD point {results[name]['unc_ood']:.3f}, attends to {results[name]['attended']} context points"
        )
    draw(results, dm.train_views[0].numpy(), dm.train_y.numpy(), out / "figure2.png")
    summary = {k: {m: v[m] for m in ("acc", "unc_id", "unc_ood", "attended")} for k, v in results.items()}
    (out / "figure2.json").write_text(json.dumps(summary, indent=2))
    print(f"wrote {out / 'figure2.png'} and {out / 'figure2.json'}")
    return summary


if __name__ == "__main__":
    main()
